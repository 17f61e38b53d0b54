"""Ranges a physical figure must lie in before any arithmetic uses it.

``gt=0`` admits 5e-324, which turns a floor into zero and a ceiling into a division by zero;
these bounds are far wider than any real device or step, and narrow enough that every
product and quotient the bound forms stays finite and non-zero.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

# 1 MB/s to 1 PB/s: below is no memory, above is a unit slip (bytes/s typed as GB/s).
BandwidthGBs = Annotated[float, Field(ge=1e-3, le=1e6)]
# At least one byte, at most an exabyte per step.
StepBytes = Annotated[float, Field(ge=1, le=1e18)]
# Any other strictly positive figure (a time, a rate, a ratio): no denormal that divides to
# infinity, no value whose product with another overflows.
MIN_POSITIVE = 1e-9
Positive = Annotated[float, Field(ge=MIN_POSITIVE, le=1e15)]
# Tokens per second, of one stream or a whole service: a billion is past any deployment, and it
# keeps a step derived from a rate (1e3 / rate ms) inside the Positive range.
TokenRate = Annotated[float, Field(ge=1e-6, le=1e9)]
