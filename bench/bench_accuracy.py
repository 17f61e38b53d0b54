"""Accuracy of the rule base on real incidents written as case files (goal: top-3 >= 90 %, top-1 >= 75 %).

Each case holds only what its reporter knew before the fix; `answers.yaml` beside the cases
maps each case to its root-cause category and each category to the rule ids that name it.
Prints top-1 and top-3 (the true cause among the first N causes and guards) and every miss
with what ranked instead.

Usage: python bench/bench_accuracy.py [CASES_FOLDER]   (default: tests/data/cases)
"""

from __future__ import annotations

import sys
from pathlib import Path

from diagnoser.engine import load_rulebook
from diagnoser.engine.accuracy import hits_within, score_corpus, share
from diagnoser.errors import InputError

FOLDER = Path(__file__).resolve().parent.parent / "tests" / "data" / "cases"


def main(argv: list[str]) -> int:
    folder = Path(argv[0]) if argv else FOLDER
    try:
        scores = score_corpus(folder, load_rulebook())
    except InputError as err:
        print(f"bench_accuracy: {err}", file=sys.stderr)
        return 2
    for s in scores:
        if s.rank != 1:
            where = f"rank {s.rank}" if s.rank else "not named"
            print(f"miss {s.case} ({s.category}): {where}; first: {', '.join(s.named[:3]) or 'nothing'}")
    print(f"cases: {len(scores)}")
    print(f"top-1: {share(hits_within(scores, 1), len(scores))}")
    print(f"top-3: {share(hits_within(scores, 3), len(scores))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
