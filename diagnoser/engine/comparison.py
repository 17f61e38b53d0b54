"""Differences between runs: the A/B evidence most incident reports carry instead of a trace.

Two runs that differ in one named setting isolate that setting's effect on the figure both
measured: the delta is a measured time, so a rule may bound a gain with it. Runs that differ
in several settings at once are confounded, and say so. Pure functions over the case's runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from diagnoser.models.hardware import device_parts
from diagnoser.models.serving import WORKLOAD_SETTINGS, Run


@dataclass(frozen=True)
class RunDelta:
    """``other`` against ``base``: the settings that differ and the change in time per unit of work."""

    base: str
    other: str
    values: tuple[tuple[str, str, str], ...]  # (setting, before, after) of each change, a group folded into its lead
    figure: str  # which figure both runs measured
    base_time: float  # time per unit of work: ms per token, or s for a fixed job
    other_time: float
    in_flight: float | None = None  # the load both runs kept in flight (their shared concurrency or batch), when stated
    shared_cap: float | None = None  # the sequences both runs ran at once at most (max_num_seqs, else batch), when stated alike
    repeat_spread: float | None = None  # the wider of the two runs' stated repeat spreads, when either states one

    @property
    def changed(self) -> tuple[str, ...]:
        return tuple(name for name, _, _ in self.values)

    @property
    def before(self) -> str:
        """The setting's value in the base run, when one setting changed."""
        return self.values[0][1] if len(self.values) == 1 else ""

    @property
    def after(self) -> str:
        return self.values[0][2] if len(self.values) == 1 else ""

    @property
    def ratio(self) -> float:
        """Above 1: the other run is slower."""
        return self.other_time / self.base_time

    @property
    def setting(self) -> str:
        return self.changed[0] if len(self.changed) == 1 else "several"

    def oriented(self, before: str, after: str) -> tuple[str, float, str, float]:
        """(value, time) of the slower run, then of the faster, for a setting with these values in the base and
        the other run: an ablation reads either way round."""
        if self.other_time >= self.base_time:
            return after, self.other_time, before, self.base_time
        return before, self.base_time, after, self.other_time

    @property
    def slower_side(self) -> tuple[str, float, str, float]:
        return self.oriented(self.before, self.after)


def setting_value(run: Run, name: str) -> str:
    """A setting as runs are compared on it: lower-case text, "unset" when the run does not state it."""
    value = run.settings.get(name)
    return "unset" if value is None else str(value).lower()


# Settings that set how many streams decode at once: more of them make each stream's token slower and the
# server's tokens per second higher, by design, so runs that differ only in these are compared on the
# aggregate rate (the work done per second) when both measured it, not on one stream's time.
STREAM_COUNT_SETTINGS = frozenset({"max_num_seqs", "concurrency", "batch"})
FIGURES = ("per_token_ms", "per_user_tokens_per_s", "output_tokens_per_s", "duration_s")


def _shared_figure(a: Run, b: Run, changed: tuple[str, ...]) -> tuple[str, float, float] | None:
    """The first figure both runs measured, as time per unit (smaller is faster); the aggregate rate first
    when only the number of streams changed."""
    order = FIGURES
    if set(changed) <= STREAM_COUNT_SETTINGS:
        order = ("output_tokens_per_s", *(f for f in FIGURES if f != "output_tokens_per_s"))
    for field in order:
        x, y = getattr(a.figures, field), getattr(b.figures, field)
        if x is not None and y is not None:
            return field, as_time(field, x), as_time(field, y)
    return None


def as_time(figure: str, value: float) -> float:
    """A figure as time per unit of work (smaller is faster): a rate's reciprocal in ms, a time as it is."""
    return 1e3 / value if figure.endswith("tokens_per_s") else value


# One switch sets several settings: speculation on sets its method and draft length, a penalties
# default sets each penalty. A companion means nothing with its lead off. Runs that differ in a
# lead and its companions differ in one change, the lead's; runs that differ only in companions (a
# draft length against none) differ in whether the lead is on.
SETTING_GROUPS: dict[str, tuple[str, ...]] = {
    "speculative": ("draft_length", "speculative_method", "num_speculative_tokens", "draft_model", "draft_device"),
    "penalties": ("repetition_penalty", "frequency_penalty", "presence_penalty"),
}
# How a run with a feature off writes it.
OFF = frozenset({"unset", "false", "off", "no", "0", "none"})
# How devices are linked means nothing on one device: a link that differs beside a change to or from one device (none
# against pcie) is part of that change, the device count's.
LINK_SETTINGS = frozenset({"interconnect"})
ONE_DEVICE = "1"
# A release number belongs to its engine: a version that differs beside a change of engine is part of that change.
ENGINE_COMPANIONS = frozenset({"engine_version"})
# A release is built against its compiled stack (torch, triton, the CUDA or ROCm toolkit, its kernel libraries): one
# of those cannot change without a rebuild, so one that differs beside a change of engine or release came with it, one
# change and not several. A pure-Python library (transformers) or the GPU driver (the host's) can change on its own
# and stays a change of its own.
RELEASE_COMPANIONS = frozenset({
    "torch", "pytorch", "torch_version", "triton", "triton_version", "cuda", "cuda_version", "cuda_toolkit",
    "rocm", "rocm_version", "flashinfer", "flash_attn", "xformers", "nccl",
})


# A penalty at its identity changes no logit: repetition 1 (divide by one), frequency and presence 0 (subtract nothing).
_PENALTY_IDENTITY = {"repetition": 1.0, "frequency": 0.0, "presence": 0.0}
_PENALTY_VALUE = re.compile(r"(repetition|frequency|presence)\w*\s*[=:]?\s*(-?\d+(?:\.\d*)?)")


def _off(name: str, value: str) -> bool:
    """A setting that leaves its feature off: written as off, or a penalty at its identity (repetition_penalty 1.0 is
    the penalties switched off, however many digits it is written with)."""
    if value in OFF:
        return True
    kind = name.removesuffix("_penalty")
    if kind in _PENALTY_IDENTITY:
        try:
            return float(value) == _PENALTY_IDENTITY[kind]
        except ValueError:
            return False
    stated = _PENALTY_VALUE.findall(value) if name == "penalties" else []
    return bool(stated) and all(float(v) == _PENALTY_IDENTITY[k] for k, v in stated)


def _is_on(run: Run, lead: str, companions: tuple[str, ...]) -> str:
    """The lead as a switch: its own value when stated, else on when any companion is set."""
    if lead in run.settings:
        return "false" if _off(lead, setting_value(run, lead)) else "true"
    return "false" if all(_off(c, setting_value(run, c)) for c in companions) else "true"


def changes(base: Run, other: Run, changed: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """(setting, before, after) for each change, a group's companions folded into its lead: a draft
    length that changed with speculation is part of that one change, and a draft length against none
    is speculation switched; a link beside a change to or from one device, a release beside a change of
    engine, and the libraries a release ships beside a change of release, are part of that change."""
    folded = []
    left = set(changed)
    if "devices" in left and ONE_DEVICE in (setting_value(base, "devices"), setting_value(other, "devices")):
        left -= LINK_SETTINGS
    if "engine" in left:
        left -= ENGINE_COMPANIONS
    if left & {"engine", *ENGINE_COMPANIONS}:
        left -= RELEASE_COMPANIONS
    for lead, companions in SETTING_GROUPS.items():
        members = left & {lead, *companions}
        if not members:
            continue
        left -= members
        before, after = _is_on(base, lead, companions), _is_on(other, lead, companions)
        if before != after or lead in members:
            folded.append((lead, before, after))
        else:
            left |= members  # the lead is on in both: its companions changed as settings of their own
    folded += [(n, setting_value(base, n), setting_value(other, n)) for n in changed if n in left]
    return folded


def baseline(runs: list[Run]) -> Run | None:
    marked = [r for r in runs if r.baseline]
    return marked[0] if marked else (runs[0] if runs else None)


def named_devices(runs: list[Run], hardware: str | None) -> list[Run]:
    """Runs whose ``devices`` is a bare count equal to the devices the pinned machine lists, where those are of more
    than one kind ("RTX 3090 + RTX 4060" and devices: 2), state them by name: the count alone hides that the devices
    added are unlike, and a slower one's share of the layers is read in its turn."""
    parts = device_parts(hardware) if hardware else []
    if len({name for _, name in parts}) < 2:
        return runs
    total = sum(n for n, _ in parts)
    return [run.model_copy(update={"settings": {**run.settings, "devices": hardware}})
            if isinstance(count := run.settings.get("devices"), (int, float)) and not isinstance(count, bool) and count == total
            else run for run in runs]


def run_deltas(runs: list[Run], observed: Observed | None = None) -> list[RunDelta]:
    """Every run against the baseline run, on the first figure both measured; and the observed run (the one whose
    figures are the observation's) against the fastest run, where that is another than the baseline and differs
    from it in one change: the baseline is where the comparison started, the fastest run what the same setup reached,
    and a slowdown it shows is the observation's own (an NVFP4 checkpoint a few per cent behind the FP8 baseline and
    well behind the other NVFP4 kernel). Where the observed run is the baseline itself and another run, one change
    away, is faster, that run is what the observed setup reaches with the change: the observation's slowdown is
    located in the value it keeps (a stock setting a tuned run changed)."""
    base = baseline(runs)
    if base is None:
        return []
    deltas = [d for other in runs if other is not base and (d := _delta(base, other)) is not None]
    seen = [r for r in runs if observed is not None and _matches(r, observed)]
    faster = [d for d in deltas if d.other_time < d.base_time]
    if len(seen) != 1 or not faster:
        return deltas
    if seen[0] is base:
        by_name = {r.name: r for r in runs}
        return deltas + [r for d in faster if len(d.values) == 1 and (r := _delta(by_name[d.other], base)) is not None]
    top = next(r for r in runs if r.name == min(faster, key=lambda d: d.other_time / d.base_time).other)
    extra = _delta(top, seen[0]) if top is not seen[0] else None
    if extra is not None and len(extra.values) == 1 and extra.other_time > extra.base_time:
        deltas.append(extra)
    return deltas


# How close a run's time per token must come to the observation's to be the observed run: the rounding of a figure
# quoted to three digits.
SAME_RUN = 0.01


def same_run(ms: float, observed_ms: float) -> bool:
    """A run's time per token that is the observation's own, to the rounding of a quoted figure."""
    return abs(ms - observed_ms) <= SAME_RUN * observed_ms


@dataclass(frozen=True)
class Observed:
    """The observation's own figures, to find the run that is the observation: its time per token, or the aggregate
    rate or job time a run states where no per-token figure is given."""

    per_token_ms: float | None = None
    output_tokens_per_s: float | None = None
    duration_s: float | None = None


def _matches(run: Run, observed: Observed) -> bool:
    f = run.figures
    ms = f.per_token_ms or (1e3 / f.per_user_tokens_per_s if f.per_user_tokens_per_s else None)
    if ms is not None and observed.per_token_ms is not None:
        return same_run(ms, observed.per_token_ms)
    pairs = ((f.output_tokens_per_s, observed.output_tokens_per_s), (f.duration_s, observed.duration_s))
    return any(mine is not None and theirs is not None and same_run(mine, theirs) for mine, theirs in pairs)


def _delta(base: Run, other: Run) -> RunDelta | None:
    names = sorted(set(base.settings) | set(other.settings))
    changed = tuple(n for n in names if setting_value(base, n) != setting_value(other, n))
    shared = _shared_figure(base, other, changed)
    if shared is None or not changed:
        return None
    each = changes(base, other, changed)
    if not each:
        return None  # only companions that mean nothing with their lead off in both runs
    return RunDelta(
        base=base.name,
        other=other.name,
        values=tuple(each),
        figure=shared[0],
        base_time=shared[1],
        other_time=shared[2],
        in_flight=_shared_setting(base, other, LOAD_SETTINGS),
        shared_cap=_shared_setting(base, other, CAP_SETTINGS),
        repeat_spread=_repeat_spread(base, other),
    )


def _repeat_spread(a: Run, b: Run) -> float | None:
    """How far either run's figure moved between its own repeats: the wider of the two stated, since a difference
    must clear the noisier side's band."""
    stated = [r.repeat_spread for r in (a, b) if r.repeat_spread is not None]
    return max(stated) if stated else None


# The requests a run kept in flight (what a cap is held against), and the most it ran at once (the cap itself), each
# as the first of these settings it states.
LOAD_SETTINGS = ("concurrency", "batch")
CAP_SETTINGS = ("max_num_seqs", "batch")


def _shared_setting(a: Run, b: Run, names: tuple[str, ...]) -> float | None:
    """The first of ``names`` both runs state as the same number."""
    for name in names:
        x, y = a.settings.get(name), b.settings.get(name)
        if isinstance(x, (int, float)) and not isinstance(x, bool) and x == y:
            return float(x)
    return None


# Settings a sweep can vary: the work's size, or how many tokens a speculation cycle drafts.
SWEPT_SETTINGS = (*WORKLOAD_SETTINGS, "draft_length")


def sweep_points(runs: list[Run], setting: str) -> list[tuple[float, float]]:
    """(setting value, ms per token) for runs that differ only in a numeric ``setting`` a sweep can vary."""
    if setting not in SWEPT_SETTINGS:
        return []
    points = []
    for run in runs:
        value = run.settings.get(setting)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        timed = run.figures.per_token_ms or (1e3 / run.figures.per_user_tokens_per_s if run.figures.per_user_tokens_per_s else None)
        if timed is not None:
            points.append((run, float(value), timed))
    if len(points) < 2:
        return []
    others = [{k: v for k, v in r.settings.items() if k != setting} for r, _, _ in points]
    if any(o != others[0] for o in others):
        return []
    return sorted((v, t) for _, v, t in points)


# How close a run's stated figure must lie to the band of its repeats to be the figure they repeat.
SAME_FIGURE = 0.01


def repeated_figure(run: Run) -> str | None:
    """Which of the run's figures its repeats are of: the one stated figure inside their band (the run's value is one
    of them, or their mean or median). None when none is, or more than one is."""
    low, high = min(run.repeats) * (1 - SAME_FIGURE), max(run.repeats) * (1 + SAME_FIGURE)
    inside = [name for name in FIGURES if (value := getattr(run.figures, name)) is not None and low <= value <= high]
    return inside[0] if len(inside) == 1 else None


def repeat_decline(run: Run) -> tuple[str, float] | None:
    """(the figure, how many times slower the fastest later repeat ran than the first) when the first of a run's repeats,
    in the order they ran, was its fastest: the same work slowing once it has run a while. None otherwise."""
    found = _repeat_times(run)
    if found is None:
        return None
    figure, times = found
    first, later = times[0], min(times[1:])
    return (figure, later / first) if later > first else None


def _repeat_times(run: Run) -> tuple[str, list[float]] | None:
    figure = repeated_figure(run) if len(run.repeats) >= 2 else None
    return None if figure is None else (figure, [as_time(figure, value) for value in run.repeats])


# Settings that say which machine a run ran on.
MACHINE_SETTINGS = ("hardware", "devices", "os")


def steadiest_peer(run: Run, runs: list[Run]) -> float | None:
    """How many times slower the slowest later repeat ran than the first, for the steadiest of the other runs on the
    same machine (none of MACHINE_SETTINGS differs) that state at least as many repeats: a machine whose state builds
    under load slows every run on it alike, so a peer that held steady says the decline came with what the runs
    changed. None where no such peer states its repeats."""
    peers = [_repeat_times(r) for r in runs if r is not run and len(r.repeats) >= len(run.repeats)
             and all(setting_value(r, n) == setting_value(run, n) for n in MACHINE_SETTINGS)]
    drifts = [max(times[1:]) / times[0] for _, times in filter(None, peers)]
    return min(drifts) if drifts else None
