"""``diagnoser lab exercise``: a hidden fault to find with the normal commands, then the reveal.

The fault is drawn at random among those with a form on the device (``none`` included, since
"nothing is wrong" is an answer too). The trainee gets only the server's URL; they probe,
profile and diagnose it as any server, then name the rule id of the cause they found.
"""

from __future__ import annotations

import random

from diagnoser.lab.faults import FAULTS, Fault, with_form


def draw(device: str, seed: int | None = None) -> Fault:
    return FAULTS[random.Random(seed).choice(sorted(with_form(device)))]


def verdict(fault: Fault, answer: str) -> tuple[bool, str]:
    """Whether the answer names the fault's cause (``none``: an empty answer or "none")."""
    answer = answer.strip()
    expected = fault.cause or "none"
    right = answer == expected or (not fault.cause and answer in ("", "none"))
    return right, f"the fault was {fault.name}: {fault.what}; its cause is {expected}"
