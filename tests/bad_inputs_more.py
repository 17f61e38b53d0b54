"""The second round of the bad-input corpus (issue 27): hostile servers, text that looks like markup,
cyclic and deep documents, walkthrough figures, the environment.

Cases are ``bad_inputs.Case``s and join ``bad_inputs.corpus()``; a case with a ``server`` is run
against a fresh hostile loopback server (tests/hostile_servers.py) whose URL replaces ``{url}``.
Server cases are slow by design (a probe must wait out its own time limit), so the in-process
test samples them (``SLOW`` in the name); the script runs them all.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import shutil
import sqlite3
from pathlib import Path

import yaml

from bad_inputs import REPO, SHARED, Case, _json, _small_trace, _yaml
from hostile_servers import Behaviour, flood, gzip_bomb, hang_up, silence, sse, trickle, whole

SLOW = "[slow]"
CASE = (REPO / "examples" / "case-moe-small-experts.yaml").read_bytes()

# ---------------------------------------------------------------- 1. cyclic, deep and expanding YAML

CYCLES = {
    "self list": "&a [*a]",
    "self map": "&a {k: *a}",
    "cycle two deep": "&a {b: {c: [*a]}}",
    "cycle through a merge key": "&a {x: 1, y: {<<: *a}}",
    "200 levels of lists": "[" * 200 + "]" * 200,
    "200 levels of maps": "{a: " * 200 + "1" + "}" * 200,
}


def _bomb(levels: int = 9) -> str:
    rows = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    rows += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels + 1)]
    return "{" + ", ".join(rows) + "}"


def cyclic_document_cases() -> list[Case]:
    """Each shape as the value of a key every reader looks at, through every reader of YAML."""
    readers = {
        "case": (["diagnose", "{dir}/d.yaml"], "title: {v}\n", {}),
        "workload": (["bound", "{dir}/d.yaml"], "model: {v}\ncontext: 1024\n", {}),
        "whatif workload": (["whatif", "batch", "{dir}/d.yaml", "--batch", "1,8"], "model: llama-3.1-8b\ncontext: {v}\n", {}),
        "YAML rules": (["diagnose", "{dir}/case.yaml", "--rules", "{dir}/d.yaml"], "x: {v}\n", {"case.yaml": CASE}),
        "rule fixtures": (["rules", "test", "{dir}/d.yaml"], "fixtures: {v}\n", {}),
        "walkthrough": (["walkthrough", "lint", "{dir}/d.yaml"], "schema_version: 1\nname: {v}\n", {}),
        "answers": (["walkthrough", "decode-gap", "--answers", "{dir}/d.yaml"], "approach: {v}\n", {}),
        "case from a YAML artifact": (["case", "from", "{dir}/d.yaml"], "vllm_config: {v}\n", {}),
    }
    out = []
    shapes = {**CYCLES, "alias bomb": _bomb()}
    for reader, (argv, template, extra) in readers.items():
        for shape, text in shapes.items():
            files = {"d.yaml": template.replace("{v}", text).encode(), **extra}
            out.append(Case(f"YAML {reader}: {shape}", argv, files))
    for shape, text in shapes.items():
        out.append(Case(f"probe --option: {shape}", ["probe", "--only", "device", "--device", "cpu", "--option", f"x={text}"]))
    return out


# ---------------------------------------------------------------- 3. untrusted text that looks like markup

MARKUP = {
    "closing tag": "[/]",
    "closing a style never opened": "x[/bold] y",
    "an open style": "[bold red]loud",
    "a link": "[link=file:///etc/passwd]click[/link]",
    "a bare bracket pair": "[ ]",
    "terminal escapes": "\x1b[2J\x1b]0;owned\x07\x1b[31mred",
    "carriage return and backspace": "ok\r\x08\x08evil",
}


def _trace_with_names(text: str, where: str) -> bytes:
    trace = _small_trace()
    for event in trace["traceEvents"]:
        if where == "kernel" and event.get("cat") == "kernel":
            event["name"] = text + event.get("name", "")
        elif where == "op" and event.get("cat") == "cpu_op":
            event["name"] = text
        elif where == "annotation" and event.get("cat") in ("user_annotation", "gpu_user_annotation"):
            event["name"] = text + event.get("name", "")
    return _json(trace)


def markup_cases(report: dict) -> list[Case]:
    out = []
    case = yaml.safe_load(CASE)
    for label, text in MARKUP.items():
        out.append(Case(f"markup in a case title: {label}", ["diagnose", "{dir}/c.yaml"], {"c.yaml": _yaml({**case, "title": text})}))
        for where in ("kernel", "op", "annotation"):
            out.append(Case(f"markup in a trace {where} name: {label}", ["analyze", "{dir}/t.json"],
                            {"t.json": _trace_with_names(text, where)}))
        hosted = json.loads(json.dumps(report))
        hosted["host"] = text
        for result in hosted.get("results", []):
            result["reason"] = text
            result["status"] = "failed"
            result.pop("facts", None)
        out.append(Case(f"markup in a probe report's host and reasons: {label}", ["probe", "--probe-report", "{dir}/p.json"],
                        {"p.json": _json(hosted)}))
        out.append(Case(f"markup in --option model_name: {label}", ["probe", "--only", "device", "--device", "cpu",
                                                                      "--option", f"model_name={json.dumps(text)}"]))
    return out


# ---------------------------------------------------------------- 2. hostile servers

HEAD_SSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
STREAM = ("/v1/completions", "/v1/chat/completions")
BOMB = 2**30  # 1 GiB of zeros, about 1 MB on the wire


def _choice(extra: dict | None = None, **fields) -> bytes:
    event = {"choices": [{"text": "tok", "index": 0}], **fields, **(extra or {})}
    return json.dumps(event, allow_nan=True).encode()


def _usage(value) -> list[bytes]:
    return [_choice({"usage": {"completion_tokens": value, "prompt_tokens": 3}}) for _ in range(3)] + [b"[DONE]"]


def stream_behaviours() -> list[Behaviour]:
    """What an endpoint can do to a streaming request."""
    claims = {"1e29 tokens": 10**29, "negative tokens": -5, "1e308 tokens": 1e308, "NaN tokens": float("nan"),
              "tokens as text": "12", "tokens as true": True, "tokens as a list": [1], "a float count": 2.5}
    malformed = {
        "choices a string": b'{"choices": "x"}', "choices of numbers": b'{"choices": [1, 2]}',
        "delta a number": b'{"choices": [{"delta": 5}]}', "text a mapping": b'{"choices": [{"text": {"a": 1}}]}',
        "event a list": b"[1, 2]", "event cut short": b'{"choices": [', "event nested 100,000 deep": b"[" * 100_000,
        "error a list": b'{"error": [1, 2]}', "error with markup": b'{"error": {"message": "[/] [bold]x\\u001b[2J"}}',
        "emission time 1e40": _choice(server_timing={"emitted_ns": 1e40, "step_ms": 1}),
        "step time NaN": _choice(server_timing={"emitted_ns": 1, "step_ms": float("nan")}),
        "usage a string": b'{"choices": [{"text": "t"}], "usage": "lots"}',
    }
    out = [
        Behaviour("trickles a byte every half second", trickle(HEAD_SSE + b"data: ", b"x"), STREAM),
        Behaviour("pings forever", trickle(HEAD_SSE, b": ping\n\n", 0.2), STREAM),
        Behaviour("trickles its headers", trickle(b"HTTP/1.1 200 OK\r\n", b"X"), STREAM),
        Behaviour("one line that never ends", flood(HEAD_SSE + b"data: ", b"x"), STREAM),
        Behaviour("events without end", flood(HEAD_SSE, b"data: " + _choice() + b"\n\n"), STREAM),
        Behaviour("never answers", silence, STREAM),
        Behaviour("hangs up", hang_up, STREAM),
        Behaviour("a gzip bomb stream", whole("200 OK", gzip_bomb(BOMB), content_encoding="gzip", content_type="text/event-stream"), STREAM),
        Behaviour("a gzip bomb error body", whole("500 Oops", gzip_bomb(BOMB), content_encoding="gzip"), STREAM),
        Behaviour("a gzip stream of events", sse([_choice()] * 3 + [b"[DONE]"], gzip=True), STREAM),
        Behaviour("brotli it cannot read", whole("200 OK", b"\x00" * 100, content_encoding="br"), STREAM),
        Behaviour("a length it never sends", whole("200 OK", b"data: x", content_length="1000000000000"), STREAM),
        Behaviour("a 1 MB header", whole("200 OK", b"", x_big="y" * 2**20), STREAM),
        Behaviour("JSON, not a stream", whole("200 OK", b'{"choices": [{"text": "t"}]}'), STREAM),
        Behaviour("an error body with markup", whole("500 Oops", b'{"error": {"message": "[/] [red]x"}}'), STREAM),
        Behaviour("an error body with terminal escapes", whole("400 Bad", b"\x1b[2J\x1b]0;owned\x07 bad \x1b[5m"), STREAM),
        Behaviour("an error body of 10 MB", whole("500 Oops", b"e" * 10 * 2**20), STREAM),
    ]
    out += [Behaviour(f"claims {label}", sse(_usage(value)), STREAM) for label, value in claims.items()]
    out += [Behaviour(f"sends {label}", sse([event, b"[DONE]"]), STREAM) for label, event in malformed.items()]
    return out


def model_list_behaviours() -> list[Behaviour]:
    models = ("/v1/models",)
    return [
        Behaviour("a gzip bomb model list", whole("200 OK", gzip_bomb(BOMB), content_encoding="gzip"), models),
        Behaviour("a model list that trickles", trickle(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n{", b" "), models),
        Behaviour("a model list without end", flood(b"HTTP/1.1 200 OK\r\n\r\n[", b"1,"), models),
        Behaviour("a silent model list", silence, models),
        Behaviour("a model named in markup", whole("200 OK", b'{"data": [{"id": "[/][bold]m\\u001b[2J"}]}'), models),
        Behaviour("a model list of numbers", whole("200 OK", b'{"data": [1, 2]}'), models),
        Behaviour("a model list nested deep", whole("200 OK", b"[" * 100_000), models),
    ]


def metrics_behaviours() -> list[Behaviour]:
    metrics = ("/metrics",)
    return [
        Behaviour("a gzip bomb /metrics", whole("200 OK", gzip_bomb(BOMB), content_encoding="gzip"), metrics),
        Behaviour("a /metrics that trickles", trickle(b"HTTP/1.1 200 OK\r\n\r\n# HELP", b"x"), metrics),
        Behaviour("a /metrics line without end", flood(b"HTTP/1.1 200 OK\r\n\r\nvllm:x", b"1"), metrics),
        Behaviour("a /metrics with markup", whole("200 OK", b'vllm:num_requests_running{model_name="[/]"} 1\n'), metrics),
    ]


PROBE_TIMEOUT_S = 3
PROBE = ["probe", "--only", "client", "--endpoint", "{url}", "--timeout", str(PROBE_TIMEOUT_S)]
PROBE_LIMIT_S = PROBE_TIMEOUT_S + 10  # the acceptance: a probe ends within its --timeout plus 10 s
LIVE = ["live", "{url}", "--duration", "10", "--no-profile", "--requests", "2", "--concurrency", "1", "--max-tokens", "4"]


def server_cases() -> list[Case]:
    out = []
    for b in stream_behaviours():
        out.append(Case(f"{SLOW} probe client vs a server that {b.name}", [*PROBE, "--option", "model_name=m"], server=b,
                        max_s=PROBE_LIMIT_S))
        out.append(Case(f"{SLOW} probe client (chat) vs a server that {b.name}", [*PROBE, "--option", "api=chat"], server=b,
                        max_s=PROBE_LIMIT_S))
        out.append(Case(f"{SLOW} live vs a server that {b.name}", LIVE, server=b))
    for b in model_list_behaviours():
        out.append(Case(f"{SLOW} probe client vs {b.name}", PROBE, server=b, max_s=PROBE_LIMIT_S))
        out.append(Case(f"{SLOW} live vs {b.name}", LIVE, server=b))
    for b in metrics_behaviours():
        out.append(Case(f"{SLOW} live vs {b.name}", LIVE, server=b))
    sane = Behaviour("streams three tokens", sse(_usage(3)), STREAM)
    for proxy in ("HTTP_PROXY", "ALL_PROXY", "http_proxy"):
        out.append(Case(f"{SLOW} probe client ignores {proxy} for loopback", [*PROBE, "--option", "model_name=m", "--json"],
                        server=sane, env={proxy: "http://127.0.0.1:9", "OPENAI_API_KEY": "secret"}))
    return out


# ---------------------------------------------------------------- 4. depth and size in rules, walkthroughs, traces


def _rule(when: str, extra: str = "", rule_id: str = "xx") -> bytes:
    return (f"{rule_id}:\n  title: t\n  explanation: e\n  when: {json.dumps(when)}\n"
            "  thresholds: {L: {value: 1, unit: ms, why: w}}\n" + extra).encode()


def depth_cases() -> list[Case]:
    term = "Budget.launch_ms > L"
    rules = {
        "900 chained terms": _rule(" and ".join([term] * 900)),
        "150 chained terms": _rule(" and ".join([term] * 150)),
        "900 nots": _rule("not " * 900 + term),
        "90 nots": _rule("not " * 90 + term),
        "900 parentheses": _rule("(" * 900 + term + ")" * 900),
        "a long sum": _rule(" + ".join(["Budget.launch_ms"] * 500) + " > L"),
        "text times a case number": _rule("'x' * Workload.batch > L"),
        "text times text": _rule("'x' * 'y' > L"),
        "a huge power": _rule("Budget.step_ms ** Budget.step_ms > L"),
        "a list literal": _rule("[1] * 10 > L"),
        "a claim divided by zero": _rule(term, "  claims: Budget.launch_ms / 0\n"),
        "a claim of a NaN threshold": _rule(term, "  claims: L\n").replace(b"value: 1,", b"value: .nan,"),
        "a claim of an infinite threshold": _rule(term, "  claims: L\n").replace(b"value: 1,", b"value: .inf,"),
        "a condition dividing by zero": _rule("Budget.launch_ms / 0 > L"),
        "a parent of itself": _rule(term, "  parent: xx\n"),
        "a parent cycle": _rule(term, "  parent: yy\n") + _rule(term, "  parent: xx\n", "yy"),
        "a parent cycle of three": (_rule(term, "  parent: yy\n") + _rule(term, "  parent: zz\n", "yy")
                                    + _rule(term, "  parent: xx\n", "zz")),
    }
    out = [Case(f"YAML rules: {label}", ["diagnose", "{dir}/case.yaml", "--rules", "{dir}/r.yaml"], {"case.yaml": CASE, "r.yaml": body})
           for label, body in rules.items()]
    out += [Case(f"rules test: {label}", ["rules", "test", "{dir}/f.yaml", "--rules", "{dir}/r.yaml"],
                 {"f.yaml": b"fixtures:\n  - name: a\n    case: {}\n    fires: []\n", "r.yaml": body}) for label, body in list(rules.items())[:4]]
    for depth in (30, 400):
        nested = "1"
        for _ in range(depth):
            nested = "{calculator: amdahl, inputs: {parts_ms: {a: " + nested + ", b: 1}, part: a, new_ms: 0.5}, field: before_ms}"
        walk = ("schema_version: 1\nname: deep\ntitle: t\nscenario: s\nskills: {s: s}\nsteps:\n"
                f"  - {{id: aa, kind: number, skill: s, ask: how long, unit: ms, answer: {nested}, explain: e}}\n")
        out.append(Case(f"walkthrough: {depth} nested calculators", ["walkthrough", "lint", "{dir}/w.yaml"], {"w.yaml": walk.encode()}))
    return out


NSYS = SHARED / "nsys" / "nsys-ai" / "healthy_1pct.sqlite"


def _nsys_mutated(*statements: str):
    def setup(folder: Path) -> None:
        target = folder / "t.sqlite"
        shutil.copyfile(NSYS, target)
        with contextlib.closing(sqlite3.connect(target)) as db:
            for statement in statements:
                db.execute(statement)
            db.commit()

    return setup


def nsys_cases() -> list[Case]:
    """String-table ids out of range, huge, text or NULL; names that are markup or huge."""
    if not NSYS.is_file():
        return []
    kernel_name = "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET shortName = {}"
    # the export's StringIds.id is an INTEGER PRIMARY KEY; a damaged or hand-made one need not be
    loose = ["CREATE TABLE Loose(id, value)", "INSERT INTO Loose SELECT id, value FROM StringIds",
             "DROP TABLE StringIds", "ALTER TABLE Loose RENAME TO StringIds"]
    mutations = {
        "every string id shifted by 2**40": ["UPDATE StringIds SET id = id + 1099511627776"],
        "one string id of 1.5e9": ["UPDATE StringIds SET id = 1500000000 WHERE rowid = 1"],
        "one string id of 2**62": ["UPDATE StringIds SET id = 4611686018427387904 WHERE rowid = 2"],
        "negative string ids": ["UPDATE StringIds SET id = -id - 1"],
        "string ids as text": [*loose, "UPDATE StringIds SET id = 'seven' WHERE rowid % 2 = 0"],
        "string ids NULL": [*loose, "UPDATE StringIds SET id = NULL WHERE rowid % 3 = 0"],
        "string ids as reals": [*loose, "UPDATE StringIds SET id = id + 0.5"],
        "string ids duplicated": [*loose, "INSERT INTO StringIds SELECT id, 'again' FROM StringIds"],
        "kernel names pointing at 2**40": [kernel_name.format(1099511627776)],
        "kernel names pointing at -1": [kernel_name.format(-1)],
        "kernel names as text": [kernel_name.format("'name'")],
        "kernel names NULL": [kernel_name.format("NULL")],
        "names of markup": ["UPDATE StringIds SET value = '[/]' || value || '[bold]'"],
        "names of terminal escapes": ["UPDATE StringIds SET value = char(27) || '[2J' || value || char(27) || ']0;x' || char(7)"],
        "names of a megabyte": ["UPDATE StringIds SET value = value || zeroblob(1000000) WHERE rowid < 20"],
        "names as blobs": ["UPDATE StringIds SET value = CAST(value AS BLOB) || x'fffe'"],
        "no string table": ["DROP TABLE StringIds"],
    }
    return [Case(f"Nsight export: {label}", ["analyze", "{dir}/t.sqlite"], setup=_nsys_mutated(*sql)) for label, sql in mutations.items()]


# ---------------------------------------------------------------- 6. walkthrough figures


def walkthrough_cases(rng: random.Random) -> list[Case]:
    text = (REPO / "diagnoser" / "walkthroughs" / "scenarios" / "decode-gap.yaml").read_text().replace("name: decode-gap", "name: hostile")
    given = text[text.index("given:"):text.index("steps:")]
    numbers = [m for m in re.finditer(r"(?<=: )\d+(\.\d+)?(e\+?\d+)?(?=[,}\s])", given)]
    out = []
    for value in ("5.0e-324", "1.0e+308", "-1.0e+308", ".nan", ".inf", "0"):
        for m in rng.sample(numbers, min(3, len(numbers))):
            start = text.index("given:") + m.start()
            mutated = text[:start] + value + text[start + len(m.group(0)):]
            files = {"w.yaml": mutated.encode()}
            out.append(Case(f"walkthrough given {given[max(0, m.start() - 20):m.start()].split()[-1]} {value}: lint",
                            ["walkthrough", "lint", "{dir}/w.yaml"], files))
            out.append(Case(f"walkthrough given {given[max(0, m.start() - 20):m.start()].split()[-1]} {value}: sheet",
                            ["walkthrough", "hostile", "--interviewer", "--walkthroughs", "{dir}/w.yaml"], files))
    for target in ("../outside.yaml", "/etc/passwd", "../../../../../../etc/hostname"):
        files = {"w.yaml": text.replace("schema_version: 1", f"schema_version: 1\ncase: {target}", 1).encode()}
        out.append(Case(f"walkthrough case: {target}", ["walkthrough", "lint", "{dir}/w.yaml"], files))
    return out


# ---------------------------------------------------------------- 7 and 8. leftovers and the environment


def environment_cases() -> list[Case]:
    trace = _json(_small_trace())
    commands = {
        "analyze": (["analyze", "{dir}/t.json"], {"t.json": trace}),
        "bound": (["bound", "--model", "llama-3.1-8b", "--batch", "8", "--context", "2048"], {}),
        "diagnose": (["diagnose", "{dir}/case.yaml"], {"case.yaml": CASE}),
    }
    envs = {"COLUMNS=0": {"COLUMNS": "0"}, "COLUMNS=-5": {"COLUMNS": "-5"}, "COLUMNS=abc": {"COLUMNS": "abc"},
            "COLUMNS=100000": {"COLUMNS": "100000"}, "PYTHONIOENCODING=ascii": {"PYTHONIOENCODING": "ascii"},
            "LANG=C and ascii": {"LANG": "C", "LC_ALL": "C", "PYTHONIOENCODING": "ascii"}, "TERM=dumb": {"TERM": "dumb"}}
    out = [Case(f"env {label}: {name}", argv, files, env=env) for label, env in envs.items() for name, (argv, files) in commands.items()]
    out += [
        Case("probe --only ''", ["probe", "--only", "", "--device", "cpu"]),
        Case("probe --only ','", ["probe", "--only", ",", "--device", "cpu"]),
        Case("probe --only ' '", ["probe", "--only", " ", "--device", "cpu"]),
        *[Case(f"case speculation costing nothing: {label}", ["diagnose", "{dir}/c.yaml"], {"c.yaml": _yaml({
            "title": "free speculation", "observations": {"speculation": {"acceptance": 0.7, "draft_length": 4, **costs}}})})
          for label, costs in (
              ("all zero", {"verify_ms": 0, "draft_ms": 0, "other_ms": 0, "ordinary_step_ms": 10}),
              ("denormal", {"verify_ms": 5e-324, "draft_ms": 0, "other_ms": 0, "ordinary_step_ms": 10}),
              ("huge ordinary step", {"verify_ms": 1e-300, "draft_ms": 0, "other_ms": 0, "ordinary_step_ms": 1e308}))],
        Case("whatif speculate: a free cycle", ["whatif", "speculate", "-a", "0.8", "-k", "4", "--verify-ms", "0", "--draft-ms", "0",
                                                "--ordinary-ms", "0"]),
        Case("whatif speculate: free drafts and verify", ["whatif", "speculate", "-a", "0.8", "-k", "4", "--verify-ms", "0",
                                                          "--draft-ms", "0", "--ordinary-ms", "10"]),
    ]
    return out


def corpus(report: dict, rng: random.Random) -> list[Case]:
    return (cyclic_document_cases() + markup_cases(report) + depth_cases() + nsys_cases() + walkthrough_cases(rng)
            + environment_cases() + server_cases())
