"""How fine an inter-token interval the client probe can measure on this machine.

The client timestamps each SSE event after httpx hands over the line and json parses it, so
there is a floor below which its ITL figures describe the client, not the server. This runs
the test decode server (tests/streaming_server.py, its own process): with no step time, to
find a lower bound on the chunks per second the probe ingests, and at a few step times, to show how
closely the measured TPOT and median ITL follow the scheduled step.

Usage: python bench/client_resolution.py [--tokens 400]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from streaming_server import DecodeConfig, StreamingServer  # noqa: E402

from diagnoser.probes import client  # noqa: E402
from diagnoser.probes.base import ProbeContext  # noqa: E402


def measure(step_ms: float, tokens: int) -> dict:
    with StreamingServer(DecodeConfig(step_ms=step_ms, prefill_ms=0)) as url:
        return client.run(ProbeContext(timeout_s=120, options={"endpoint": url, "max_tokens": tokens, "requests": 2}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=400)
    args = parser.parse_args()
    floor = measure(0.0, args.tokens)
    itl = floor["itl_ms"]
    print(
        f"no server step: {1e3 / itl['mean']:.0f} chunks/s through server and client together (the client ingests"
        f" at least that), ITL p50 {itl['p50'] * 1e3:.0f} us, p99 {itl['p99'] * 1e3:.0f} us"
    )
    print("step_ms  TPOT_ms  ITL_p50_ms  ITL_p99_ms  TPOT_error")
    for step in (0.5, 1.0, 2.0, 5.0):
        facts = measure(step, args.tokens)
        tpot = facts["tpot_ms"]["mean"]
        print(f"{step:7.1f}  {tpot:7.3f}  {facts['itl_ms']['p50']:10.3f}  {facts['itl_ms']['p99']:10.3f}  {100 * (tpot / step - 1):+9.1f}%")


if __name__ == "__main__":
    main()
