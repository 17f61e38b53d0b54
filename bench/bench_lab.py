"""Every lab fault diagnosed end to end: serve, probe, sweep, profile, analyze, /metrics, diagnose.

    python bench/bench_lab.py [FAULT ...] [--device cpu|cuda] [--cases DIR]

For each fault (by default every one with a form on the device) a lab server starts with that fault alone;
the case is built from what the server answers over HTTP (``diagnoser.lab.case.measure``);
the diagnosis runs with the bundled rules; and the table says where the fault's true cause
ranked among the causes, its grade and bounded gain, the best-ranked other cause (the margin),
and how long the whole round took. For ``none`` the rank column lists any cause graded
measured above the noise share instead, and the next column the leading cause, if any.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from diagnoser.engine import diagnose, load_rulebook
from diagnoser.lab.case import measure, measured_above_noise, score
from diagnoser.lab.faults import FAULTS, with_form
from diagnoser.lab.process import LabServer
from diagnoser.probes.to_case import write_case


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("faults", nargs="*", help="faults to run (default: every one with a form on the device)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the lab model runs")
    parser.add_argument("--cases", type=Path, help="also write each measured case here, as FAULT.yaml")
    args = parser.parse_args()
    unknown = [name for name in args.faults if name not in with_form(args.device)]
    if unknown:
        parser.error(f"no {args.device} form: {', '.join(unknown)} (with one: {', '.join(with_form(args.device))})")
    rulebook = load_rulebook()
    rows = []
    with tempfile.TemporaryDirectory() as profiles:
        for name in args.faults or with_form(args.device):
            start = time.perf_counter()
            with LabServer([] if name == "none" else [name], profile_dir=profiles, device=args.device) as url:
                case = measure(url)
            result = diagnose(case, rulebook)
            took = time.perf_counter() - start
            if args.cases:
                args.cases.mkdir(parents=True, exist_ok=True)
                write_case(args.cases / f"{name}.yaml", case)
            if name == "none":
                noisy = measured_above_noise(result)
                rows.append((name, "-", ", ".join(noisy) or "no measured cause above noise", "-", "-", score(result, "").runner_up, took))
                continue
            s = score(result, FAULTS[name].cause, FAULTS[name].names)
            rank = str(s.rank) if s.rank else f"not named (first: {s.top})"
            if s.rank and s.rank > 1:
                rank += f" (first: {s.top})"
            rows.append((name, FAULTS[name].cause, rank, s.grade or "-", s.gain, s.runner_up, took))
    header = ("fault", "true cause", "rank of the true cause", "grade", "bounded gain", "next cause", "time")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, cause, rank, grade, gain, runner_up, took in rows:
        print(f"| {name} | {cause} | {rank} | {grade} | {gain} | {runner_up} | {took:.0f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
