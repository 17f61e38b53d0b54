"""Renderers: hypotheses and calculator results as text, Markdown, HTML or JSON. They never compute.

Each renderer is imported on first use of its name: ``analyze`` needs ``report.console`` and
``report.untrusted`` only, and importing every renderer with the package made its text report pay for
the diagnosis and HTML renderers and all they import (about a tenth of its start on a small trace).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from diagnoser.report.calc import render_amdahl, render_batch, render_speculation
    from diagnoser.report.diagnosis import render_json, render_markdown, render_text
    from diagnoser.report.html import render_html

_HOME = {
    "render_amdahl": "calc",
    "render_batch": "calc",
    "render_speculation": "calc",
    "render_json": "diagnosis",
    "render_markdown": "diagnosis",
    "render_text": "diagnosis",
    "render_html": "html",
}

__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value
    return value
