"""Helpers the TUI tests share: an app on a copy of the bundled example, typing into fields."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from conftest import REPO

EXAMPLE = REPO / "examples" / "case-moe-small-experts.yaml"


def example_copy(folder: Path) -> Path:
    """The bundled example in a scratch folder, so its session file is written there."""
    target = folder / EXAMPLE.name
    shutil.copy(EXAMPLE, target)
    return target


def make_app(source: Path | None, session_out: Path | None = None, jobs=None, start: str | None = None):
    from diagnoser.cli.tui_cmd import open_workspace
    from diagnoser.tui.app import DiagnoserApp

    workspace, _, first = open_workspace(str(source) if source else None, str(session_out) if session_out else None)
    return DiagnoserApp(workspace, start=start or first, jobs=jobs)


def field(screen, key: str):
    from diagnoser.tui.widgets import FormField

    return next(f for f in screen.query(FormField) if f.spec.key == key)


async def type_into(pilot, form_field, text: str) -> None:
    """Focus a field, clear it and type ``text`` key by key, as a person would."""
    form_field.control.focus()
    await pilot.press("end", "ctrl+u", *list(text))
    await pilot.pause()


def run(coro):
    return asyncio.run(coro)
