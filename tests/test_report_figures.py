"""Figures a person reads at a glance, the same in every format."""

from __future__ import annotations

from conftest import REPO, run_cli

from diagnoser.report.figures import field_value, ms, num, quantity, size


def test_sizes_and_times_in_engineering_units():
    assert (size(16384), size(786432), size(1.638e-5 * 1e9), size(40.2e9), size(12)) == ("16.4 kB", "786 kB", "16.4 kB", "40.2 GB", "12 B")
    assert (ms(0.053), ms(4.912), ms(16), ms(1500), ms(0)) == ("53 µs", "4.912 ms", "16 ms", "1.5 s", "0 s")
    assert (num(0.0007864), num(15), num(1234567)) == ("0.000786", "15", "1234567")
    assert quantity(0.25, "ms") == "250 µs" and quantity(132, "token") == "132 token" and quantity("EP", None) == "EP"
    assert field_value("boundaries", {"device_step_ms": 16, "client_receipt_ms": 0.03}) == "device_step_ms 16 ms, client_receipt_ms 30 µs"


def test_the_bound_report_prints_no_exponent_and_no_bare_gb_column():
    out = run_cli("bound", str(REPO / "examples" / "qwen3-30b-a3b-spreadsheet.yaml")).stdout
    assert "e-0" not in out and "(GB)" not in out
    assert "98.3 kB" in out and "µs" in out
