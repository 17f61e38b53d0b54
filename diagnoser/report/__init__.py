"""Renderers: turn finished results into text, JSON and Markdown; they never compute."""
