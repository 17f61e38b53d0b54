"""A generated corpus of hostile inputs, and the harness that holds diagnoser to its contract.

    .venv/bin/python tests/bad_inputs.py [--workers N] [--timeout S] [--match TEXT] [--list]

Every case is built here from the bundled examples, the shared real traces and the package's
own presets, mutated (numbers made NaN, infinite, negative, denormal, huge or the wrong type;
keys dropped; files truncated, emptied, nested without end, made of aliases, swapped for a
directory, a FIFO or /dev/zero), then fed to the command that reads it. The contract, for
every case: exit 0, or exit 2 with exactly one line on stderr; no traceback; no NaN or
infinity in what it printed; every input byte-identical, with the same mode, afterwards;
within the time limit and (measured by the script, per process) under ``MAX_PEAK_MB``. The
script prints the figures; tests/test_bad_inputs.py runs the same corpus in one process.
tests/bad_inputs_more.py adds the second round: hostile loopback servers (``server``, whose URL
replaces ``{url}``), markup, cycles, walkthroughs and the environment (``env``).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gzip
import hashlib
import io
import json
import os
import random
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from diagnoser.artifacts.artifact import MAX_BYTES as ARTIFACT_MAX_BYTES
from hostile_servers import Behaviour, Server

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
SEED = 20261201

# A number printed as NaN or infinity is a figure nobody can use; words like "info" must not match.
MAX_PEAK_MB = 1024
NON_FINITE = re.compile(r"(?<![A-Za-z_])(nan|[+-]?inf|[+-]?infinity)(?![A-Za-z_])", re.IGNORECASE)


@dataclass
class Case:
    """One hostile input: files to lay out in a fresh folder and the command that reads them."""

    name: str
    argv: list[str]  # "{dir}" is replaced by the case's folder
    files: dict[str, bytes] = field(default_factory=dict)
    setup: Callable[[Path], None] | None = None  # for what bytes cannot say: FIFOs, folders, links
    server: Behaviour | None = None  # a hostile loopback server started for the case; "{url}" is its address
    env: dict[str, str] = field(default_factory=dict)  # added to the environment the command runs in
    max_s: float | None = None  # a tighter limit than the corpus's (a probe's own --timeout plus 10 s)


@dataclass
class Outcome:
    case: Case
    ok: bool
    why: str
    seconds: float
    peak_mb: float = 0.0  # the command's peak resident memory, where measured (the script)


# ---------------------------------------------------------------- mutations of documents

BAD_VALUES: list[tuple[str, Any]] = [
    ("nan", float("nan")),
    ("inf", float("inf")),
    ("-inf", float("-inf")),
    ("negative", -1),
    ("zero", 0),
    ("huge", 1e308),
    ("denormal", 5e-324),
    ("bigint", 10**30),
    ("string", "32"),
    ("bool", True),
    ("null", None),
    ("list", [1, 2]),
    ("mapping", {"x": 1}),
]


def _leaves(node: Any, path: tuple = ()) -> Iterator[tuple]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node[:3]):
            yield from _leaves(value, (*path, index))
    else:
        yield path


def _set(doc: Any, path: tuple, value: Any) -> Any:
    out = copy.deepcopy(doc)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def _drop(doc: Any, path: tuple) -> Any:
    out = copy.deepcopy(doc)
    node = out
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return out


def _yaml(doc: Any) -> bytes:
    return yaml.safe_dump(doc, sort_keys=False).encode()


def _json(doc: Any) -> bytes:
    return json.dumps(doc, allow_nan=True).encode()  # NaN and Infinity tokens on purpose


def value_mutations(doc: Any, rng: random.Random, count: int) -> list[tuple[str, Any]]:
    """``count`` documents, each with one numeric leaf replaced by one bad value."""
    numeric = [p for p in _leaves(doc) if p and isinstance(_get(doc, p), (int, float)) and not isinstance(_get(doc, p), bool)]
    out = []
    for _ in range(count):
        path = rng.choice(numeric)
        label, value = rng.choice(BAD_VALUES)
        out.append((f"{'.'.join(map(str, path))}={label}", _set(doc, path, value)))
    return out


def _get(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def structural_mutations(doc: dict, rng: random.Random, count: int) -> list[tuple[str, Any]]:
    """Keys dropped, sections replaced by the wrong kind of node."""
    out = []
    sections = [p for p in _paths(doc) if p]
    for _ in range(count):
        path = rng.choice(sections)
        if rng.random() < 0.5:
            out.append((f"drop {'.'.join(map(str, path))}", _drop(doc, path)))
        else:
            label, value = rng.choice([("string", "oops"), ("list", []), ("number", 7), ("null", None)])
            out.append((f"{'.'.join(map(str, path))}->{label}", _set(doc, path, value)))
    return out


def _paths(node: Any, path: tuple = ()) -> Iterator[tuple]:
    yield path
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*path, key))


def broken_texts(text: bytes, yaml_like: bool) -> list[tuple[str, bytes]]:
    """The same document damaged as files get damaged: cut, emptied, binary, nested, aliased."""
    out = [
        ("truncated", text[: len(text) // 2]),
        ("empty", b""),
        ("whitespace", b"  \n\t\n"),
        ("binary", bytes(range(256)) * 4),
        ("not utf-8", text[:40] + b"\xff\xfe\xfa" + text[40:]),
        ("top-level list", b"[1, 2, 3]\n"),
        ("top-level scalar", b"42\n"),
        ("deep nesting", b"[" * 50_000 + b"]" * 50_000),
    ]
    if yaml_like:
        bomb = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
        bomb += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
        out += [
            ("alias bomb", ("\n".join(bomb) + "\n").encode()),
            ("python tag", b"!!python/object/apply:os.system ['echo pwned']\n"),
            ("tab indent", b"title: x\nobservations:\n\tbudget: 1\n"),
        ]
    else:
        out += [("NaN token", b'{"a": NaN}'), ("overflowing literal", b'{"a": 1e400}'), ("trailing comma", b'{"a": 1,}')]
    return out


def special_paths(argv_for: Callable[[str], list[str]], label: str) -> list[Case]:
    """The file is not a file: missing, a folder, a FIFO, /dev/zero, a link to itself."""

    def fifo(d: Path) -> None:
        os.mkfifo(d / "pipe.yaml")

    def folder(d: Path) -> None:
        (d / "folder.yaml").mkdir()

    def loop(d: Path) -> None:
        (d / "loop.yaml").symlink_to(d / "loop.yaml")

    return [
        Case(f"{label}: missing file", argv_for("{dir}/missing.yaml")),
        Case(f"{label}: a directory", argv_for("{dir}/folder.yaml"), setup=folder),
        Case(f"{label}: a FIFO", argv_for("{dir}/pipe.yaml"), setup=fifo),
        Case(f"{label}: /dev/zero", argv_for("/dev/zero")),
        Case(f"{label}: a symlink loop", argv_for("{dir}/loop.yaml"), setup=loop),
    ]


# ---------------------------------------------------------------- the corpus, by input kind


def _document_cases(label: str, doc: dict, name: str, argv_for: Callable[[str], list[str]], rng: random.Random,
                    values: int, structure: int) -> list[Case]:
    as_yaml = name.endswith((".yaml", ".yml"))
    dump = _yaml if as_yaml else _json
    cases = [
        Case(f"{label}: {what}", argv_for(f"{{dir}}/{name}"), {name: dump(mutated)})
        for what, mutated in value_mutations(doc, rng, values) + structural_mutations(doc, rng, structure)
    ]
    cases += [
        Case(f"{label}: {what}", argv_for(f"{{dir}}/{name}"), {name: text})
        for what, text in broken_texts(dump(doc), as_yaml)
    ]
    return cases + special_paths(argv_for, label)


def case_cases(rng: random.Random) -> list[Case]:
    out = []
    for example in ("case-moe-small-experts.yaml", "case-reported-regression.yaml"):
        doc = yaml.safe_load((REPO / "examples" / example).read_text())
        out += _document_cases(f"case {example}", doc, "case.yaml", lambda p: ["diagnose", p, "--json"], rng, 24, 8)
    doc = yaml.safe_load((REPO / "examples" / "case-moe-small-experts.yaml").read_text())
    out += _document_cases("case as JSON", doc, "case.json", lambda p: ["diagnose", p], rng, 10, 0)
    return out


def workload_cases(rng: random.Random) -> list[Case]:
    doc = yaml.safe_load((REPO / "examples" / "qwen3-30b-a3b-spreadsheet.yaml").read_text())
    out = _document_cases("workload", doc, "w.yaml", lambda p: ["bound", p, "--json"], rng, 24, 6)
    observed = {**doc, "observed": {"step_ms": 12.0}}
    out += _document_cases("whatif batch", observed, "w.yaml", lambda p: ["whatif", "batch", p, "--batch", "1,8"], rng, 12, 0)
    for what, extra in (
        ("batch 1e12", {"batch": 10**12}),
        ("65,536 DP ranks", {"batch": 65536, "layout": {"dp": 65536}}),
        ("4,096 stages", {"layout": {"pp": 4096}}),
        ("negative other state", {"other_state_bytes": {"indexer": -5}}),
        ("denormal bandwidth", {"measured_bandwidth_gbs": 5e-324}),
        ("per-sequence contexts unlike the batch", {"batch": 1, "context": [4096] * 3}),
    ):
        out.append(Case(f"workload: {what}", ["bound", "{dir}/w.yaml"], {"w.yaml": _yaml({**doc, **extra})}))
    return out


def config_cases(rng: random.Random) -> list[Case]:
    presets = json.loads((REPO / "diagnoser" / "data" / "models.json").read_text())["presets"]
    out = []
    for preset in ("qwen3-30b-a3b", "deepseek-v3"):
        cfg = presets[preset]["config"]
        out += _document_cases(f"config.json {preset}", cfg, "config.json", lambda p: ["bound", "--model", p], rng, 16, 4)
    cfg = presets["qwen3-30b-a3b"]["config"]
    for what, extra in (
        ("heads as a string", {"num_attention_heads": "32"}),
        ("zero heads", {"num_attention_heads": 0}),
        ("a billion layers", {"num_hidden_layers": 10**9}),
        ("layers as a float", {"num_hidden_layers": 1e9}),
        ("architectures a string", {"architectures": "Qwen3MoeForCausalLM"}),
        ("bias as a string", {"attention_bias": "false"}),
    ):
        out.append(Case(f"config.json: {what}", ["bound", "--model", "{dir}/config.json"], {"config.json": _json({**cfg, **extra})}))
    return out


def probe_report_cases(rng: random.Random, report: dict) -> list[Case]:
    out = _document_cases(
        "probe report", report, "probe.json", lambda p: ["bound", "--model", "llama-3.1-8b", "--probe-report", p], rng, 16, 4
    )
    out += _document_cases("probe report re-read", report, "probe.json", lambda p: ["probe", "--probe-report", p], rng, 8, 2)
    out.append(Case("probe report: exponent number", ["probe", "--probe-report", "{dir}/probe.json", "--json"],
                    {"probe.json": json.dumps(report).replace('"duration_s": ', '"duration_s": 0e0 + ').encode()}))
    return out


def _small_trace() -> dict:
    return json.loads((REPO / "tests" / "data" / "trace" / "synthetic" / "rank0.json").read_text())


def trace_cases(rng: random.Random) -> list[Case]:
    trace = _small_trace()
    events = trace["traceEvents"]
    out = []
    for what, value in (("1e300", 1e300), ("negative", -5), ("nan", float("nan")), ("string", "12"), ("huge int", 2**70)):
        for key in ("dur", "ts"):
            index = rng.randrange(len(events))
            mutated = copy.deepcopy(trace)
            if key in mutated["traceEvents"][index]:
                mutated["traceEvents"][index][key] = value
                out.append(Case(f"trace: event {index} {key}={what}", ["analyze", "{dir}/t.json"], {"t.json": _json(mutated)}))
    for what, change in (
        ("durations missing", lambda e: e.pop("dur", None)),
        ("timestamps missing", lambda e: e.pop("ts", None)),
        ("names missing", lambda e: e.pop("name", None)),
        ("categories wrong type", lambda e: e.__setitem__("cat", 5)),
        ("args not a mapping", lambda e: e.__setitem__("args", [1])),
    ):
        mutated = copy.deepcopy(trace)
        for event in mutated["traceEvents"]:
            change(event)
        out.append(Case(f"trace: {what}", ["analyze", "{dir}/t.json", "--json"], {"t.json": _json(mutated)}))
    duplicated = copy.deepcopy(trace)
    duplicated["traceEvents"] = duplicated["traceEvents"] * 2
    out.append(Case("trace: every event twice", ["analyze", "{dir}/t.json"], {"t.json": _json(duplicated)}))
    for what, props in (("not a list", "gpu"), ("entries not mappings", [1, 2]), ("wrong types", [{"id": "zero", "totalGlobalMem": "big"}])):
        out.append(Case(f"trace: deviceProperties {what}", ["analyze", "{dir}/t.json"], {"t.json": _json({**trace, "deviceProperties": props})}))
    mtia = copy.deepcopy(trace)
    mtia["deviceProperties"] = [{"id": 0, "name": "MTIA", "type": "MTIA"}]
    for event in mtia["traceEvents"]:
        if event.get("cat") == "kernel":
            event["cat"] = "mtia_kernel"
    out.append(Case("trace: an MTIA trace", ["analyze", "{dir}/t.json"], {"t.json": _json(mtia)}))
    out += [
        Case("trace: not a Chrome trace", ["analyze", "{dir}/t.json"], {"t.json": b'{"hello": "world"}'}),
        Case("trace: gzip cut short", ["analyze", "{dir}/t.json.gz"], {"t.json.gz": gzip.compress(_json(trace))[:200]}),
        Case("trace: a folder with one README", ["analyze", "{dir}/traces"], {"traces/README.txt": b"notes\n"}),
        Case("trace: an empty folder", ["analyze", "{dir}/traces"], setup=lambda d: (d / "traces").mkdir()),
        Case("trace: fake sqlite", ["analyze", "{dir}/t.sqlite"], {"t.sqlite": b"SQLite format 3\x00" + b"\x00" * 300}),
        Case("trace: sqlite without nsys tables", ["analyze", "{dir}/t.sqlite"], setup=_empty_sqlite),
    ]
    out += [
        Case(f"trace: {what}", ["analyze", "{dir}/t.json"], {"t.json": text}) for what, text in broken_texts(_json(trace), False)
    ]
    out += special_paths(lambda p: ["analyze", p], "trace")
    return out


def _empty_sqlite(d: Path) -> None:
    with contextlib.closing(sqlite3.connect(d / "t.sqlite")) as db:
        db.execute("create table other (x)")
        db.commit()


def rule_cases() -> list[Case]:
    case = (REPO / "examples" / "case-moe-small-experts.yaml").read_bytes()
    bodies = {
        "syntax error": b"def (:\n",
        "import of nothing": b"import no_such_module_anywhere\n",
        "loops at import": b"while True:\n    pass\n",
        "exits at import": b"import sys\nsys.exit(1)\n",
        "prints at import": b"print('hello')\n",
        "raises at import": b"raise RuntimeError('boom')\n",
    }
    out = [Case(f"rules: {what}", ["diagnose", "{dir}/case.yaml", "--rules", "{dir}/r.py", "--json"], {"case.yaml": case, "r.py": body})
           for what, body in bodies.items()]
    yaml_rules = {
        "not a mapping": b"- a\n- b\n",
        "bare number in when": b"x:\n  title: t\n  when: Budget.launch_ms > 3\n",
        "unknown fact": b"x:\n  title: t\n  when: Nope.field > LIMIT\n  thresholds:\n    LIMIT: {value: 1, unit: ms, why: w}\n",
        "code in when": b"x:\n  title: t\n  when: __import__('os').system('true')\n",
        "threshold nan": b"x:\n  title: t\n  when: Budget.launch_ms > L\n  thresholds:\n    L: {value: .nan, unit: ms, why: w}\n",
    }
    out += [Case(f"YAML rules: {what}", ["diagnose", "{dir}/case.yaml", "--rules", "{dir}/r.yaml"], {"case.yaml": case, "r.yaml": body})
            for what, body in yaml_rules.items()]
    out += [Case(f"rules test: {what}", ["rules", "test", "{dir}/f.yaml"], {"f.yaml": text})
            for what, text in broken_texts(b"fixtures:\n  - name: x\n    case: {}\n    fires: [nope]\n", True)]
    return out


def flag_cases() -> list[Case]:
    case = (REPO / "examples" / "case-moe-small-experts.yaml").read_bytes()
    bad_numbers = ["nan", "inf", "-inf", "-1", "0", "1e400", "abc", "5e-324"]
    out = []
    for flag in ("--batch", "--context", "--tp", "--ep", "--pp", "--dp", "--tokens-per-step",
                 "--observed-step-ms", "--observed-tokens-per-s", "--bandwidth"):
        for value in bad_numbers[:5] if flag != "--context" else bad_numbers:
            out.append(Case(f"bound {flag} {value}", ["bound", "--model", "llama-3.1-8b", flag, value]))
    for value in ("nan", "inf", "-1", "0", "1e400", "5e-324", "10GB"):
        out.append(Case(f"bound --bytes-per-step {value}", ["bound", "--bytes-per-step", value, "--bandwidth", "1TB/s"]))
        out.append(Case(f"bound --bandwidth {value} with bytes", ["bound", "--bytes-per-step", "10GB", "--bandwidth", value]))
    for option, value in (("-a", "nan"), ("-a", "1.5"), ("-k", "0"), ("--verify-ms", "nan"), ("--draft-ms", "-1"),
                          ("--ordinary-ms", "0"), ("--ordinary-ms", "inf"), ("--other-ms", "nan"), ("-k", "1000000000")):
        args = {"-a": "0.8", "-k": "4", "--verify-ms": "12", "--draft-ms": "2", "--ordinary-ms": "10"}
        args[option] = value
        out.append(Case(f"whatif speculate {option} {value}", ["whatif", "speculate", *[x for kv in args.items() for x in kv]]))
    for parts, change in ((["device=nan"], "device=1"), (["device=5"], "device=inf"), (["device=-1"], "device=1"),
                          (["device=5", "launch=x"], "device=1"), (["device=5"], "device=-3"), (["device=1e308", "b=1e308"], "device=0")):
        out.append(Case(f"whatif amdahl {parts} {change}", ["whatif", "amdahl", *[f"--part={p}" for p in parts], "--set", change]))
    for batches in ("nan", "0", "-4", "1," * 200, "1e12", "9" * 40):
        out.append(Case(f"whatif batch --batch {batches[:12]}", ["whatif", "batch", "{dir}/w.yaml", "--batch", batches],
                        {"w.yaml": b"model: llama-3.1-8b\ncontext: 1024\nbatch: 8\nobserved: {step_ms: 12}\n"}))
    for setting in ("launch.MIN_PART_SHARE=nan", "launch.MIN_PART_SHARE=inf", "launch.MIN_PART_SHARE=", "nope.X=1",
                    "launch.NOPE=1", "=1", "launch.MIN_PART_SHARE=1e400"):
        out.append(Case(f"diagnose --threshold {setting}", ["diagnose", "{dir}/case.yaml", "--threshold", setting], {"case.yaml": case}))
    for option, value in (("--timeout", "nan"), ("--timeout", "inf"), ("--timeout", "-1"), ("--max-memory-fraction", "nan"),
                          ("--delay-ms", "nan"), ("--delay-ms", "-5"), ("--option", "requests=nan"), ("--option", "requests=.inf"),
                          ("--expert-tp", "-2"), ("--ranks", "1"), ("--only", "nope")):
        out.append(Case(f"probe {option} {value}", ["probe", "--only", "device", "--device", "cpu", option, value]))
    return out


def output_cases(report: dict) -> list[Case]:
    """Outputs aimed at inputs, folders and nowhere: refused before anything is read or written."""
    case = (REPO / "examples" / "case-moe-small-experts.yaml").read_bytes()
    trace = _json(_small_trace())
    probe = _json(report)

    def link(d: Path) -> None:
        (d / "link.yaml").symlink_to(d / "case.yaml")

    return [
        Case("diagnose -o the case", ["diagnose", "{dir}/case.yaml", "-o", "{dir}/case.yaml"], {"case.yaml": case}),
        Case("diagnose -o a link to the case", ["diagnose", "{dir}/case.yaml", "-o", "{dir}/link.yaml"], {"case.yaml": case}, link),
        Case("diagnose -o a folder", ["diagnose", "{dir}/case.yaml", "-o", "{dir}"], {"case.yaml": case}),
        Case("diagnose -o nowhere", ["diagnose", "{dir}/case.yaml", "-o", "/proc/none/out.txt"], {"case.yaml": case}),
        Case("analyze --perfetto the trace", ["analyze", "{dir}/t.json", "--perfetto", "{dir}/t.json"], {"t.json": trace}),
        Case("analyze --case keeps the case", ["analyze", "{dir}/t.json", "--case", "{dir}/case.yaml"], {"t.json": trace, "case.yaml": case}),
        Case("analyze --case through a link", ["analyze", "{dir}/t.json", "--case", "{dir}/link.yaml"], {"t.json": trace, "case.yaml": case}, link),
        Case("analyze -o the trace", ["analyze", "{dir}/t.json", "-o", "{dir}/t.json"], {"t.json": trace}),
        Case("probe --case keeps the case", ["probe", "--probe-report", "{dir}/p.json", "--case", "{dir}/case.yaml"], {"p.json": probe, "case.yaml": case}),
        Case("probe -o the case", ["probe", "--probe-report", "{dir}/p.json", "--case", "{dir}/case.yaml", "-o", "{dir}/case.yaml"],
             {"p.json": probe, "case.yaml": case}),
        Case("probe -o the report", ["probe", "--probe-report", "{dir}/p.json", "-o", "{dir}/p.json"], {"p.json": probe}),
    ]


def _text_mutations(text: bytes, rng: random.Random, count: int) -> list[tuple[str, bytes]]:
    """Lines of a log or a table damaged the way copies get damaged: a number turned to letters, a
    line cut in the middle, a line repeated until the file is large."""
    lines = text.split(b"\n")
    numbered = [i for i, line in enumerate(lines) if re.search(rb"\d", line)]
    out = []
    for _ in range(count if numbered else 0):
        i = rng.choice(numbered)
        damaged = list(lines)
        if rng.random() < 0.5:
            damaged[i] = re.sub(rb"\d+(\.\d+)?", b"x1y", lines[i])
            out.append((f"line {i + 1} numbers made text", b"\n".join(damaged)))
        else:
            damaged[i] = lines[i][: len(lines[i]) // 2]
            out.append((f"line {i + 1} cut in half", b"\n".join(damaged)))
    longest = max(lines, key=len)
    # 20,000 copies, or as many as take the file just past the readers' size cap: a file of one long line (a JSON
    # report) repeated 20,000 times is gigabytes the harness itself would hold, and past the cap is all it tests
    repeats = min(20_000, ARTIFACT_MAX_BYTES // max(1, len(longest)) + 2)
    out.append((f"one line repeated {repeats:,} times", b"\n".join([*lines, *[longest] * repeats])))
    return out


def artifact_cases(rng: random.Random) -> list[Case]:
    """Every real artifact sample (tests/data/artifacts/<format>/), damaged, through ``case from``;
    and one of each format through ``diagnose`` beside a healthy scrape."""
    out = []
    folder = REPO / "tests" / "data" / "artifacts"
    for path in sorted(p for p in folder.glob("*/*") if p.is_file() and p.name != "README.md"):
        label, raw = f"artifact {path.parent.name}/{path.name}", path.read_bytes()
        name = "a" + path.suffix
        argv = ["case", "from", f"{{dir}}/{name}"]
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            mutated = value_mutations(doc, rng, 4) + structural_mutations(doc, rng, 2)
            out += [Case(f"{label}: {what}", argv, {name: _json(m)}) for what, m in mutated]
        out += [Case(f"{label}: {what}", argv, {name: text}) for what, text in _text_mutations(raw, rng, 3)]
        out += [Case(f"{label}: {what}", argv, {name: text}) for what, text in broken_texts(raw, False)[:5]]
    scrape = (REPO / "tests" / "data" / "vllm" / "healthy" / "metrics_after.txt").read_bytes()
    for kind in sorted(d for d in folder.iterdir() if d.is_dir() and d.name != "prometheus"):
        path = next(p for p in sorted(kind.iterdir()) if p.name != "README.md")
        out.append(Case(f"diagnose {kind.name}/{path.name} with a scrape", ["diagnose", "{dir}/a", "{dir}/m.txt", "--json"],
                        {"a": path.read_bytes(), "m.txt": scrape}))
    return out + special_paths(lambda p: ["case", "from", p], "case from")


def corpus(report: dict) -> list[Case]:
    import bad_inputs_more

    rng = random.Random(SEED)
    return (
        case_cases(rng) + workload_cases(rng) + config_cases(rng) + probe_report_cases(rng, report)
        + trace_cases(rng) + rule_cases() + flag_cases() + output_cases(report) + artifact_cases(rng)
        + bad_inputs_more.corpus(report, rng)
    )


def probe_report() -> dict:
    """A real report to mutate: the device probe on this machine's CPU (seconds, no GPU needed)."""
    out = subprocess.run([sys.executable, "-m", "diagnoser", "probe", "--only", "device", "--device", "cpu", "--json"],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    if out.returncode != 0:
        raise SystemExit(f"cannot build the base probe report: {out.stderr.strip()}")
    return json.loads(out.stdout)


# ---------------------------------------------------------------- running and judging


def _snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    seen = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            seen[str(path)] = (f"link:{os.readlink(path)}", 0)
        elif path.is_file():
            seen[str(path)] = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mode)
    return seen


def _lay_out(case: Case, folder: Path, url: str) -> list[str]:
    for name, data in case.files.items():
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    if case.setup:
        case.setup(folder)
    return [arg.replace("{dir}", str(folder)).replace("{url}", url) for arg in case.argv]


@contextlib.contextmanager
def _served(case: Case) -> Iterator[str]:
    """The case's hostile server for as long as the case runs (it also stops by itself)."""
    if case.server is None:
        yield ""
        return
    server = Server(case.server)
    try:
        yield server.url
    finally:
        server.stop()


def judge(case: Case, code: int | None, stdout: str, stderr: str, before: dict, after: dict, seconds: float,
          peak_mb: float = 0.0) -> Outcome:
    lines = [line for line in stderr.splitlines() if line.strip()]
    problems = []
    if peak_mb > MAX_PEAK_MB:
        problems.append(f"peak memory {peak_mb:,.0f} MB")
    if case.max_s is not None and seconds > case.max_s:
        problems.append(f"took {seconds:.1f} s, over its {case.max_s:g} s")
    if code is None:
        problems.append("timed out")
    elif code not in (0, 2):
        problems.append(f"exit {code}")
    if code == 2 and len(lines) != 1:
        problems.append(f"{len(lines)} lines on stderr")
    if "Traceback" in stderr or "internal error" in stderr or "Warning:" in stderr:
        problems.append("traceback or warning on stderr")
    if code == 0 and NON_FINITE.search(stdout):
        problems.append(f"non-finite figure in output: {NON_FINITE.search(stdout).group(0)!r}")
    changed = [Path(p).name for p, state in before.items() if after.get(p) != state]
    if changed:
        problems.append(f"input changed: {', '.join(changed)}")
    why = "; ".join(problems) or (lines[0] if lines else "exit 0")
    return Outcome(case, not problems, why, seconds, peak_mb)


def _high_water_mb(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM). Not wait4's ru_maxrss: Linux carries the
    parent's high-water mark across fork and exec, so every child would report the harness's."""
    try:
        with open(f"/proc/{pid}/status") as status:
            line = next((row for row in status if row.startswith("VmHWM:")), "VmHWM: 0 kB")
    except OSError:
        return 0.0
    return int(line.split()[1]) / 1024


def _wait(proc: subprocess.Popen, timeout_s: float) -> tuple[int | None, float]:
    """The exit code (None when killed at the time limit) and the command's peak memory in MB,
    sampled every 20 ms while it runs (a peak shorter than that can be missed)."""
    deadline = time.monotonic() + timeout_s
    peak_mb = 0.0
    while True:
        peak_mb = max(peak_mb, _high_water_mb(proc.pid))
        code = proc.poll()
        if code is not None:
            break
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            return None, peak_mb
        time.sleep(0.02)
    return code, peak_mb


def run_subprocess(case: Case, timeout_s: float) -> Outcome:
    with tempfile.TemporaryDirectory() as tmp, _served(case) as url:
        folder = Path(tmp)
        argv = _lay_out(case, folder, url)
        before = _snapshot(folder)
        start = time.perf_counter()
        with open(folder.parent / f"{folder.name}.out", "w+") as out, open(folder.parent / f"{folder.name}.err", "w+") as err:
            proc = subprocess.Popen([sys.executable, "-m", "diagnoser", *argv], stdout=out, stderr=err, cwd=folder,
                                    stdin=subprocess.DEVNULL, env={**os.environ, **case.env})
            code, peak_mb = _wait(proc, timeout_s)
            out.seek(0), err.seek(0)
            stdout, stderr = out.read(), err.read()
        os.unlink(out.name), os.unlink(err.name)
        seconds = time.perf_counter() - start
        return judge(case, code, stdout, stderr, before, _snapshot(folder), seconds, peak_mb)


def run_in_process(case: Case) -> Outcome:
    """The same judgement without a new interpreter per case, for the test suite."""
    from diagnoser.cli import main

    with tempfile.TemporaryDirectory() as tmp, _served(case) as url:
        folder = Path(tmp)
        argv = _lay_out(case, folder, url)
        before = _snapshot(folder)
        stdout, stderr = io.StringIO(), io.StringIO()
        start = time.perf_counter()
        cwd, saved = os.getcwd(), dict(os.environ)
        os.chdir(folder)
        os.environ.update(case.env)
        try:
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                code = main(argv)
        except SystemExit as done:  # a bug, not the contract: main() must return
            code = f"SystemExit({done.code})"  # type: ignore[assignment]
        finally:
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(saved)
        seconds = time.perf_counter() - start
        return judge(case, code, stdout.getvalue(), stderr.getvalue(), before, _snapshot(folder), seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds allowed per case")
    parser.add_argument("--match", default="", help="only the cases whose name contains TEXT")
    parser.add_argument("--list", action="store_true", help="list the cases and stop")
    args = parser.parse_args(argv)
    cases = [c for c in corpus(probe_report()) if args.match in c.name]
    if args.list:
        for case in cases:
            print(case.name)
        print(f"{len(cases)} cases")
        return 0
    start = time.perf_counter()
    with ThreadPoolExecutor(args.workers) as pool:
        outcomes = list(pool.map(lambda c: run_subprocess(c, args.timeout), cases))
    failed = [o for o in outcomes if not o.ok]
    for outcome in failed:
        print(f"FAIL {outcome.case.name}: {outcome.why}")
    slowest = max(outcomes, key=lambda o: o.seconds)
    largest = max(outcomes, key=lambda o: o.peak_mb)
    passed = len(outcomes) - len(failed)
    print(f"{passed}/{len(outcomes)} bad inputs ({100 * passed / len(outcomes):.1f} %) ended in exit 0 or one-line exit 2, "
          f"inputs unchanged; slowest {slowest.seconds:.1f} s ({slowest.case.name}); "
          f"peak memory {largest.peak_mb:,.0f} MB ({largest.case.name}); {time.perf_counter() - start:.0f} s in all")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
