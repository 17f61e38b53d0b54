"""Numeric flags that refuse what click lets through: NaN, infinity, and values out of range.

``click.FloatRange`` compares with ``<``, so ``nan`` passes every bound, and click's own usage
errors take three lines; a bad figure here is one ``InputError`` line naming the flag.
"""

from __future__ import annotations

import math
from typing import Any

import click

from diagnoser.errors import InputError


class Number(click.ParamType):
    """An int or a finite float within ``[low, high]`` (either bound optional)."""

    def __init__(self, kind: type[int] | type[float] = float, low: float | None = None, high: float | None = None) -> None:
        self.kind = kind
        self.low = low
        self.high = high
        self.name = "integer" if kind is int else "float"

    def _range(self) -> str:
        if self.high is None:
            return f">= {self.low:g}" if self.low is not None else "finite"
        return f"in {self.low:g}..{self.high:g}" if self.low is not None else f"<= {self.high:g}"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | float:
        flag = param.opts[0] if param is not None and param.opts else "value"
        wanted = f"expected {'an integer' if self.kind is int else 'a finite number'} {self._range()}, got {value!r}"
        try:
            number = self.kind(value)
        except (TypeError, ValueError, OverflowError):
            raise InputError(f"{flag}: {wanted}") from None
        if isinstance(number, float) and not math.isfinite(number):
            raise InputError(f"{flag}: {wanted}")
        if (self.low is not None and number < self.low) or (self.high is not None and number > self.high):
            raise InputError(f"{flag}: {wanted}")
        return number
