"""First scores and present scores of the blind corpora, side by side, with their totals.

A blind corpus is scored once, before any rule changes for it, and its README ends with that first
score and the commit it was taken at; that figure, not today's, is what to expect on incidents the
rules have not met. This prints both for each corpus in a range and adds them up, so the totals the
README and the closing notes quote can be reproduced.

Usage: python bench/blind_scores.py [FIRST LAST]   (corpus numbers; default: every corpus with a first score)
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from diagnoser.engine import load_rulebook
from diagnoser.engine.accuracy import hits_within, score_corpus, share
from diagnoser.errors import InputError

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
FIRST_SCORE = re.compile(
    r"at (?P<commit>[0-9a-f]{7,40})(?: \((?:tree|rules of) [0-9a-f]{7,40}\))?: top-1 [\d.]+ % \((?P<first>\d+)/(?P<cases>\d+)\), "
    r"top-3 [\d.]+ % \((?P<top3>\d+)/\d+\)"
)
CORPUS = re.compile(r"corpus(\d+)$")


@dataclass(frozen=True)
class FirstScore:
    commit: str
    first: int
    top3: int
    cases: int


# The first corpora recorded their first score only in the repository README's table, as whole per cents.
TABLE_ROW = re.compile(r"^\| `tests/data/corpus(?P<n>\d+)/` \| (?P<cases>\d+) \| (?P<first>\d+) / (?P<top3>\d+) % \(at (?P<commit>[0-9a-f]{7,40})\)", re.M)


def first_score(readme: str) -> FirstScore | None:
    """The first score a corpus README records, or None where it records none."""
    m = FIRST_SCORE.search(readme)
    if m is None:
        return None
    return FirstScore(m["commit"], int(m["first"]), int(m["top3"]), int(m["cases"]))


def table_scores(readme: str) -> dict[int, FirstScore]:
    """First scores from the repository README's table, per cents turned back into counts: with at most a few dozen
    cases a corpus, each whole per cent stands for one count."""
    found = {}
    for m in TABLE_ROW.finditer(readme):
        cases = int(m["cases"])
        found[int(m["n"])] = FirstScore(m["commit"], round(int(m["first"]) * cases / 100), round(int(m["top3"]) * cases / 100), cases)
    return found


def corpora(data: Path, low: int | None, high: int | None) -> list[tuple[int, Path]]:
    found = []
    for d in data.iterdir():
        m = CORPUS.match(d.name)
        if m and (d / "README.md").is_file() and (d / "answers.yaml").is_file():
            n = int(m[1])
            if (low is None or n >= low) and (high is None or n <= high):
                found.append((n, d))
    return sorted(found)


def _bounds(argv: list[str]) -> tuple[int | None, int | None]:
    if not argv:
        return None, None
    if len(argv) != 2 or not all(a.isdigit() for a in argv) or int(argv[0]) > int(argv[1]):
        raise InputError("give two corpus numbers, FIRST <= LAST (e.g. 123 142), or none for every corpus")
    return int(argv[0]), int(argv[1])


def main(argv: list[str], data: Path = DATA) -> int:
    try:
        low, high = _bounds(argv)
        book = load_rulebook()
        table = table_scores(readme.read_text(encoding="utf-8")) if (readme := data.parent.parent / "README.md").is_file() else {}
        totals = [0, 0, 0, 0, 0]  # cases, first top-1, first top-3, now top-1, now top-3
        for n, folder in corpora(data, low, high):
            first = first_score((folder / "README.md").read_text(encoding="utf-8")) or table.get(n)
            if first is None:
                continue
            scores = score_corpus(folder, book)
            now1, now3 = hits_within(scores, 1), hits_within(scores, 3)
            print(f"corpus{n}: {first.cases} cases; first {first.first}/{first.top3} at {first.commit}; now {now1}/{now3}")
            for i, v in enumerate((first.cases, first.first, first.top3, now1, now3)):
                totals[i] += v
    except InputError as err:
        print(f"blind_scores: {err}", file=sys.stderr)
        return 2
    cases, f1, f3, n1, n3 = totals
    if not cases:
        print("blind_scores: no corpus in that range records a first score", file=sys.stderr)
        return 2
    print(f"cases: {cases}")
    for when, top1, top3 in (("first", f1, f3), ("now", n1, n3)):
        print(f"{when}: top-1 {share(top1, cases)}, top-3 {share(top3, cases)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
