"""Time one diagnosis of a case with ~500 aggregated facts (goal: <= 0.5 s).

The case is what a large MoE deployment's analysis could produce: hundreds of kernel
classes, every collective, a budget per rank. It exercises the engine where it is slow
(matching at declare time); the rule base load is timed separately because the CLI pays it
once per run.

Usage: python bench/bench_diagnose.py [repeats]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from diagnoser.engine import diagnose, load_rulebook
from diagnoser.engine.facts import case_facts
from diagnoser.engine.runner import compute_bound_summary
from diagnoser.models.case import Case


def big_case(kernels: int = 420, collectives: int = 40, ranks: int = 32) -> Case:
    return Case.model_validate(
        {
            "title": "bench: ~500 facts",
            "workload": {"model": "qwen3-30b-a3b", "batch": 64, "context": 4096, "layout": {"tp": 4, "dp": 8}, "observed": {"step_ms": 30}},
            "observations": {
                "budget": {"step_ms": 30, "device_ms": 20, "exposed_comm_ms": 5, "launch_ms": 3, "host_ms": 2},
                "rank_budgets": [{"rank": r, "step_ms": 30, "device_ms": 19 + r % 3, "exposed_comm_ms": 5} for r in range(ranks)],
                "kernel_classes": [
                    {"kernel_class": "moe" if i % 7 == 0 else f"k{i}", "share_of_step": 0.001 + (i % 5) * 0.01, "grid_ctas": 16 + i % 200,
                     "sm_count": 132, "tokens_per_expert": 1 + i % 40, "achieved_bw_fraction": (i % 9) / 10, "backend": f"b{i % 3}"}
                    for i in range(kernels)
                ],
                "collectives": [
                    {"op": f"op{i}", "interval_ms": 1 + i % 4, "wait_ms": (i % 3) * 0.5, "transfer_ms": 0.5, "late_rank": i % ranks}
                    for i in range(collectives)
                ],
                "boundaries": {"device_step_ms": 30, "server_emission_ms": 33, "client_receipt_ms": 45},
                "context_sweep": [{"context": c, "step_ms": 20 + c / 1000} for c in (1024, 4096, 16384, 32768)],
                "server": {"cuda_graphs": False, "custom_allreduce": False, "sampling": "gpu-sort"},
                "host": {"scheduler_ms": 1.2, "python_gil_busy_fraction": 0.9},
            },
        }
    )


def _one_fact_forms(repeats: int = 20) -> tuple[float, float]:
    """Compiling the three YAML-only rules against importing their Python form, median ms."""
    from diagnoser.engine.declarative import load_declarative
    from diagnoser.engine.loader import _import_file

    root = Path(__file__).resolve().parent.parent
    yaml_file, legacy = root / "rules" / "one_fact.yaml", root / "tests" / "data" / "rules" / "legacy_one_fact.py"

    def median_ms(load) -> float:
        runs = []
        for _ in range(repeats):
            start = time.perf_counter()
            load()
            runs.append(time.perf_counter() - start)
        return statistics.median(runs) * 1e3

    return median_ms(lambda: load_declarative(yaml_file)), median_ms(lambda: _import_file(legacy))


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    start = time.perf_counter()
    book = load_rulebook()
    load_s = time.perf_counter() - start
    case = big_case()
    n_facts = len(case_facts(case, compute_bound_summary(case)))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = diagnose(case, book)
        times.append(time.perf_counter() - start)
    best = statistics.median(times)
    yaml_ms, python_ms = _one_fact_forms()
    print(f"rule base load:   {load_s * 1e3:7.1f} ms ({len(book.specs)} rules, checks included)")
    print(f"one_fact rules:   {yaml_ms:7.2f} ms as YAML, {python_ms:7.2f} ms as their Python form (3 rules, compile only)")
    print(f"diagnose:         {best * 1e3:7.1f} ms median of {repeats} ({n_facts} facts, {len(result.hypotheses)} hypotheses)")
    print(f"goal:             <= 500 ms per diagnosis -> {'met' if best <= 0.5 else 'NOT met'}")


if __name__ == "__main__":
    main()
