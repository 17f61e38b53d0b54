"""``diagnoser live`` against the real vLLM (CPU build, tiny local model), one real fault at a time.

    python bench/bench_live.py [FAULT ...] [--cases DIR] [--duration S]

For each fault (``diagnoser.real_vllm.faults``) a real vLLM server starts with that fault's flags,
its background traffic (if any) runs beside the measurement, ``diagnoser live`` measures the server
over HTTP and its profiler folder, and the diagnosis runs with the bundled rules. The table says
where the true cause ranked among the causes, its grade and bounded gain, the best-ranked other
cause, and how long the round took (server start-up included). For ``none`` the rank column lists
any cause beyond health instead: graded measured above the noise share (host-overhead above the host time
a healthy real vLLM spends per step here: ``faults.HOST_BASELINE_SHARE``), or indicated.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from diagnoser.lab.case import score
from diagnoser.probes.to_case import write_case
from diagnoser.lab.real import OFFERED, UNMADE
from diagnoser.real_vllm.faults import FAULTS, healthy_problems, run_fault


def rank_text(s) -> str:
    """Where the true cause ranked, and what ranked first where it did not."""
    if not s.rank:
        return f"not named (first: {s.top})"
    return str(s.rank) + (f" (first: {s.top})" if s.rank > 1 else "")


def add_round_arguments(parser: argparse.ArgumentParser, names: str, help: str, case_name: str) -> None:
    """What to run, where to keep its cases, and how long each live measurement may take."""
    parser.add_argument(names, nargs="*", help=help)
    parser.add_argument("--cases", type=Path, help=f"also write each measured case here, as {case_name}.yaml")
    parser.add_argument("--duration", type=float, default=90.0, help="seconds each live measurement may take")


def check_names(parser: argparse.ArgumentParser, names: list[str], known) -> None:
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)} (known: {', '.join(known)})")


def measured_round(name: str, fault, args, progress=lambda line: None):
    """``diagnoser live`` on a fresh real server with the fault, its case kept under ``--cases``: (the diagnosis, the
    round's seconds, server start-up included)."""
    start = time.perf_counter()
    found, result = run_fault(fault, args.duration, progress)
    if args.cases:
        args.cases.mkdir(parents=True, exist_ok=True)
        write_case(args.cases / f"{name}.yaml", found.case)
    return result, time.perf_counter() - start


def print_table(header: tuple[str, ...], rows: list[tuple]) -> None:
    """A Markdown table whose last column is the round's time in seconds."""
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row[:-1]) + f" | {row[-1]:.0f} s |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_round_arguments(parser, "faults", f"faults to run (default: those the lab makes for real, {', '.join(OFFERED)}; "
                                          "naming one it cannot make runs it anyway)", "FAULT")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each stage as it runs")
    args = parser.parse_args()
    check_names(parser, args.faults, FAULTS)
    rows = []
    for name in args.faults or OFFERED:
        if name in UNMADE:
            print(f"{name}: run on request, although the lab does not offer it: {UNMADE[name]}", file=sys.stderr)
        progress = (lambda line: print(f"  {name}: {line}", file=sys.stderr)) if args.verbose else (lambda line: None)
        result, took = measured_round(name, name, args, progress)
        cause = FAULTS[name].cause
        if cause is None:
            noisy = healthy_problems(result)
            rows.append((name, "-", ", ".join(noisy) or "no cause beyond health", "-", "-", score(result, "").runner_up, took))
            continue
        s = score(result, cause)
        rank = rank_text(s)
        rows.append((name, cause, rank, s.grade or "-", s.gain, s.runner_up, took))
        print(f"{name}: {rank}", file=sys.stderr)
    print_table(("fault", "true cause", "rank of the true cause", "grade", "bounded gain", "next cause", "time"), rows)
    failed = [r[0] for r in rows if r[1] != "-" and not r[2].startswith("1")] + [r[0] for r in rows if r[1] == "-" and not r[2].startswith("no ")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
