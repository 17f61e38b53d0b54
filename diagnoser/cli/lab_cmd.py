"""``diagnoser lab``: a small decode server with injectable faults, and a diagnosis exercise on it."""

from __future__ import annotations

import click

from diagnoser.errors import InputError


@click.group("lab")
def lab() -> None:
    """A tiny streaming decode server whose faults diagnoser's own probes and rules must find."""


@lab.command("serve")
@click.option("--fault", "faults", multiple=True, metavar="NAME", help="Switch a fault on (repeatable; `diagnoser lab faults` lists them).")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="Port to listen on (0: a free one).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True, help="Where the model runs.")
@click.option("--profile-dir", default="lab-profiles", show_default=True, help="Folder /stop_profile writes traces to.")
def serve(faults: tuple[str, ...], port: int, host: str, device: str, profile_dir: str) -> None:
    """Serve the lab model over HTTP until Ctrl-C (OpenAI-compatible streaming, /metrics, profiling)."""
    from diagnoser.lab.faults import parse_faults

    chosen = parse_faults(faults, device)
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise InputError("--device cuda: no CUDA device is visible to torch")
    from diagnoser.lab.process import serve as run_server
    from diagnoser.lab.server import LabConfig

    run_server(LabConfig(faults=chosen, device=device, profile_dir=profile_dir), host=host, port=port)


@lab.command("faults")
def faults() -> None:
    """List the faults and what each does."""
    from diagnoser.lab.faults import FAULTS

    for fault in FAULTS.values():
        click.echo(f"{fault.name:16} {'/'.join('GPU' if d == 'cuda' else 'CPU' for d in fault.devices):8} {fault.what}")


@lab.command("exercise")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True, help="Where the model runs.")
@click.option("--seed", type=int, default=None, help="Draw the hidden fault reproducibly.")
@click.option("--profile-dir", default="lab-profiles", show_default=True, help="Folder /stop_profile writes traces to.")
def exercise(device: str, seed: int | None, profile_dir: str) -> None:
    """Start the lab with a hidden fault; diagnose it with the normal commands, then name its cause."""
    from diagnoser.lab.exercise import draw, verdict
    from diagnoser.lab.process import LabServer

    fault = draw(device, seed)
    with LabServer([] if fault.name == "none" else [fault.name], profile_dir=profile_dir, device=device) as url:
        click.echo(f"A lab server with a hidden fault (or none) is serving at {url}")
        click.echo(f"  diagnoser probe --only client,context_sweep --endpoint {url} --case case.yaml")
        click.echo(f"  curl -X POST {url}/start_profile; (send requests); curl -X POST {url}/stop_profile")
        click.echo("  diagnoser analyze TRACE --case case.yaml; diagnoser diagnose case.analyzed.yaml")
        answer = click.prompt("When you are done, the rule id of the cause (or none)", default="none", show_default=False)
    right, reveal = verdict(fault, answer)
    click.echo(f"{'right' if right else 'not this time'}: {reveal}")
