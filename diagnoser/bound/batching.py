"""The bound at other batch sizes, for the batching calculator, stopped where HBM runs out.

Every size is estimated under one routing model: a histogram measured at one batch says
nothing about another, and mixing it with uniform routing could make a larger batch look
faster than a smaller one. So a measured histogram is set aside here, and the note says so.
"""

from __future__ import annotations

from pydantic import ValidationError

from diagnoser.bound.capacity import GIB, does_not_fit, residency
from diagnoser.bound.estimate import compute_bound, resolve_hardware
from diagnoser.bound.floor import step_ms_from_rate
from diagnoser.errors import InputError
from diagnoser.models.documents import validation_message
from diagnoser.models.model_spec import resolve_model
from diagnoser.models.workload import Context, Workload
from diagnoser.whatif import BatchEstimate, BatchLimit, batch_curve


def _at_batch(workload: Workload, batch: int, where: str) -> Workload:
    data = {**workload.model_dump(), "batch": batch, "expert_token_histogram": None, "observed": None}
    if workload.context.per_sequence is not None:
        data["context"] = Context(mean=workload.mean_context).model_dump()
    try:
        return Workload.model_validate(data)
    except ValidationError as err:
        raise InputError(validation_message(err, f"{where}: at batch {batch}")) from None


def measured_step_ms(workload: Workload, where: str) -> float:
    """The step the curve is anchored to: observed.step_ms, else derived from observed.tokens_per_s."""
    observed = workload.observed
    if observed is not None and observed.step_ms is not None:
        return observed.step_ms
    if observed is not None and observed.tokens_per_s is not None:
        return step_ms_from_rate(observed.tokens_per_s, workload.batch, workload.tokens_per_step)
    raise InputError(f"{where}: observed.step_ms or observed.tokens_per_s is needed to anchor the estimate")


def batch_estimate(workload: Workload, sizes: list[int], where: str) -> BatchEstimate:
    """Floors and steps at ``sizes`` (and the measured batch), up to the first size that does not fit."""
    base_step = measured_step_ms(workload, where)
    spec = resolve_model(workload.model) if workload.model is not None else None
    if spec is None:
        raise InputError(f"{where}: no model: the batching estimate needs the bound")
    hw = resolve_hardware(workload)
    notes = []
    if workload.expert_token_histogram is not None:
        notes.append("the measured expert histogram belongs to one batch: every size here assumes uniform routing")
    floors: dict[int, float] = {}
    limit = None
    for size in sorted(set(sizes) | {workload.batch}):
        pinned = _at_batch(workload, size, where)
        held = residency(spec, pinned, hw)
        if not held.fits:
            limit = BatchLimit(
                batch=size, needed_gib=held.needed_bytes / GIB, weights_gib=held.weights_bytes / GIB,
                kv_gib=held.kv_bytes / GIB, capacity_gib=held.capacity_bytes / GIB, left_out=held.left_out,
            )
            if size <= workload.batch:
                raise InputError(f"{where}: at the measured batch {workload.batch} {does_not_fit(held)}")
            break
        try:
            floors[size] = compute_bound(pinned, hw).step_floor_ms
        except (ValueError, InputError) as err:  # a layout the model rejects at this size
            raise InputError(f"{where}: at batch {size}: {str(err).splitlines()[0]}") from None
    points = batch_curve(floors, workload.batch, base_step, workload.tokens_per_step)
    return BatchEstimate(points=points, does_not_fit=limit, notes=notes)
