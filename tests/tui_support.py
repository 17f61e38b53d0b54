"""Helpers the TUI tests share: an app on a copy of the bundled example, typing into fields."""

from __future__ import annotations

import asyncio
import io
import shutil
from pathlib import Path

from conftest import REPO

EXAMPLE = REPO / "examples" / "case-moe-small-experts.yaml"


def example_copy(folder: Path) -> Path:
    """The bundled example in a scratch folder, so its session file is written there."""
    target = folder / EXAMPLE.name
    shutil.copy(EXAMPLE, target)
    return target


def make_app(source: Path | None, session_out: Path | None = None, jobs=None, start: str | None = None, walkthrough: str | None = None):
    from diagnoser.cli.tui_cmd import open_workspace
    from diagnoser.tui.app import DiagnoserApp

    workspace, _, first = open_workspace(str(source) if source else None, str(session_out) if session_out else None)
    return DiagnoserApp(workspace, start=start or first, jobs=jobs, walkthrough=walkthrough)


def shown_text(widget) -> str:
    """What a Static shows, as plain text wrapped at its width (its content may be a rich Group or Table)."""
    from rich.console import Console

    console = Console(width=widget.content_size.width or 80, record=True, file=io.StringIO())
    console.print(widget.content)
    return console.export_text()


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
