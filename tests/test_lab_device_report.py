"""The lab device check's report: graph replay against eager launches, from two measured cases."""

import importlib.util

import pytest

from conftest import REPO
from diagnoser.models.case import Case
from diagnoser.models.observations import BoundaryTimings, GraphReplayObs, Observations

spec = importlib.util.spec_from_file_location("lab_device_report", REPO / "bench" / "lab_device_report.py")
report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(report)


def case(step_ms: float | None, kernels: float, graphs: float) -> Case:
    boundaries = BoundaryTimings(device_step_ms=step_ms) if step_ms else None
    graph = GraphReplayObs(kernel_launches_per_step=kernels, graph_launches_per_step=graphs)
    return Case(title="lab", observations=Observations(boundaries=boundaries, graph=graph))


def test_per_launch_cost_is_the_step_difference_over_the_extra_launches():
    g = report.graph_against_eager({"none": case(0.2, 2.0, 0.98), "eager-launches": case(0.9, 72.0, 0.0)})
    assert g["measured"] and g["eager_over_graph"] == pytest.approx(4.5)
    assert g["per_launch_us"] == pytest.approx(700 / 70)
    assert "| eager-launches | 0.900 | 72.000 | 0.000 |" in report.markdown({
        "card": "gpu", "date": "d", "torch": "t", "cuda": "c", "device": "cuda", "bench": [], "graph_against_eager": g,
        "traces": {}, "notes": []})


def test_unmeasured_says_why():
    assert report.graph_against_eager({"none": case(0.2, 2.0, 1.0)}) == {"measured": False, "why": "no eager-launches case was measured"}
    g = report.graph_against_eager({"none": case(0.2, 2.0, 1.0), "eager-launches": case(None, 72.0, 0.0)})
    assert not g["measured"] and "stamped step" in g["why"]
