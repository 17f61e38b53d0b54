"""Figures as a person reads them at a glance: 16.4 kB, 0.79 MB, 53 µs, 1.2 s.

One place decides how bytes and times are printed, so the text, Markdown and HTML reports
and the TUI never disagree on a figure, and nobody has to count the digits of ``1.638e-05``
GB. Byte prefixes are decimal (1 kB = 1000 B), as bandwidths are quoted in GB/s; a size
keeps three significant digits (all a bound from datasheets can claim), a time four (as the
engine reports step times).
"""

from __future__ import annotations

import math
from typing import Any

_BYTE_PREFIXES = ((1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"))
# Units a size may be given in, and what one of each is in bytes.
_BYTES_IN = {"GB": 1e9, "MB": 1e6, "kB": 1e3, "KB": 1e3, "B": 1.0, "bytes": 1.0}
_SECONDS_FROM = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def num(x: float) -> str:
    """A bare figure with four significant digits and no exponent a person has to decode."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    if 1e-3 <= abs(x) < 1e7:
        text = f"{x:.4g}"
        if "e" not in text:
            return text
        return f"{x:.0f}"
    return f"{x:.3g}"


def _three(x: float) -> str:
    """Three significant digits, without a trailing '.0'."""
    text = f"{x:.3g}"
    return f"{float(text):.0f}" if "e" in text else text


def size(n_bytes: float) -> str:
    """Bytes with a decimal prefix and three significant digits: 16.4 kB, 786 kB, 40.2 GB."""
    for factor, prefix in _BYTE_PREFIXES:
        if abs(n_bytes) >= factor:
            return f"{_three(n_bytes / factor)} {prefix}"
    return f"{_three(n_bytes)} B"


def duration(seconds: float) -> str:
    """A time in the unit that keeps it between 1 and 1000: 53 µs, 4.912 ms, 1.3 s (four digits, as
    the engine reports step times)."""
    magnitude = abs(seconds)
    for factor, unit in ((1, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if magnitude >= factor:
            return f"{num(seconds / factor)} {unit}"
    return f"{num(seconds * 1e9)} ns" if magnitude else "0 s"


def ms(milliseconds: float) -> str:
    """A time given in milliseconds, the unit of every step figure in a case."""
    return duration(milliseconds * 1e-3)


def gb(gigabytes: float) -> str:
    """A size given in GB, the unit the bound carries."""
    return size(gigabytes * 1e9)


def quantity(value: Any, unit: str | None) -> str:
    """A value with its unit: sizes and times rescaled, anything else as given."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{value}{' ' + unit if unit else ''}"
    if unit in _BYTES_IN:
        return size(value * _BYTES_IN[unit])
    if unit in _SECONDS_FROM:
        return duration(value * _SECONDS_FROM[unit])
    return f"{num(value)}{' ' + unit if unit else ''}"


_SUFFIX_UNITS = (("_ms", "ms"), ("_us", "us"), ("_s", "s"), ("_bytes", "B"), ("_gb", "GB"), ("_gbs", "GB/s"))


def field_unit(name: str) -> str | None:
    """The unit a case field's name carries by convention (``device_step_ms`` is in ms)."""
    return next((unit for suffix, unit in _SUFFIX_UNITS if name.endswith(suffix)), None)


def field_value(name: str, value: Any) -> str:
    """One field as a person reads it: a mapping as ``name value`` pairs, a list item by item."""
    if isinstance(value, dict):
        return ", ".join(f"{key} {field_value(str(key), item)}" for key, item in value.items())
    if isinstance(value, list):
        return "; ".join(field_value(name, item) for item in value) or "none"
    return quantity(value, field_unit(name))
