"""Every lab fault on the real vLLM, diagnosed with the command the exercise prints: one table.

    python bench/bench_lab.py [FAULT ...] [--cases DIR]        # the real vLLM (CPU build, tiny model)
    python bench/bench_lab.py --imitation [FAULT ...] [--device cpu|cuda]   # the imitation (GPU forms)

For each fault (by default every one the lab offers) the lab starts the real server with it
(``diagnoser.lab.real.serving``: flags, background traffic, the proxy), runs ``diagnoser live``
exactly as ``lab exercise`` prints it (a subprocess, with ``--json``), and scores the diagnosis:
where the true cause ranked among the causes, its grade and bounded gain, the best-ranked other
cause (the margin) and how long the round took, start-up included. For ``none`` the rank column
lists any cause beyond health instead: measured above the noise share (host-overhead above the
healthy real vLLM's host baseline, ``faults.HOST_BASELINE_SHARE``), or indicated. ``--device cuda`` implies ``--imitation``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from diagnoser.lab.case import score
from diagnoser.models.hypothesis import Diagnosis


def real_row(name: str, cases: Path | None) -> tuple:
    from diagnoser.lab.real import live_args, serving
    from diagnoser.real_vllm.faults import FAULTS, healthy_problems

    fault = FAULTS[name]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as work, serving(fault, workdir=Path(work) / "lab") as lab:
        args = live_args(lab.url, fault)
        args[0] = shutil.which("diagnoser") or str(Path(sys.executable).with_name("diagnoser"))
        if cases:
            cases.mkdir(parents=True, exist_ok=True)
            args += ["-o", str(cases / f"{name}.yaml")]
        done = subprocess.run([*args, "--json"], capture_output=True, text=True, timeout=600)
    took = time.perf_counter() - start
    if done.returncode != 0:
        return (name, fault.cause or "-", f"live failed: {done.stderr.strip().splitlines()[-1:]}", "-", "-", "-", took)
    result = Diagnosis.model_validate(json.loads(done.stdout))
    if fault.cause is None:
        noisy = healthy_problems(result)
        return (name, "-", ", ".join(noisy) or "no cause beyond health", "-", "-", score(result, "").runner_up, took)
    return (name, fault.cause, *_ranked(score(result, fault.cause)), took)


def _ranked(s) -> tuple:
    rank = str(s.rank) if s.rank else f"not named (first: {s.top})"
    if s.rank and s.rank > 1:
        rank += f" (first: {s.top})"
    return rank, s.grade or "-", s.gain, s.runner_up


def imitation_row(name: str, device: str, cases: Path | None, profiles: str) -> tuple:
    from diagnoser.engine import diagnose, load_rulebook
    from diagnoser.lab.case import measure, measured_above_noise
    from diagnoser.lab.faults import FAULTS
    from diagnoser.lab.process import LabServer
    from diagnoser.probes.to_case import write_case

    start = time.perf_counter()
    with LabServer([] if name == "none" else [name], profile_dir=profiles, device=device) as url:
        case = measure(url)
    result = diagnose(case, load_rulebook())
    took = time.perf_counter() - start
    if cases:
        cases.mkdir(parents=True, exist_ok=True)
        write_case(cases / f"{name}.yaml", case)
    if name == "none":
        noisy = measured_above_noise(result)
        return (name, "-", ", ".join(noisy) or "no measured cause above noise", "-", "-", score(result, "").runner_up, took)
    return (name, FAULTS[name].cause, *_ranked(score(result, FAULTS[name].cause, FAULTS[name].names)), took)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("faults", nargs="*", help="faults to run (default: every one the lab offers)")
    parser.add_argument("--imitation", action="store_true", help="the project's imitation of vLLM instead of the real one")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the imitation's model runs")
    parser.add_argument("--cases", type=Path, help="also write each measured case here, as FAULT.yaml")
    args = parser.parse_args()
    imitation = args.imitation or args.device == "cuda"
    if imitation:
        from diagnoser.lab.faults import with_form

        known = with_form(args.device)
    else:
        from diagnoser.lab.real import OFFERED as known
    unknown = [name for name in args.faults if name not in known]
    if unknown:
        parser.error(f"not offered: {', '.join(unknown)} (offered: {', '.join(known)}; `diagnoser lab faults` says why)")
    rows = []
    with tempfile.TemporaryDirectory() as profiles:
        for name in args.faults or known:
            row = imitation_row(name, args.device, args.cases, profiles) if imitation else real_row(name, args.cases)
            print(f"{name}: {row[2]} ({row[-1]:.0f} s)", file=sys.stderr)
            rows.append(row)
    header = ("fault", "true cause", "rank of the true cause", "grade", "bounded gain", "next cause", "time")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for *cells, took in rows:
        print("| " + " | ".join(cells) + f" | {took:.0f} s |")
    missed = [r[0] for r in rows if not r[2].startswith("no " if r[1] == "-" else "1")]
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
