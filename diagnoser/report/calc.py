"""What-if results as short text; a slowdown is said as such, not printed as a small speed-up."""

from __future__ import annotations

from diagnoser.whatif import AmdahlResult, BatchEstimate, SpeculationResult


def _num(x: float) -> str:
    return f"{x:.4g}"


def _assumptions(lines: list[str] | tuple[str, ...]) -> list[str]:
    return ["assumes:"] + [f"  - {line}" for line in lines]


def render_amdahl(r: AmdahlResult) -> str:
    before = " + ".join(_num(v) for v in r.parts_ms.values())
    after = " + ".join(_num(v) for v in r.parts_after_ms.values())
    return "\n".join(
        [
            f"before: {before} = {_num(r.before_ms)} ms",
            f"after:  {after} = {_num(r.after_ms)} ms  ({r.changed_part} changed)",
            f"speed-up: {_num(r.before_ms)} / {_num(r.after_ms)} = {r.speedup:.4g}x (saves {_num(r.saved_ms)} ms per step)",
            *_assumptions(r.assumptions),
        ]
    )


def render_speculation(r: SpeculationResult) -> str:
    verdict = f"{r.speedup:.2f}x, a slowdown" if r.is_slowdown else f"{r.speedup:.2f}x"
    return "\n".join(
        [
            f"E[tokens/cycle] at a={r.acceptance:g}, k={r.draft_length}: {r.expected_tokens_per_cycle:.4g}",
            f"cycle: {_num(r.cycle_ms)} ms -> {_num(r.ms_per_token)} ms per emitted token (ordinary step {_num(r.ordinary_step_ms)} ms)",
            f"speed-up: {r.expected_tokens_per_cycle:.4g} x {_num(r.ordinary_step_ms)} / {_num(r.cycle_ms)} = {verdict}",
            *_assumptions(r.assumptions),
        ]
    )


def render_batch(result: BatchEstimate) -> str:
    rows = [f"{'batch':>6} {'floor ms':>10} {'step ms':>10} {'agg tok/s':>11} {'per-user tok/s':>15}"]
    rows += [
        f"{p.batch:>6} {p.floor_ms:>10.4g} {p.step_ms:>10.4g} {p.aggregate_tokens_per_s:>11.4g} {p.per_user_tokens_per_s:>15.4g}"
        for p in result.points
    ]
    if (limit := result.does_not_fit) is not None:
        rows.append(
            f"batch {limit.batch} does not fit: weights {limit.weights_gib:.1f} GiB + KV cache {limit.kv_gib:.1f} GiB "
            f"= {limit.needed_gib:.1f} GiB per rank > {limit.capacity_gib:.0f} GiB of HBM, before {limit.left_out}; "
            "larger sizes were not estimated"
        )
    rows += [f"note: {note}" for note in result.notes]
    return "\n".join(rows + _assumptions(result.assumptions))