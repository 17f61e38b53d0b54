"""Accuracy on the development corpus: 44 real incidents written from what was known before the fix.

The floors are the figures reached when the rules were written (`python bench/bench_accuracy.py`
prints them with every miss); a change that loses a case fails here. The scoring itself is
checked on a hand-made diagnosis.
"""

import subprocess
import sys

from conftest import REPO
from diagnoser.engine import load_rulebook
from diagnoser.engine.accuracy import CaseScore, named_in_order, score_case, score_corpus, top_n
from diagnoser.models.hypothesis import Diagnosis, Hypothesis, Kind

CASES = REPO / "tests" / "data" / "cases"
TOP_1_FLOOR = 0.88  # 39 of 44
TOP_3_FLOOR = 0.95  # 42 of 44
# Twelve more incidents, written by someone who had not read the rules; scored 50 % / 58 % when first
# run, before the rules learnt engine flag names, A/B runs of the weight format and of the cache size,
# and field-level requirements. They are no longer unseen: the floor guards what they taught.
HOLDOUT = REPO / "tests" / "data" / "holdout"
HOLDOUT_TOP_1_FLOOR = 0.75  # 9 of 12
HOLDOUT_TOP_3_FLOOR = 0.83  # 10 of 12
# A third set, written the same way later and scored once before any change: 50 % top-1 and top-3,
# the figure to expect on incidents the rules have not seen. Two general rules came of it since (more
# TP ranks and a slower step: the collectives cost more than the split saves; quantized weights short
# of an expectation make the quantized GEMMs possible).
UNSEEN = REPO / "tests" / "data" / "unseen"
UNSEEN_TOP_1_FLOOR = 0.91  # 11 of 12
UNSEEN_TOP_3_FLOOR = 0.91  # 11 of 12


def test_the_development_corpus_stays_above_its_floors():
    scores = score_corpus(CASES, load_rulebook())
    assert len(scores) == 44
    assert top_n(scores, 1) >= TOP_1_FLOOR, [s for s in scores if s.rank != 1]
    assert top_n(scores, 3) >= TOP_3_FLOOR, [s for s in scores if not s.rank or s.rank > 3]


def test_the_second_and_third_corpora_stay_above_their_floors():
    book = load_rulebook()
    for folder, top1, top3 in ((HOLDOUT, HOLDOUT_TOP_1_FLOOR, HOLDOUT_TOP_3_FLOOR), (UNSEEN, UNSEEN_TOP_1_FLOOR, UNSEEN_TOP_3_FLOOR)):
        scores = score_corpus(folder, book)
        assert len(scores) == 12
        assert top_n(scores, 1) >= top1 and top_n(scores, 3) >= top3, folder.name


# The later blind corpora: (folder, cases, top-1 and top-3 counts reached so far). Each was scored once
# before any rule changed for it (README's table); the floors guard what they taught since.
LATER_CORPORA = (
    ("corpus2", 28, 26, 26),
    ("corpus3", 20, 20, 20),
    ("corpus4", 20, 20, 20),
    ("corpus5", 20, 19, 20),
    ("corpus6", 20, 20, 20),
    # T03 (a debug build) and AP03 (attention left on the CPU) sit second behind layers placed off the device since a
    # token beyond the device's sweep reads placement first (it explained twice as many of those incidents as a build).
    ("corpus7", 20, 19, 19),
    ("corpus8", 17, 15, 15),
    # W12 (a paged-KV build flag's A/B) named its accepted slow-kernel-path only through the int8 format both builds
    # share; a possible candidate stated alike on both sides of a one-setting A/B now ranks after the located flag.
    ("corpus9", 12, 10, 12),
    ("corpus10", 15, 14, 14),
    ("corpus11", 15, 13, 13),
    ("corpus12", 11, 10, 10),
    ("corpus13", 12, 10, 10),
    ("corpus14", 12, 12, 12),
    ("corpus15", 12, 10, 11),
    ("corpus16", 11, 11, 11),
    ("corpus17", 12, 10, 10),
    ("corpus18", 10, 10, 10),
    ("corpus19", 12, 7, 7),
    ("corpus20", 10, 9, 9),
    ("corpus21", 11, 9, 9),
    ("corpus22", 10, 9, 9),
    ("corpus23", 10, 7, 7),
    ("corpus24", 8, 6, 6),
    ("corpus25", 8, 7, 8),
    ("corpus26", 10, 5, 5),
    ("corpus27", 7, 5, 5),
    ("corpus28", 8, 7, 8),
    ("corpus29", 8, 6, 7),
    ("corpus30", 6, 6, 6),
    ("corpus31", 4, 2, 3),
    ("corpus32", 5, 2, 4),
    ("corpus33", 6, 5, 6),
    ("corpus34", 2, 2, 2),
    ("corpus35", 9, 9, 9),
    ("corpus36", 7, 4, 4),
    ("corpus37", 9, 9, 9),
    ("corpus38", 1, 1, 1),
    ("corpus39", 3, 3, 3),
    ("corpus40", 7, 6, 6),
    ("corpus41", 3, 2, 2),
    ("corpus42", 4, 4, 4),
    ("corpus43", 6, 5, 5),
    ("corpus44", 4, 3, 3),
    ("corpus45", 5, 3, 4),
    ("corpus46", 4, 2, 2),
    ("corpus47", 3, 2, 3),
    ("corpus48", 5, 4, 4),
    ("corpus49", 4, 4, 4),
    ("corpus50", 5, 4, 4),
    ("corpus51", 7, 5, 6),
    ("corpus52", 4, 3, 4),
    ("corpus53", 3, 2, 2),
    ("corpus54", 6, 4, 4),
    ("corpus55", 2, 1, 2),
    ("corpus56", 4, 4, 4),
    ("corpus57", 4, 3, 3),
    ("corpus58", 3, 2, 3),
    ("corpus59", 2, 1, 1),
    ("corpus60", 4, 1, 2),
    # BW02 (exo's TCP ring against RDMA, 0.2 against 15 tokens/s) is read first as what the slower transport costs
    # (exposed-comm, measured by the A/B of the link); its writer settled it as the ring's host synchronisation and
    # accepted the located change, which stays second. corpus179's GK02, the same A/B, was the link.
    ("corpus61", 5, 4, 5),
    ("corpus62", 4, 3, 3),
    ("corpus63", 5, 3, 3),
    ("corpus64", 3, 3, 3),
    ("corpus65", 7, 7, 7),
    ("corpus66", 3, 1, 2),
    ("corpus67", 7, 6, 6),
    ("corpus68", 3, 1, 3),
    ("corpus69", 4, 2, 2),
    ("corpus70", 3, 3, 3),
    ("corpus71", 5, 3, 4),
    ("corpus72", 7, 5, 5),
    ("corpus73", 3, 3, 3),
    ("corpus74", 5, 5, 5),
    ("corpus75", 6, 5, 5),
    ("corpus76", 5, 2, 2),
    ("corpus77", 2, 2, 2),
    ("corpus78", 5, 3, 5),
    ("corpus79", 4, 2, 4),
    ("corpus80", 6, 3, 4),
    ("corpus81", 4, 3, 3),
    ("corpus82", 6, 4, 5),
    ("corpus83", 7, 3, 3),
    ("corpus84", 5, 3, 3),
    ("corpus85", 6, 4, 4),
    ("corpus86", 7, 5, 5),
    ("corpus87", 2, 1, 1),
    ("corpus88", 5, 4, 5),
    ("corpus89", 4, 4, 4),
    ("corpus90", 6, 6, 6),
    ("corpus91", 4, 3, 4),
    ("corpus92", 2, 1, 1),
    ("corpus93", 5, 5, 5),
    ("corpus94", 4, 2, 2),
    ("corpus95", 2, 2, 2),
    ("corpus96", 4, 4, 4),
    ("corpus97", 3, 3, 3),
    ("corpus98", 7, 6, 6),
    ("corpus99", 1, 1, 1),
    ("corpus100", 1, 1, 1),
    ("corpus101", 5, 4, 4),
    ("corpus102", 2, 2, 2),
    ("corpus103", 4, 0, 0),
    ("corpus104", 2, 2, 2),
    ("corpus105", 5, 3, 4),
    ("corpus106", 4, 3, 3),
    ("corpus107", 3, 3, 3),
    ("corpus108", 5, 4, 4),
    ("corpus109", 2, 1, 1),
    ("corpus110", 3, 3, 3),
    ("corpus111", 7, 7, 7),
    ("corpus112", 3, 3, 3),
    ("corpus113", 7, 6, 6),
    ("corpus114", 5, 4, 5),
    ("corpus115", 2, 2, 2),
    ("corpus116", 2, 2, 2),
    ("corpus117", 2, 2, 2),
    ("corpus118", 5, 4, 4),
    ("corpus119", 5, 4, 4),
    ("corpus120", 3, 1, 2),
    ("corpus121", 2, 1, 2),
    ("corpus122", 3, 2, 2),
    ("corpus123", 1, 1, 1),
    ("corpus124", 3, 3, 3),
    ("corpus125", 2, 1, 1),
    ("corpus126", 5, 3, 3),
    ("corpus127", 6, 4, 4),
    ("corpus128", 3, 1, 1),
    ("corpus129", 3, 3, 3),
    ("corpus130", 3, 1, 1),
    ("corpus131", 5, 3, 3),
    ("corpus132", 1, 1, 1),
    ("corpus133", 5, 4, 4),
    ("corpus134", 7, 5, 6),
    ("corpus135", 1, 1, 1),
    ("corpus136", 3, 1, 2),
    ("corpus137", 4, 3, 3),
    ("corpus138", 3, 3, 3),
    ("corpus139", 7, 4, 4),
    ("corpus141", 2, 0, 0),
    ("corpus142", 2, 2, 2),
    ("corpus143", 2, 2, 2),
    ("corpus144", 1, 1, 1),
    ("corpus145", 1, 1, 1),
    ("corpus146", 4, 0, 2),
    ("corpus147", 1, 1, 1),
    ("corpus148", 6, 5, 5),
    ("corpus149", 5, 5, 5),
    ("corpus150", 6, 5, 5),
    ("corpus151", 7, 5, 5),
    ("corpus152", 6, 4, 5),
    ("corpus153", 6, 4, 5),
    ("corpus154", 6, 2, 3),
    ("corpus155", 6, 6, 6),
    ("corpus156", 5, 5, 5),
    ("corpus157", 6, 4, 5),
    ("corpus158", 5, 2, 3),
    ("corpus159", 4, 3, 3),
    ("corpus160", 4, 3, 3),
    ("corpus161", 6, 2, 3),
    ("corpus162", 6, 5, 5),
    ("corpus163", 5, 4, 4),
    ("corpus164", 4, 3, 3),
    ("corpus165", 5, 4, 4),
    ("corpus166", 5, 4, 4),
    ("corpus167", 3, 1, 1),
    ("corpus168", 7, 5, 5),
    ("corpus169", 10, 5, 6),
    ("corpus170", 3, 1, 1),
    ("corpus171", 6, 5, 5),
    ("corpus172", 7, 3, 4),
    ("corpus173", 6, 3, 5),
    ("corpus174", 4, 2, 4),
    ("corpus175", 4, 3, 4),
    ("corpus177", 5, 4, 5),
    ("corpus178", 5, 4, 5),
    ("corpus179", 3, 3, 3),
    ("corpus180", 4, 3, 4),
    ("corpus181", 2, 2, 2),
    ("corpus182", 4, 3, 3),
    ("corpus183", 5, 5, 5),
    ("corpus184", 4, 4, 4),
    ("corpus185", 1, 1, 1),
    ("corpus186", 5, 3, 3),
    ("corpus187", 2, 2, 2),
    ("corpus188", 5, 1, 1),
    ("corpus189", 2, 2, 2),
    ("corpus191", 2, 1, 1),
    ("corpus192", 3, 1, 1),
    ("corpus193", 4, 4, 4),
    ("corpus194", 2, 1, 1),
    ("corpus195", 4, 2, 3),
    ("corpus196", 3, 2, 2),
    ("corpus197", 4, 3, 3),
    ("corpus198", 5, 3, 3),
    ("corpus199", 6, 3, 4),
    ("corpus200", 5, 3, 3),
    ("corpus201", 4, 1, 1),
    ("corpus202", 5, 4, 4),
    ("corpus203", 3, 1, 1),
    ("corpus204", 4, 2, 2),
    ("corpus205", 3, 3, 3),
    ("corpus206", 1, 0, 1),
    ("corpus207", 3, 3, 3),
    ("corpus208", 4, 2, 2),
    ("corpus209", 5, 3, 3),
    ("corpus210", 5, 3, 3),
    ("corpus211", 5, 5, 5),
    ("corpus212", 2, 2, 2),
    ("corpus213", 5, 1, 1),
    ("corpus214", 3, 0, 0),
    ("corpus215", 6, 4, 5),
    ("corpus216", 2, 2, 2),
    ("corpus217", 2, 2, 2),
    ("corpus219", 1, 1, 1),
    ("corpus220", 3, 1, 2),
    ("corpus221", 2, 2, 2),
    ("corpus222", 2, 1, 1),
    ("corpus223", 5, 2, 2),
    ("corpus224", 3, 2, 2),
    ("corpus225", 4, 4, 4),
    ("corpus226", 4, 4, 4),
    ("corpus227", 3, 2, 2),
    ("corpus228", 5, 4, 4),
    ("corpus229", 3, 2, 2),
    ("corpus230", 4, 3, 3),
    ("corpus231", 2, 1, 1),
    ("corpus232", 3, 2, 2),
    ("corpus233", 5, 5, 5),
    ("corpus234", 5, 2, 2),
    ("corpus235", 5, 3, 4),
    ("corpus236", 1, 1, 1),
    ("corpus237", 4, 2, 3),
    ("corpus238", 3, 2, 2),
    ("corpus239", 4, 0, 1),
    ("corpus240", 4, 2, 3),
    ("corpus242", 1, 0, 0),
    ("corpus243", 3, 1, 1),
    ("corpus244", 2, 1, 1),
    ("corpus247", 5, 4, 4),
    ("corpus248", 3, 2, 2),
    ("corpus249", 2, 1, 2),
    ("corpus250", 2, 2, 2),
    ("corpus251", 5, 3, 4),
    ("corpus252", 3, 1, 1),
    ("corpus253", 8, 8, 8),
    ("corpus254", 4, 4, 4),
    ("corpus255", 4, 2, 3),
    ("corpus256", 5, 3, 3),
    ("corpus257", 6, 6, 6),
    ("corpus258", 3, 3, 3),
    ("corpus259", 4, 2, 2),
    ("corpus260", 2, 1, 1),
    ("corpus261", 3, 2, 3),
    ("corpus262", 2, 2, 2),
    ("corpus263", 4, 2, 3),
    ("corpus264", 4, 3, 4),
    ("corpus265", 3, 3, 3),
    ("corpus266", 5, 3, 3),
    ("corpus267", 2, 2, 2),
    ("corpus268", 3, 1, 1),
    ("corpus269", 3, 1, 1),
    ("corpus270", 3, 1, 1),
    ("corpus273", 1, 0, 0),
    ("corpus274", 1, 1, 1),
    ("corpus275", 2, 1, 1),
    ("corpus276", 5, 3, 4),
    ("corpus277", 6, 3, 5),
    ("corpus278", 2, 2, 2),
    ("corpus279", 4, 3, 3),
    ("corpus280", 3, 2, 2),
    ("corpus281", 2, 2, 2),
    ("corpus282", 2, 2, 2),
    ("corpus283", 3, 0, 0),
    ("corpus284", 2, 1, 2),
    ("corpus285", 2, 1, 1),
    ("corpus286", 4, 3, 3),
    ("corpus287", 1, 1, 1),
    ("corpus288", 2, 0, 0),
    ("corpus290", 3, 3, 3),
    ("corpus291", 3, 3, 3),
    ("corpus292", 3, 1, 2),
    ("corpus293", 5, 3, 3),
    ("corpus294", 3, 0, 0),
    ("corpus295", 4, 3, 3),
    ("corpus296", 4, 4, 4),
    ("corpus297", 4, 3, 3),
    ("corpus298", 2, 2, 2),
    ("corpus299", 2, 1, 1),
    ("corpus300", 1, 1, 1),
    ("corpus301", 2, 2, 2),
    ("corpus302", 4, 2, 2),
    ("corpus303", 4, 4, 4),
    ("corpus305", 3, 2, 2),
    ("corpus306", 2, 2, 2),
    ("corpus307", 2, 2, 2),
    ("corpus308", 3, 3, 3),
    ("corpus309", 4, 3, 3),
    ("corpus310", 4, 4, 4),
    ("corpus311", 3, 3, 3),
    ("corpus313", 4, 2, 2),
    ("corpus314", 3, 3, 3),
    ("corpus315", 4, 0, 0),
    ("corpus316", 2, 2, 2),
    ("corpus317", 2, 0, 0),
    ("corpus318", 3, 1, 1),
    ("corpus319", 4, 4, 4),
    ("corpus320", 6, 5, 6),
    ("corpus321", 3, 3, 3),
    ("corpus322", 3, 2, 2),
    ("corpus323", 3, 2, 2),
    ("corpus325", 4, 3, 4),
    ("corpus326", 3, 1, 1),
    ("corpus327", 3, 2, 2),
    ("corpus328", 4, 3, 3),
    ("corpus329", 4, 4, 4),
    ("corpus330", 3, 3, 3),
    ("corpus331", 3, 2, 2),
    ("corpus332", 5, 5, 5),
    ("corpus333", 4, 3, 3),
    ("corpus334", 5, 4, 4),
    ("corpus335", 3, 1, 2),
    ("corpus336", 5, 3, 3),
    ("corpus337", 2, 1, 1),
    ("corpus338", 3, 3, 3),
    ("corpus339", 2, 2, 2),
    ("corpus340", 2, 1, 2),
    ("corpus341", 4, 1, 1),
    ("corpus342", 2, 1, 1),
    ("corpus343", 3, 3, 3),
    ("corpus344", 5, 3, 3),
    ("corpus345", 5, 1, 3),
    ("corpus346", 1, 1, 1),
    ("corpus347", 3, 3, 3),
    ("corpus348", 1, 1, 1),
    ("corpus349", 2, 1, 1),
    ("corpus350", 3, 3, 3),
    ("corpus352", 3, 1, 1),
    ("corpus353", 3, 3, 3),
    ("corpus354", 3, 3, 3),
    ("corpus355", 3, 0, 0),
    ("corpus356", 2, 2, 2),
    ("corpus357", 2, 1, 2),
    ("corpus358", 2, 0, 0),
    ("corpus359", 3, 1, 1),
    ("corpus360", 4, 3, 4),
    ("corpus361", 1, 1, 1),
    ("corpus367", 1, 1, 1),
    ("corpus368", 4, 4, 4),
    ("corpus369", 3, 1, 2),
    ("corpus370", 4, 2, 2),
    ("corpus371", 2, 1, 2),
    ("corpus372", 6, 4, 5),
    ("corpus373", 2, 1, 1),
    ("corpus374", 2, 0, 0),
    ("corpus375", 6, 5, 6),
    ("corpus376", 3, 2, 2),
    ("corpus377", 3, 1, 1),
    ("corpus378", 4, 2, 2),
    ("corpus379", 4, 2, 3),
    ("corpus380", 2, 0, 0),
    ("corpus381", 2, 0, 0),
    ("corpus382", 1, 1, 1),
    ("corpus383", 4, 3, 3),
    ("corpus384", 4, 1, 1),
    ("corpus385", 3, 1, 2),
    ("corpus386", 3, 3, 3),
    ("corpus387", 3, 3, 3),
    ("corpus388", 3, 1, 1),
    ("corpus389", 4, 3, 3),
    ("corpus390", 4, 2, 2),
    ("corpus391", 2, 0, 1),
    ("corpus392", 6, 4, 4),
    ("corpus393", 6, 4, 5),
    ("corpus394", 2, 2, 2),
    ("corpus395", 4, 2, 2),
    ("corpus398", 2, 1, 1),
)


def test_the_later_blind_corpora_keep_what_they_taught():
    book = load_rulebook()
    for name, count, top1, top3 in LATER_CORPORA:
        scores = score_corpus(REPO / "tests" / "data" / name, book)
        assert len(scores) == count, name
        firsts = sum(s.rank == 1 for s in scores)
        thirds = sum(bool(s.rank) and s.rank <= 3 for s in scores)
        assert firsts >= top1 and thirds >= top3, (name, [s for s in scores if s.rank != 1])


def _h(hid: str, kind: Kind, leads: bool = False) -> Hypothesis:
    return Hypothesis(id=hid, rule=hid.split(":")[0], kind=kind, title="t", explanation="e", leads=leads)


def test_leading_guards_then_causes_then_guards_and_keyed_ids_count():
    d = Diagnosis(hypotheses=[
        _h("rate-includes-prefill", Kind.guard, leads=True), _h("launch-gaps", Kind.cause), _h("host-cost:detokenize", Kind.cause),
        _h("boundary-mismatch", Kind.guard), _h("low-fraction-not-a-diagnosis", Kind.lesson),
    ])
    assert [hid for _, hid in named_in_order(d)] == ["rate-includes-prefill", "launch-gaps", "host-cost:detokenize", "boundary-mismatch"]
    assert score_case("X", "c", d, ["host-cost:detokenize"]).rank == 3
    assert score_case("X", "c", d, ["host-cost"]).rank == 3  # a rule id accepts every key
    assert score_case("X", "c", d, ["host-cost:sampling"]).rank is None
    scores = [CaseScore("a", "c", 1, ()), CaseScore("b", "c", 3, ()), CaseScore("c", "c", None, ())]
    assert (top_n(scores, 1), top_n(scores, 3)) == (1 / 3, 2 / 3)


def test_the_bench_prints_the_figures_and_refuses_a_folder_without_answers(tmp_path):
    bench = [sys.executable, str(REPO / "bench" / "bench_accuracy.py")]
    out = subprocess.run(bench, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "cases: 44" in out.stdout and "top-1: " in out.stdout and "top-3: " in out.stdout
    out = subprocess.run([*bench, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "no answers.yaml" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_blind_scores_adds_up_the_recorded_first_scores_beside_todays():
    """corpus121 records its first score in its own README (1 first and 2 in the top three of 2, at 8f91d74), corpus16
    only in the repository README's table (91 % of 11 is 10): both are read and summed beside today's scores, and a
    bad range is one line and exit 2."""
    bench = [sys.executable, str(REPO / "bench" / "blind_scores.py")]
    out = subprocess.run([*bench, "121", "121"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "corpus121: 2 cases; first 1/2 at 8f91d74" in out.stdout and "first: top-1 50.0% (1/2), top-3 100.0% (2/2)" in out.stdout
    out = subprocess.run([*bench, "16", "16"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "corpus16: 11 cases; first 10/10 at 4a4330a" in out.stdout
    for bad in (["5", "x"], ["9", "3"], ["900", "901"]):
        out = subprocess.run([*bench, *bad], capture_output=True, text=True, timeout=300)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
