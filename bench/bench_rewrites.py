"""Robustness to the author: the same incidents written twice, by writers who never saw each other's case.

The robustness corpora (a README section "A robustness corpus" with a table `| here | first write-up | ... |`) hold
second, independent write-ups of incidents drawn at random from the other corpora. The rules were tuned on the first
write-ups; what share of the incidents they name first in the first write-up they also name first in the second is the
nearest measure here of how they will do on incidents written by an author they have never met.

Usage: python bench/bench_rewrites.py [DATA_FOLDER]   (default: tests/data)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from diagnoser.engine import load_rulebook
from diagnoser.engine.accuracy import score_corpus, share
from diagnoser.errors import InputError

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
SECTION = "## A robustness corpus"
PAIR = re.compile(r"^\| (?P<here>[A-Z]{2}\d\d) \| (?P<folder>[\w-]+)/(?P<case>[A-Z]+\d+) \|", re.M)


def pairs(data: Path) -> list[tuple[str, str, str, str]]:
    """(robustness folder, its case, first write-up's folder, its case), from each robustness README's table."""
    found = []
    for readme in sorted(data.glob("*/README.md")):
        text = readme.read_text(encoding="utf-8")
        if SECTION in text:
            found += [(readme.parent.name, m["here"], m["folder"], m["case"]) for m in PAIR.finditer(text.split(SECTION, 1)[1])]
    return found


def main(argv: list[str]) -> int:
    data = Path(argv[0]) if argv else DATA
    found = pairs(data)
    if not found:
        print(f"bench_rewrites: no robustness corpus under {data}", file=sys.stderr)
        return 2
    rulebook = load_rulebook()
    ranks: dict[tuple[str, str], int | None] = {}
    try:
        for folder in sorted({f for p in found for f in (p[0], p[2])}):
            ranks.update({(folder, s.case): s.rank for s in score_corpus(data / folder, rulebook)})
    except InputError as err:
        print(f"bench_rewrites: {err}", file=sys.stderr)
        return 2
    print("| second write-up | rank | first write-up | rank |\n|---|---|---|---|")
    for here_folder, here, first_folder, first in found:
        print(f"| {here_folder}/{here} | {ranks[(here_folder, here)] or '-'} | {first_folder}/{first} | {ranks[(first_folder, first)] or '-'} |")
    n = len(found)
    first_hits = [p for p in found if ranks[(p[2], p[3])] == 1]
    kept = [p for p in first_hits if ranks[(p[0], p[1])] == 1]
    print(f"incidents written twice: {n}")
    print(f"first write-ups named first: {share(len(first_hits), n)}")
    print(f"second write-ups named first: {share(sum(ranks[(p[0], p[1])] == 1 for p in found), n)}")
    print(f"named first in both, of those named first in the first: {share(len(kept), len(first_hits))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
