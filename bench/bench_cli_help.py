"""Time `diagnoser --help` against `python -c pass` in the same run (median of repeats).

Usage: python bench/bench_cli_help.py [repeats]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time


def median_seconds(cmd: list[str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    baseline = median_seconds([sys.executable, "-c", "pass"], repeats)
    help_time = median_seconds([sys.executable, "-m", "diagnoser", "--help"], repeats)
    print(f"python -c pass:     {baseline * 1e3:7.1f} ms (median of {repeats})")
    print(f"diagnoser --help:   {help_time * 1e3:7.1f} ms (median of {repeats})")
    print(f"ratio:              {help_time / baseline:7.2f}x   (goal: --help <= 150 ms)")


if __name__ == "__main__":
    main()
