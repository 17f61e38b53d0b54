"""``diagnoser live URL``: measure a running OpenAI-compatible server and diagnose it in one command."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from urllib.parse import urlsplit

import click

from diagnoser.errors import InputError


def _base_url(url: str) -> str:
    """``http://host:port`` from what a user pastes (a trailing ``/v1`` or ``/v1/completions`` included)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InputError(f"{url}: the server's URL must be http(s)://HOST:PORT")
    path = parts.path.rstrip("/")
    for suffix in ("/v1/chat/completions", "/v1/completions", "/v1"):
        path = path.removesuffix(suffix)
    return f"{parts.scheme}://{parts.netloc}{path}"


def _extra_body(text: str | None) -> dict:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as err:
        raise InputError(f"--extra-body: not JSON ({err.msg})") from None
    if not isinstance(value, dict):
        raise InputError("--extra-body: a JSON object of request fields, e.g. '{\"temperature\": 0.7}'")
    reserved = {"model", "prompt", "messages", "stream", "max_tokens"} & set(value)
    if reserved:
        raise InputError(f"--extra-body: {', '.join(sorted(reserved))} are set by the load itself")
    return value


# The stages ``measure`` reports, in order ("load: 16 streams ..."): what the progress bar counts.
STAGES = ("discover", "warm-up", "load", "ablate", "profile", "analyze")


@click.command("live")
@click.argument("url")
@click.option("--duration", type=click.FloatRange(10, 1800), default=180.0, show_default=True, help="Seconds the whole measurement may take.")
@click.option("--concurrency", type=click.IntRange(1, 64), default=4, show_default=True, help="Streams in flight during the load.")
@click.option("--requests", type=click.IntRange(1, 256), default=16, show_default=True, help="Streams in the load.")
@click.option("--max-tokens", type=click.IntRange(2, 4096), default=128, show_default=True, help="Output tokens per stream.")
@click.option("--prompt-tokens", type=click.IntRange(1, 65536), default=64, show_default=True, help="Prompt tokens per stream (about).")
@click.option("--model", help="The served model to load (default: the first /v1/models lists).")
@click.option("--extra-body", metavar="JSON", help="Fields added to every request: sampling, response_format, ...")
@click.option("--profile/--no-profile", default=True, show_default=True, help="Profile a short load through /start_profile.")
@click.option("--profile-dir", type=click.Path(path_type=Path, file_okay=False), help="Where the server writes its traces, when it does not say.")
@click.option("--server-args", metavar="CMDLINE", help="The server's command line, when its configuration endpoint is off.")
@click.option("--server-log", type=click.Path(path_type=Path, dir_okay=False), help="The server's log, for the settings it prints at start-up.")
@click.option("-o", "--case-output", "case_output", type=click.Path(path_type=Path, dir_okay=False), metavar="CASE",
              help="Keep the measured case (YAML, or JSON for .json): edit it and `diagnoser diagnose` it again.")
@click.option("--json", "as_json", is_flag=True, help="Print the diagnosis as JSON.")
@click.option("--markdown", is_flag=True, help="Print the diagnosis as Markdown.")
@click.option("--html", is_flag=True, help="Print the diagnosis as one self-contained HTML page.")
def live(url: str, duration: float, concurrency: int, requests: int, max_tokens: int, prompt_tokens: int, model: str | None,
         extra_body: str | None, profile: bool, profile_dir: Path | None, server_args: str | None, server_log: Path | None,
         case_output: Path | None, as_json: bool, markdown: bool, html: bool) -> None:
    """Measure the server at URL (discover, load, profile, analyze) and diagnose it."""
    from diagnoser.cli.progress import progress
    from diagnoser.fileio import check_outputs

    chosen = [flag for flag, on in (("--json", as_json), ("--markdown", markdown), ("--html", html)) if on]
    if len(chosen) > 1:
        raise InputError(f"{' and '.join(chosen)}: choose one output format")
    inputs = [str(server_log)] if server_log else []
    check_outputs([("-o", str(case_output) if case_output else None)], inputs)
    if server_log is not None and not server_log.is_file():
        raise InputError(f"--server-log {server_log}: no such file")
    from diagnoser.engine import diagnose, load_rulebook
    from diagnoser.live.measure import Options, measure
    from diagnoser.probes.to_case import write_case
    from diagnoser.report import render_html, render_json, render_markdown, render_text

    options = Options(duration_s=duration, concurrency=concurrency, requests=requests, max_tokens=max_tokens,
                      prompt_tokens=prompt_tokens, model=model, profile=profile, profile_dir=profile_dir,
                      server_args=server_args, server_log=server_log, extra=_extra_body(extra_body))
    with progress("live", len(STAGES)) as update:

        def say(line: str) -> None:
            stage = line.partition(":")[0]
            update(completed=STAGES.index(stage) if stage in STAGES else None, text=stage)
            if sys.stderr.isatty():  # stages are progress, for a person watching; a failure off a terminal stays one line
                click.echo(f"live: {line}", err=True)

        found = measure(_base_url(url), options, progress=say)
    for line in found.missing:
        click.echo(f"live: not measured: {line}", err=True)
    for line in found.notes:
        click.echo(f"live: disagree: {line}", err=True)
    if case_output is not None:
        write_case(case_output, found.case)
        click.echo(f"live: wrote the case to {case_output} (diagnoser diagnose {case_output} gives this ranking)", err=True)
    result = diagnose(found.case, load_rulebook())
    render = render_json if as_json else render_markdown if markdown else render_html if html else render_text
    click.echo(render(result))
