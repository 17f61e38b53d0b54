"""Reading a trainee's answer: a number with or without its unit, a choice, an ordering.

An answer that cannot be read is not a wrong answer: ``Unreadable`` says what was expected,
so an interactive session asks again and a scripted one records it as unreadable.
"""

from __future__ import annotations

import re
import string
from typing import Any

# Spellings accepted after a number, by the unit a step is written in.
UNIT_SPELLINGS = {
    "ms": ("ms", "msec", "millisecond", "milliseconds"),
    "tokens/s": ("tokens/s", "token/s", "tok/s", "t/s", "tokens per second", "tps"),
    "%": ("%", "percent"),
    "x": ("x", "×", "times"),
    "tokens": ("tokens", "token", "tok", "tokens/cycle", "tokens per cycle"),
    "experts": ("experts", "expert"),
    "gb": ("gb",),
}
NUMBER = re.compile(r"^\s*([-+]?(?:\d[\d,_]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*?)\s*$")
SEPARATORS = re.compile(r"\s*(?:,|;|->|>|\s)\s*")


class Unreadable(ValueError):
    """The answer is not of the step's kind; the message says what was expected."""


def letters(count: int) -> list[str]:
    return list(string.ascii_lowercase[:count])


def read_number(answer: Any, unit: str) -> float:
    if isinstance(answer, bool):
        raise Unreadable(f"expected a number in {unit}")
    if isinstance(answer, (int, float)):
        return float(answer)
    match = NUMBER.match(str(answer))
    if not match:
        raise Unreadable(f"expected a number in {unit}, e.g. '5' or '5 {unit}'")
    number, suffix = match.groups()
    spellings = UNIT_SPELLINGS.get(unit.lower(), (unit.lower(),))
    if suffix and suffix.lower() not in spellings:
        raise Unreadable(f"read {number} {suffix!r}, but this step is in {unit}")
    return float(number.replace(",", "").replace("_", ""))


def _option(token: str, keys: list[str]) -> str | None:
    token = token.strip().strip("()").rstrip(").").lower()
    lettered = dict(zip(letters(len(keys)), keys))
    if token in lettered:
        return lettered[token]
    return next((k for k in keys if k.lower() == token), None)


def read_choice(answer: Any, keys: list[str]) -> str:
    key = _option(str(answer), keys)
    if key is None:
        shown = ", ".join(letters(len(keys)))
        raise Unreadable(f"expected one letter ({shown}) or a choice id ({', '.join(keys)})")
    return key


def read_order(answer: Any, keys: list[str]) -> list[str]:
    tokens = [str(t) for t in answer] if isinstance(answer, list) else [t for t in SEPARATORS.split(str(answer).strip()) if t]
    order = [_option(t, keys) for t in tokens]
    if None in order or sorted(order) != sorted(keys):  # type: ignore[type-var]
        raise Unreadable(
            f"expected all {len(keys)} items once each, by letter or id, e.g. '{' '.join(letters(len(keys)))}'"
        )
    return order  # type: ignore[return-value]
