"""Snapshots of the Bound, Interview, Hypotheses and What-if screens at 80x24 and 120x40, and of
the Walkthrough screen at 80x24 showing a trap's verdict.

Regenerate on purpose (after reading the report) with ``pytest tests/test_tui_snapshots.py
--snapshot-update``; the SVGs live in ``tests/__snapshots__/test_tui_snapshots/``. The app runs
on a copy of the bundled example, so no clock and no absolute path reaches the screen.
"""

from __future__ import annotations

import pytest
from tui_support import example_copy, make_app

SIZES = [(80, 24), (120, 40)]
KEYS = {"bound": "2", "interview": "4", "hypotheses": "5", "whatif": "6"}


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("stage", list(KEYS))
def test_stage_screen(snap_compare, tmp_path, stage, size):
    app = make_app(example_copy(tmp_path), start="bound")

    async def open_stage(pilot):
        await pilot.press(KEYS[stage])
        await pilot.pause()
        for widget in pilot.app.screen.query("Input, TextArea"):
            widget.cursor_blink = False
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=open_stage)


def test_walkthrough_screen(snap_compare, tmp_path):
    app = make_app(example_copy(tmp_path), walkthrough="decode-gap")

    async def answer_two(pilot):
        await pilot.press("enter", *"b d a e c f", "enter", "enter", "d", "enter")  # right, then the trap "misconfigured"
        await pilot.pause()

    assert snap_compare(app, terminal_size=(80, 24), run_before=answer_two)
