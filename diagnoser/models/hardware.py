"""Accelerator presets with datasheet numbers, and the measured-bandwidth override.

Datasheet bandwidth is a ceiling that real kernels reach only in part (about 90% for a
well-tuned stream copy); a bound built on it is optimistic, which is why a probe's measured
figure replaces it when one is given.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field

from diagnoser.errors import InputError
from diagnoser.models.precision import COMPUTE_DTYPE, DType


class Hardware(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    memory_bandwidth_gbs: float = Field(gt=0, description="HBM bandwidth per device, GB/s (1e9 bytes/s)")
    memory_gib: float | None = Field(default=None, gt=0, description="memory of one device, GiB (None: not known)")
    sm_count: int | None = Field(default=None, gt=0)
    peak_tflops: dict[DType, float] = Field(default_factory=dict, description="dense tensor-core peak per dtype, TFLOP/s (empty: not known)")
    interconnect_gbs: float | None = Field(default=None, description="per-direction NVLink/xGMI bandwidth, GB/s")
    board_power_w: float | None = Field(
        default=None, gt=0, description="the board's default power limit (TDP/TBP on the datasheet), W: the limit it sustains rated clocks under"
    )
    source: str = ""
    device_names: list[list[str]] = Field(
        default_factory=list, description="token sets, one of which a driver-reported device name must contain"
    )
    other_variants: list[str] = Field(
        default_factory=list,
        description="tokens that, beside a matching token set, name another configuration of the chip (a laptop part, an export 'D' model)",
    )
    bandwidth_is_measured: bool = False

    def peak_flops(self, dtype: DType) -> float | None:
        """Peak FLOP/s for multiplying weights stored as ``dtype`` (falls back to bf16); None for a device whose
        peaks nobody gave."""
        compute = COMPUTE_DTYPE[DType(dtype)]
        tflops = self.peak_tflops.get(compute) or self.peak_tflops.get(DType.bf16)
        return None if tflops is None else tflops * 1e12

    @property
    def listed(self) -> bool:
        """A datasheet preset, not a device known only by the bandwidth someone measured on it."""
        return self.memory_gib is not None and bool(self.peak_tflops)

    def with_measured_bandwidth(self, gbs: float) -> "Hardware":
        if gbs <= 0:
            raise InputError(f"measured bandwidth must be positive, got {gbs} GB/s")
        return self.model_copy(update={"memory_bandwidth_gbs": gbs, "bandwidth_is_measured": True})


@lru_cache(maxsize=1)
def hardware_presets() -> dict[str, Hardware]:
    raw = json.loads(resources.files("diagnoser.data").joinpath("hardware.json").read_text())
    return {key: Hardware.model_validate(value) for key, value in raw["presets"].items()}


def unlisted_device(name: str, measured_gbs: float) -> Hardware:
    """A device no preset describes, known by the bandwidth measured on it: its bytes can be timed, not its
    arithmetic or whether the pin fits its memory."""
    return Hardware(name=name, memory_bandwidth_gbs=measured_gbs, bandwidth_is_measured=True,
                    source="not a preset: the measured bandwidth only")


def hardware_preset(name: str) -> Hardware:
    presets = hardware_presets()
    key = name.lower()
    if key not in presets and (matched := match_hardware(name)) is not None:
        return matched
    if key not in presets:
        raise InputError(f"unknown hardware preset {name!r}; known: {', '.join(sorted(presets))}")
    return presets[key]


def _name_tokens(text: str) -> set[str]:
    """The name's words, and each pair of neighbouring words as a phrase ("m2 pro"): a chip's tier is the word right
    after it, so "Apple M2 (MacBook Pro)" is an M2, not an M2 Pro."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return set(words) | {f"{a} {b}" for a, b in zip(words, words[1:])}


def _specificity(tokens: list[str]) -> int:
    return sum(len(token.split()) for token in tokens)


# Where a written machine lists several devices: "RTX 3090 + 2x RTX 3060", "3090+3060", "A100, A100", "4090 and 3090";
# not inside a remark in parentheses ("Apple M4 Pro (MacBook Pro, 24 GB)" is one device), nor at a "+" that ends a
# word of a product's name ("Ryzen AI Max+ 395"): a list's "+" stands after a space or a model number.
DEVICE_LIST = re.compile(r"\s*(?:(?:(?<=\s)|(?<=\d))\+|,|\band\b)\s*(?![^()]*\))", re.IGNORECASE)


# A device list as people write one: "1x RTX 3090 + 2x RTX 3060", "4 x H100", "A100, A100", "two 3090s".
COUNT_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "dual": 2, "quad": 4}
COUNT_PREFIX = re.compile(r"^\s*(?:(\d+)\s*[x×*]\s*|(\d+)\s+(?=[a-z])|(" + "|".join(COUNT_WORDS) + r")\s+)", re.IGNORECASE)
# A leading number above this is a model number (3090, 4090), not a count of devices in one box.
MAX_DEVICES = 64


def _device_part(part: str) -> tuple[int, str]:
    """One part of a device list: how many devices it counts and the device it names."""
    if m := COUNT_PREFIX.match(part):
        number = m.group(1) or m.group(2)
        count = int(number) if number else COUNT_WORDS[m.group(3).lower()]
        if count <= MAX_DEVICES:
            return count, part[m.end():].strip().lower()
    return 1, part.strip().lower()


def device_parts(value: str) -> list[tuple[int, str]]:
    """A written device list as (how many, which device) parts."""
    return [_device_part(p) for p in DEVICE_LIST.split(value) if p.strip()]

def match_hardware(device_name: str | None) -> Hardware | None:
    """The preset for the name a driver reports ("NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB").

    Variants of one chip differ in bandwidth and clocks (an H100 PCIe has 60% of the SXM's
    bandwidth), so the most specific token set that matches wins, a name holding a token of another
    variant ("RTX 4090 Laptop GPU", "RTX 4090 D") is not the preset's, and a name that matches
    none, or two presets equally well, gets no preset rather than a guess. A list of devices is one
    preset's only when every device in it is that preset: unlike devices are no one datasheet.
    """
    if not device_name:
        return None
    parts = [p for p in DEVICE_LIST.split(device_name) if p.strip()]
    if len(parts) > 1:
        matched = [_match_one(p) for p in parts]
        return matched[0] if matched[0] is not None and all(m is matched[0] for m in matched) else None
    return _match_one(device_name)


def _match_one(device_name: str) -> Hardware | None:
    found = _name_tokens(device_name)
    scored = [
        (max(_specificity(tokens) for tokens in hw.device_names if set(tokens) <= found), hw)
        for hw in hardware_presets().values()
        if any(set(tokens) <= found for tokens in hw.device_names) and not found & set(hw.other_variants)
    ]
    if not scored:
        return None
    best = max(score for score, _ in scored)
    winners = [hw for score, hw in scored if score == best]
    return winners[0] if len(winners) == 1 else None
