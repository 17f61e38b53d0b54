"""``diagnoser lab``: the real vLLM with a fault made by real means, and a diagnosis exercise on it.

The imitation (``--imitation``) stays for what the real server cannot show on this machine: the
GPU forms (graph replay, small expert kernels) and the faults with no real means here.
"""

from __future__ import annotations

import signal

import click

from diagnoser.errors import InputError

IMITATION_HINT = "the imitation needs the lab extras: pip install 'diagnoser[lab,gpu]'"


@click.group("lab")
def lab() -> None:
    """The real vLLM (or the imitation) with injectable faults, to diagnose with the normal commands."""


def _stop_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so the server, proxy and traffic this process started are stopped."""
    def raise_interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, raise_interrupt)


def _require_imitation() -> None:
    import importlib.util

    missing = [m for m in ("fastapi", "uvicorn", "prometheus_client", "torch") if importlib.util.find_spec(m) is None]
    if missing:
        raise InputError(f"{IMITATION_HINT} (missing: {', '.join(missing)})")


@lab.command("serve")
@click.option("--fault", "faults", multiple=True, metavar="NAME", help="The fault to make (`diagnoser lab faults` lists them).")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="Port to listen on (0: a free one).")
@click.option("--workdir", default="lab-run", show_default=True, help="Folder for the server's log and profiles (real vLLM).")
@click.option("--imitation", is_flag=True, help="Serve the project's imitation of vLLM instead (GPU forms, faults with no real means here).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (imitation).")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True, help="Where the model runs (imitation).")
@click.option("--profile-dir", default="lab-profiles", show_default=True, help="Folder /stop_profile writes traces to (imitation).")
def serve(faults: tuple[str, ...], port: int, workdir: str, imitation: bool, host: str, device: str, profile_dir: str) -> None:
    """Serve until Ctrl-C; everything started (server, proxy, background traffic) stops on exit."""
    if imitation or device == "cuda":
        _serve_imitation(faults, port, host, device, profile_dir)
        return
    from diagnoser.lab.process import READY
    from diagnoser.lab.real import fault, preflight, serving

    if len(faults) > 1:
        raise InputError("--fault: the real vLLM takes one fault at a time (the imitation combines them: --imitation)")
    chosen = fault(faults[0] if faults else "none")
    preflight(chosen, port)
    _stop_on_sigterm()
    click.echo(f"diagnoser lab: starting the real vLLM with fault {chosen.name} ({chosen.how}); 1-3 minutes", err=True)
    try:
        with serving(chosen, port=port, workdir=workdir, limit=None) as running:
            click.echo(f"{READY}{running.url}")
            click.echo(f"diagnoser lab: server log {running.log}; Ctrl-C stops everything", err=True)
            signal.pause()
    except KeyboardInterrupt:
        pass


def _serve_imitation(faults: tuple[str, ...], port: int, host: str, device: str, profile_dir: str) -> None:
    _require_imitation()
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
    """Each fault: how it is made, what a healthy run looks like; then those not made here, and why."""
    from diagnoser.lab.faults import FAULTS as IMITATED
    from diagnoser.lab.real import OFFERED, UNMADE
    from diagnoser.real_vllm.faults import FAULTS

    click.echo("On the real vLLM (lab serve --fault NAME; lab exercise draws among them):")
    for name in OFFERED:
        f = FAULTS[name]
        click.echo(f"  {name:20} cause {f.cause or '-'}\n  {'':20} made by: {f.how}\n  {'':20} healthy: {f.healthy}")
    click.echo("Not made on the real vLLM here:")
    for name, why in UNMADE.items():
        click.echo(f"  {name:20} {why}")
    click.echo("The imitation (lab serve --imitation --fault NAME [--device cuda]):")
    for f in IMITATED.values():
        click.echo(f"  {f.name:20} {'/'.join('GPU' if d == 'cuda' else 'CPU' for d in f.devices):8} {f.what}")


@lab.command("exercise")
@click.option("--seed", type=int, default=None, help="Draw the hidden fault reproducibly.")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True, help="Port to listen on (0: a free one).")
@click.option("--workdir", default="lab-run", show_default=True, help="Folder for the server's log and profiles.")
def exercise(seed: int | None, port: int, workdir: str) -> None:
    """Start the real vLLM with a hidden fault; diagnose it with the printed commands, then name its cause."""
    from diagnoser.lab.exercise import commands, draw, verdict
    from diagnoser.lab.real import preflight, serving

    hidden = draw(seed)
    preflight(hidden, port)
    _stop_on_sigterm()
    click.echo("diagnoser lab: starting the real vLLM with a hidden fault (or none); 1-3 minutes", err=True)
    with serving(hidden, port=port, workdir=workdir, limit=None) as running:
        click.echo(f"A real vLLM with a hidden fault (or none) is serving at {running.url}. Diagnose it:")
        for line in commands(running, hidden):
            click.echo(f"  {line}")
        answer = click.prompt("When you are done, the rule id of the cause (or none)", default="none", show_default=False)
    right, reveal = verdict(hidden, answer)
    click.echo(f"{'right' if right else 'not this time'}: {reveal}")
