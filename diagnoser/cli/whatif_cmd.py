"""``diagnoser whatif``: bound one change before promising it (Amdahl, speculation, batching)."""

from __future__ import annotations

import math
from pathlib import Path

import click

from diagnoser.cli.params import Number
from diagnoser.cli.report_output import emit, output_option
from diagnoser.errors import InputError
from diagnoser.fileio import check_outputs


def _pairs(values: tuple[str, ...], option: str) -> dict[str, float]:
    parts: dict[str, float] = {}
    for raw in values:
        name, sep, number = raw.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            parts[name] = float(number)
            if not 0 <= parts[name] < math.inf:
                raise ValueError
        except ValueError:
            raise InputError(f"{option} {raw!r}: expected NAME=MS with a finite time >= 0, e.g. launch=1.5") from None
    return parts


def _emit(result, text: str, as_json: bool, output: Path | None) -> None:
    emit(result.model_dump_json(indent=2) if as_json else text, output)


# No drafter proposes more tokens per cycle than this; a larger k is a typo.
MAX_DRAFT = 1024


@click.group("whatif")
def whatif() -> None:
    """Calculators: what one change can buy at most."""


def _budget_parts(path: str) -> dict[str, float]:
    from diagnoser.models.case import load_case

    from diagnoser.whatif_inputs import budget_parts

    budget = load_case(path).observations.budget
    if budget is None:
        raise InputError(f"{path}: the case has no observations.budget to take parts from")
    return budget_parts(budget)


@whatif.command("amdahl")
@click.option("--part", "parts", multiple=True, metavar="NAME=MS", help="A non-overlapping part of the step (repeat).")
@click.option("--case", "case_path", metavar="CASE", help="Take the parts from the case's step budget instead.")
@click.option("--set", "change", required=True, metavar="NAME=MS", help="The part to change and its new time.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@output_option
def amdahl_cmd(parts: tuple[str, ...], case_path: str | None, change: str, as_json: bool, output: Path | None) -> None:
    """Recompute a serial step after changing one part: 'before / after' is the speed-up."""
    from diagnoser.report import render_amdahl
    from diagnoser.whatif import amdahl

    check_outputs([("-o", output)], [case_path] if case_path else [])
    if bool(parts) == bool(case_path):
        raise InputError("amdahl: give the parts with --part NAME=MS, or --case CASE (not both)")
    (name, value), = _pairs((change,), "--set").items()
    try:
        result = amdahl(_budget_parts(case_path) if case_path else _pairs(parts, "--part"), name, value)
    except ValueError as err:
        raise InputError(f"amdahl: {err}") from None
    _emit(result, render_amdahl(result), as_json, output)


@whatif.command("speculate")
@click.option("-a", "--acceptance", type=Number(float, 0, 1), help="Constant conditional acceptance a in [0, 1].")
@click.option("--acceptance-rate", type=Number(float, 0, 1),
              help="Instead of -a: the counters' accepted over drafted tokens at this draft length (vLLM's draft acceptance rate).")
@click.option("-k", "--draft-length", type=Number(int, 1, MAX_DRAFT), required=True, help="Drafted tokens per cycle.")
@click.option("--verify-ms", type=Number(float, 0), required=True, help="Target verification cost per cycle, ms.")
@click.option("--draft-ms", type=Number(float, 0), required=True, help="Drafting cost per cycle, ms.")
@click.option("--other-ms", type=Number(float, 0), default=0.0, show_default=True, help="Other work per cycle, ms.")
@click.option("--ordinary-ms", type=Number(float, 0), required=True, help="Ordinary one-token decode step, ms.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@output_option
def speculate_cmd(acceptance, acceptance_rate, draft_length, verify_ms, draft_ms, other_ms, ordinary_ms, as_json, output) -> None:
    """E[tokens/cycle] = (1 - a^(k+1)) / (1 - a); speed-up = E x ordinary / cycle cost. The counters' share of drafts
    accepted is 1 + k x share tokens a cycle; --acceptance-rate finds the a that gives it."""
    from diagnoser.report import render_speculation
    from diagnoser.whatif import acceptance_from_rate, speculation

    check_outputs([("-o", output)], [])
    if (acceptance is None) == (acceptance_rate is None):
        raise InputError("speculate: give the acceptance with -a, or the counters' share with --acceptance-rate (one of them)")
    if acceptance is None:
        acceptance = acceptance_from_rate(acceptance_rate, draft_length)
    try:
        result = speculation(acceptance, draft_length, verify_ms, draft_ms, other_ms, ordinary_ms)
    except ValueError as err:
        raise InputError(f"speculate: {err}") from None
    _emit(result, render_speculation(result), as_json, output)


def _batch_inputs(path: str):
    """A workload (or the workload of a case) with an observed step at its own batch."""
    from pydantic import ValidationError

    from diagnoser.models.case import Case
    from diagnoser.models.documents import load_document, validation_message
    from diagnoser.models.workload import Workload

    data = load_document(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping at the top level")
    try:
        if "workload" in data:
            case = Case.model_validate(data)
            if case.workload is None:
                raise InputError(f"{path}: the case has no workload")
            return case.workload
        return Workload.model_validate(data)
    except ValidationError as err:
        raise InputError(validation_message(err, path, Case if "workload" in data else Workload)) from None


@whatif.command("batch")
@click.argument("workload_path", metavar="WORKLOAD")
@click.option("--batch", "batches", required=True, metavar="B,B,...", help="Batch sizes to estimate, e.g. 1,8,32,64.")
@click.option("--json", "as_json", is_flag=True, help="Print the estimate as JSON.")
@output_option
def batch_cmd(workload_path: str, batches: str, as_json: bool, output: Path | None) -> None:
    """Aggregate and per-user rate at other batch sizes, the floor re-estimated by the bound.

    Sizes whose weights and KV cache do not fit in one rank's HBM are not estimated: the
    curve stops at the first one and says what it would need.
    """
    from diagnoser.bound.batching import batch_estimate
    from diagnoser.report import render_batch

    check_outputs([("-o", output)], [workload_path])
    workload = _batch_inputs(workload_path)
    try:
        sizes = sorted({int(b) for b in batches.split(",")})
    except ValueError:
        raise InputError(f"--batch {batches!r}: expected integers separated by commas") from None
    if not sizes or sizes[0] < 1 or len(sizes) > MAX_BATCH_SIZES:
        raise InputError(f"--batch {batches!r}: give 1 to {MAX_BATCH_SIZES} sizes, each at least 1")
    result = batch_estimate(workload, sizes, workload_path)
    _emit(result, render_batch(result), as_json, output)


# Each size is one run of the bound; a list longer than this is a typo, not a sweep.
MAX_BATCH_SIZES = 64
