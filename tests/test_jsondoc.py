"""read_json: a JSON document is read as JSON, finite numbers only, one line for every failure."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from diagnoser.errors import InputError
from diagnoser.jsondoc import read_json


def refused(path: Path | str, **kwargs: int) -> str:
    with pytest.raises(InputError) as caught:
        read_json(path, "a probe report", **kwargs)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    return message


def test_numbers_in_exponent_form_are_numbers(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('{"gbs": 2.64e1, "n": 3, "tiny": 1E-3}')
    assert read_json(path, "a probe report") == {"gbs": 26.4, "n": 3, "tiny": 0.001}


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_are_refused(tmp_path, token):
    path = tmp_path / "r.json"
    path.write_text(f'{{"gbs": {token}}}')
    assert f"{token} is not a finite number" in refused(path)


def test_invalid_json_names_line_and_column(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('{"a": 1,\n "b": }')
    assert "not valid JSON at line 2:7" in refused(path)


@pytest.mark.parametrize(
    "content, problem",
    [(b"", "file is empty"), (b"  \n", "file is empty"), (b"\xff\xfe{}", "not UTF-8 text"), (b"[" * 100_000, "nested too deeply")],
    ids=["empty", "blank", "not-utf8", "deep"],
)
def test_unreadable_content_is_one_line(tmp_path, content, problem):
    path = tmp_path / "r.json"
    path.write_bytes(content)
    assert problem in refused(path)


def test_missing_file_and_directory(tmp_path):
    assert "no such file" in refused(tmp_path / "none.json")
    assert "is a directory, expected a probe report" in refused(tmp_path)


def test_too_big_is_refused_without_reading_it_all(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("[" + "1," * 100 + "1]")
    assert "larger than 64 bytes" in refused(path, max_bytes=64)
    assert "too big for a probe report" in refused("/dev/zero")


def test_a_fifo_without_a_writer_reads_as_empty(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert "file is empty" in refused(fifo)
