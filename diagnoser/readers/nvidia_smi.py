"""GPU facts from the three ``nvidia-smi`` outputs people paste: ``-q``, ``--query-gpu --format=csv``, ``topo -m``.

Field names are nvidia-smi's own: the ``-q`` labels ("Max Clocks", "Clocks Event Reasons", and
"Clocks Throttle Reasons" before driver 535) and the ``--query-gpu`` names listed by
``nvidia-smi --help-query-gpu`` (``clocks_throttle_reasons.*`` renamed ``clocks_event_reasons.*``).
Reasons are named as NVML names its bits (``CLOCK_EVENT_BITS`` in probes/device.py), so a pasted
file and a probe say the same thing.

Several GPUs: clocks, power, temperature and PCIe generation are GPU 0's (the first listed), and
``throttle_reasons`` is every reason active on any GPU, since one slowed rank slows the group.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass

from diagnoser.artifacts.artifact import Artifact
from diagnoser.artifacts.formats import Format
from diagnoser.errors import InputError
from diagnoser.probes.device import CLOCK_EVENT_BITS, decode_clock_events
from diagnoser.readers.facts import SourcedFacts

PROBE = "observations.probe"
_IDLE = "GpuIdle"  # a clock drop because nothing ran: not a slowdown
_NOT_KNOWN = {"N/A", "[N/A]", "[Not Supported]", "Not Supported", "[Unknown Error]"}

# the -q label of each reason, and the --query-gpu suffix, as NVML names it
_Q_REASONS = {
    "Idle": "GpuIdle",
    "Applications Clocks Setting": "ApplicationsClocksSetting",
    "SW Power Cap": "SwPowerCap",
    "HW Slowdown": "HwSlowdown",
    "HW Thermal Slowdown": "HwThermalSlowdown",
    "HW Power Brake Slowdown": "HwPowerBrakeSlowdown",
    "Sync Boost": "SyncBoost",
    "SW Thermal Slowdown": "SwThermalSlowdown",
    "Display Clock Setting": "DisplayClockSetting",
}
_CSV_REASONS = {re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower(): name for name in CLOCK_EVENT_BITS.values()}


def _number(raw: str, where: str, what: str) -> float | None:
    """A figure with or without its unit ("1980 MHz", "629.45 W", "59"); None when the driver did not know it."""
    raw = raw.strip()
    if raw in _NOT_KNOWN:
        return None
    match = re.fullmatch(r"([-+]?\d+(?:\.\d+)?)(?:\s*[A-Za-z%]+)?", raw)
    if match is None:
        raise InputError(f'{where}: {what} is "{raw}", not a number')
    return float(match.group(1))


def _as_fact(field: str, figure: float | None) -> float | int | None:
    """The figure in the case's terms: a link generation is a whole number, nvidia-smi's percent a fraction."""
    if figure is None:
        return None
    if field == "pcie_generation":
        return int(figure)
    return figure / 100 if field == "device_utilization" else figure


def _reasons(facts: SourcedFacts, active: dict[str, str]) -> None:
    """Active reasons (name -> source) other than idle; [] is a reading too: none held the clocks down."""
    slowed = {name: source for name, source in active.items() if name != _IDLE}
    source = "; ".join(dict.fromkeys(slowed.values())) if slowed else "all clock event reasons Not Active or Idle"
    facts.add(f"{PROBE}.throttle_reasons", sorted(slowed), source)


# ---- nvidia-smi -q ------------------------------------------------------------------------------

_Q_MARK = "==============NVSMI LOG=============="
_Q_FIELDS = (  # (fact, unit check, candidate label paths in order of preference)
    ("gpu_name", None, (("Product Name",),)),
    ("sm_clock_mhz", "MHz", (("Clocks", "SM"),)),
    ("max_sm_clock_mhz", "MHz", (("Max Clocks", "SM"),)),
    ("mem_clock_mhz", "MHz", (("Clocks", "Memory"),)),
    ("max_mem_clock_mhz", "MHz", (("Max Clocks", "Memory"),)),
    ("power_w", "W", (("Power Readings", "Power Draw"), ("GPU Power Readings", "Power Draw"),
                      ("GPU Power Readings", "Average Power Draw"), ("GPU Power Readings", "Instantaneous Power Draw"))),
    ("power_limit_w", "W", (("GPU Power Readings", "Current Power Limit"), ("GPU Power Readings", "GPU Ceiling Power Limit", "Current Power Limit"),
                            ("Power Readings", "Enforced Power Limit"), ("Power Readings", "Power Limit"))),
    ("default_power_limit_w", "W", (("GPU Power Readings", "Default Power Limit"), ("Power Readings", "Default Power Limit"))),
    ("temperature_c", "C", (("Temperature", "GPU Current Temp"),)),
    ("pcie_generation", None, (("PCI", "GPU Link Info", "PCIe Generation", "Current"),)),
    ("device_utilization", "%", (("Utilization", "Gpu"), ("Utilization", "GPU"))),
)
_REASON_SECTIONS = ("Clocks Event Reasons", "Clocks Throttle Reasons")


def _recognise_query(artifact: Artifact) -> bool:
    return _Q_MARK in artifact.text[:4096]


@dataclass
class _Entry:
    value: str
    line: int


def _q_gpus(artifact: Artifact) -> list[dict[tuple[str, ...], _Entry]]:
    """Each GPU's "label : value" lines keyed by their section path, read from the indentation."""
    gpus: list[dict[tuple[str, ...], _Entry]] = []
    path: list[tuple[int, str]] = []
    for number, line in enumerate(artifact.lines, 1):
        if not line.strip():
            continue
        if line.startswith("GPU "):
            gpus.append({})
            path = []
            continue
        if not gpus or not line.startswith(" "):
            continue
        indent = len(line) - len(line.lstrip())
        label, colon, value = line.strip().partition(":")
        while path and path[-1][0] >= indent:
            path.pop()
        if colon and value.strip():
            gpus[-1][(*[p for _, p in path], label.strip())] = _Entry(value.strip(), number)
        else:
            path.append((indent, label.strip()))
    return gpus


def read_query(artifact: Artifact) -> SourcedFacts:
    gpus = _q_gpus(artifact)
    if not gpus or not gpus[0]:
        raise InputError(f"{artifact.name}: an nvidia-smi -q log without any GPU section (cut short?)")
    facts, first = SourcedFacts(), gpus[0]
    for field, unit, paths in _Q_FIELDS:
        entry, path = next(((first[p], p) for p in paths if p in first), (None, None))
        if entry is None:
            continue
        where = artifact.at(entry.line)
        if unit is None and field == "gpu_name":
            facts.add(f"{PROBE}.{field}", entry.value, where)
            continue
        if unit is not None and entry.value not in _NOT_KNOWN and not entry.value.endswith(unit):
            raise InputError(f'{where}: {" ".join(path)} is "{entry.value}", not a figure in {unit}')
        facts.add(f"{PROBE}.{field}", _as_fact(field, _number(entry.value, where, " ".join(path))), where)
    active: dict[str, str] = {}
    seen = False
    for gpu in gpus:
        for path, entry in gpu.items():
            if len(path) >= 2 and path[0] in _REASON_SECTIONS:
                seen = True
                if entry.value == "Active":
                    active.setdefault(_Q_REASONS.get(path[-1], path[-1].replace(" ", "")), artifact.at(entry.line))
    if seen:
        _reasons(facts, active)
    return facts


QUERY = Format(
    name="nvidia-smi-q",
    what="nvidia-smi -q (its NVSMI LOG text)",
    recognise=_recognise_query,
    read=read_query,
)


# ---- nvidia-smi --query-gpu=... --format=csv ----------------------------------------------------

_CSV_FIELDS = {  # fact -> query names, the preferred first
    "gpu_name": ("name", "gpu_name"),
    "sm_clock_mhz": ("clocks.current.sm", "clocks.sm"),
    "max_sm_clock_mhz": ("clocks.max.sm",),
    "mem_clock_mhz": ("clocks.current.memory", "clocks.mem", "clocks.memory"),
    "max_mem_clock_mhz": ("clocks.max.memory", "clocks.max.mem"),
    "power_w": ("power.draw", "power.draw.average", "power.draw.instant"),
    "power_limit_w": ("enforced.power.limit", "power.limit"),
    "default_power_limit_w": ("power.default_limit",),
    "temperature_c": ("temperature.gpu",),
    "pcie_generation": ("pcie.link.gen.current", "pcie.link.gen.gpucurrent"),
    "device_utilization": ("utilization.gpu",),
}
_KNOWN = {name for names in _CSV_FIELDS.values() for name in names}
_REASON_PREFIXES = ("clocks_event_reasons.", "clocks_throttle_reasons.")
_FIELD = re.compile(r"([A-Za-z0-9_.]+)(?: \[[^\]]+\])?")


def _header(line: str) -> list[str] | None:
    """The query names of a header row ("power.draw [W]" is power.draw), or None when it is not one."""
    names = []
    for cell in line.split(","):
        match = _FIELD.fullmatch(cell.strip())
        if match is None:
            return None
        names.append(match.group(1))
    return names


def _recognise_csv(artifact: Artifact) -> bool:
    first = artifact.text[:8192].split("\n", 1)[0]
    names = _header(first) if "," in first else None
    return bool(names) and any(n in _KNOWN or n.startswith(_REASON_PREFIXES) for n in names)


def read_csv(artifact: Artifact) -> SourcedFacts:
    names = _header(artifact.lines[0])
    rows = [(n, row) for n, row in enumerate(csv.reader(artifact.lines[1:], skipinitialspace=True), 2) if row]
    if names is None or not rows:
        raise InputError(f"{artifact.name}: an nvidia-smi --query-gpu header without any GPU row (run it without noheader, on a GPU box)")
    for number, row in rows:
        if len(row) != len(names):
            raise InputError(f"{artifact.at(number)}: {len(row)} values for {len(names)} columns (a cut or edited row)")
    facts, (first_line, first) = SourcedFacts(), rows[0]
    values = dict(zip(names, first))
    for field, candidates in _CSV_FIELDS.items():
        name = next((c for c in candidates if c in values), None)
        if name is None:
            continue
        where = f"{artifact.at(first_line)} {name}"
        if field == "gpu_name":
            facts.add(f"{PROBE}.{field}", values[name].strip() or None, where)
            continue
        facts.add(f"{PROBE}.{field}", _as_fact(field, _number(values[name], where, name)), where)
    active: dict[str, str] = {}
    seen = False
    for number, row in rows:
        for name, raw in zip(names, row):
            reason = next((name[len(p):] for p in _REASON_PREFIXES if name.startswith(p)), None)
            if reason is None or raw.strip() in _NOT_KNOWN or reason == "supported" or reason.startswith("counters"):
                continue
            seen, where = True, f"{artifact.at(number)} {name}"
            if reason == "active":
                mask = int(raw.strip(), 16) if re.fullmatch(r"0x[0-9A-Fa-f]+", raw.strip()) else None
                if mask is None:
                    raise InputError(f'{where} is "{raw.strip()}", not a hexadecimal mask')
                for found in decode_clock_events(mask):
                    active.setdefault(found, where)
            elif raw.strip() == "Active":
                active.setdefault(_CSV_REASONS.get(reason, reason), where)
    if seen:
        _reasons(facts, active)
    return facts


QUERY_CSV = Format(
    name="nvidia-smi-csv",
    what="nvidia-smi --query-gpu=... --format=csv (with its header row)",
    recognise=_recognise_csv,
    read=read_csv,
)


# ---- nvidia-smi topo -m -------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # nvidia-smi underlines the header on a terminal
_GPU = re.compile(r"GPU\d+")
_PCIE = {"PIX", "PXB", "PHB", "NODE", "SYS"}
_NVLINK = re.compile(r"NV\d+")


def _first_lines(lines: list[str]) -> list[str]:
    return [_ANSI.sub("", line) for line in lines if line.strip()][:2]


def _recognise_topology(artifact: Artifact) -> bool:
    head = _first_lines(artifact.text[:4096].splitlines())
    return len(head) == 2 and head[0].split()[:1] == ["GPU0"] and head[1].split()[:1] == ["GPU0"]


def topology_links(lines: list[str], first_line: int, artifact: Artifact) -> dict[tuple[int, int], str]:
    """The link of each GPU pair (i < j) from a matrix whose header starts ``lines``; shared with collect-env's copy."""
    header = _ANSI.sub("", lines[0]).split()
    gpus = [cell for cell in header if _GPU.fullmatch(cell)]
    rows = [(n, _ANSI.sub("", line).split()) for n, line in enumerate(lines[1:], first_line + 1) if _GPU.fullmatch(line.split()[0] if line.split() else "")]
    if len(rows) != len(gpus):
        raise InputError(f"{artifact.at(first_line)}: the topology matrix has {len(gpus)} GPU columns but {len(rows)} GPU rows (cut short?)")
    links: dict[tuple[int, int], str] = {}
    for i, (number, cells) in enumerate(rows):
        if len(cells) < len(gpus) + 1:
            raise InputError(f"{artifact.at(number)}: the row has {len(cells) - 1} links for {len(gpus)} GPUs (cut short?)")
        for j, cell in enumerate(cells[1 : len(gpus) + 1]):
            if cell != "X" and cell not in _PCIE and not _NVLINK.fullmatch(cell):
                raise InputError(f'{artifact.at(number)}: the GPU{i}-GPU{j} link is "{cell}", not X, NV# or PIX/PXB/PHB/NODE/SYS')
            if i < j:
                links[(i, j)] = cell
    return links


def interconnect_facts(links: dict[tuple[int, int], str], source: str) -> SourcedFacts:
    """nvlink when every GPU pair is NV#, pcie when none is. NV# counts the links bonded between
    one pair, so it says nothing reliable about a GPU's own active links (through an NVSwitch every
    pair shows all of them): ``nvlink_active_links`` is left to the probe."""
    facts = SourcedFacts()
    kinds = {"nvlink" if _NVLINK.fullmatch(cell) else "pcie" for cell in links.values()}
    if len(kinds) == 1:
        facts.add("observations.server.interconnect", kinds.pop(), source)
    elif kinds:
        facts.missing.append(
            "observations.server.interconnect: some GPU pairs are joined by NVLink and others only by PCIe; "
            "state the interconnect of the GPUs the engine runs on"
        )
    return facts


def read_topology(artifact: Artifact) -> SourcedFacts:
    start = next(n for n, line in enumerate(artifact.lines) if line.strip())
    links = topology_links(artifact.lines[start:], start + 1, artifact)
    return interconnect_facts(links, f"{artifact.at(start + 1)} (nvidia-smi topo -m, {len(links)} GPU pairs)")


TOPOLOGY = Format(
    name="nvidia-smi-topo",
    what="nvidia-smi topo -m (the GPU link matrix)",
    recognise=_recognise_topology,
    read=read_topology,
)
