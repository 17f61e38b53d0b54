"""Outputs are written whole with ordinary permissions, and never over an input."""

import os
import stat

import pytest

from diagnoser.errors import InputError
from diagnoser.fileio import check_outputs, merged_case_path, write_atomic


def test_written_files_get_the_umask_mode_not_mkstemps_private_one(tmp_path):
    old = os.umask(0o022)
    try:
        path = write_atomic(tmp_path / "out.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]  # no temporary left behind


def test_an_output_that_is_an_input_a_link_to_one_or_a_folder_is_refused(tmp_path):
    case = tmp_path / "case.yaml"
    case.write_text("title: x\n")
    (tmp_path / "link.yaml").symlink_to(case)
    (tmp_path / "hard.yaml").hardlink_to(case)
    for target in (case, tmp_path / "link.yaml", tmp_path / "hard.yaml"):
        with pytest.raises(InputError, match="is an input"):
            check_outputs([("-o", target)], [case])
    with pytest.raises(InputError, match="is a directory"):
        check_outputs([("-o", tmp_path)], [case])
    with pytest.raises(InputError, match="the same file as -o"):
        check_outputs([("-o", tmp_path / "a"), ("--perfetto", tmp_path / "a")], [case])
    check_outputs([("-o", tmp_path / "report.txt"), ("--case-out", None)], [case])  # a new file is fine


def test_an_output_inside_an_input_folder_is_allowed(tmp_path):
    check_outputs([("-o", tmp_path / "report.txt")], [tmp_path])


def test_the_merged_case_goes_beside_an_existing_case_and_in_place_of_a_new_one(tmp_path):
    case = tmp_path / "run.yaml"
    assert merged_case_path(case, "analyzed") == case  # nothing to protect yet
    case.write_text("title: x\n")
    assert merged_case_path(case, "analyzed") == tmp_path / "run.analyzed.yaml"
    assert merged_case_path(case, "analyzed", tmp_path / "out.yaml") == tmp_path / "out.yaml"


def test_a_failed_write_is_one_input_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(InputError, match="cannot write"):
        write_atomic(blocker / "under-a-file.txt", "x")
