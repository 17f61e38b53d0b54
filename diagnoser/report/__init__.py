"""Renderers: hypotheses and calculator results as text, Markdown, HTML or JSON. They never compute."""

from diagnoser.report.calc import render_amdahl, render_batch, render_speculation
from diagnoser.report.diagnosis import render_json, render_markdown, render_text
from diagnoser.report.html import render_html

__all__ = ["render_amdahl", "render_batch", "render_html", "render_json", "render_markdown", "render_speculation", "render_text"]
