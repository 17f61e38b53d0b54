"""The robustness corpora's tables point at real cases, and the bench reads them."""

import importlib.util
import re
import subprocess
import sys

from conftest import REPO

DATA = REPO / "tests" / "data"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_rewrites", REPO / "bench" / "bench_rewrites.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_second_write_up_names_an_existing_first_write_up_of_another_corpus():
    pairs = _bench().pairs(DATA)
    assert len(pairs) >= 40
    for here_folder, here, first_folder, first in pairs:
        assert (DATA / here_folder / f"{here}.yaml").is_file()
        assert (DATA / first_folder / f"{first}.yaml").is_file()
        assert first_folder != here_folder
    assert len({(p[2], p[3]) for p in pairs}) == len(pairs)  # each incident written twice, not more


def test_the_bench_prints_the_share_kept_and_refuses_a_folder_without_pairs(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "bench" / "bench_rewrites.py")], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    counts = dict(re.findall(r"^(.+?): .*?\((\d+/\d+)\)$", done.stdout, re.M))
    pairs = len(_bench().pairs(DATA))
    first, of_first = map(int, counts["first write-ups named first"].split("/"))
    second, of_second = map(int, counts["second write-ups named first"].split("/"))
    kept, of_kept = map(int, counts["named first in both, of those named first in the first"].split("/"))
    assert of_first == of_second == pairs and of_kept == first
    assert kept <= min(first, second)
    rows = [line for line in done.stdout.splitlines() if re.match(r"\| corpus\d+/", line)]
    assert len(rows) == pairs
    assert sum(line.split(" | ")[1] == "1" for line in rows) == second
    empty = subprocess.run([sys.executable, str(REPO / "bench" / "bench_rewrites.py"), str(tmp_path)], capture_output=True, text=True)
    assert empty.returncode == 2 and "no robustness corpus" in empty.stderr
