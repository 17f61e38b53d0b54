"""``diagnoser lab exercise``: a hidden fault on the real vLLM, the commands that find it, then the reveal.

The fault is drawn among those the real server can be given here (``none`` included: "nothing is
wrong" is an answer too). The trainee gets the URL and the commands any user of a vLLM server has:
``diagnoser live`` with the load their users send, and ``diagnoser case from`` on the server's log.
The request fields are part of that load (a JSON schema on every request is the users' traffic,
not a hint); everything else must be found.
"""

from __future__ import annotations

import random

from diagnoser.lab.real import OFFERED, Lab, live_args, shell
from diagnoser.real_vllm.faults import FAULTS, HOST_BASELINE_SHARE, Fault

# What a healthy server looks like here, printed with the commands: the trainee's noise floor.
HEALTHY = (f"A healthy server here spends up to {HOST_BASELINE_SHARE:.0%} of its step on the host (host-overhead: "
           "the CPU build's baseline, not a fault), shows no other cause measured above 15 % of the step, and none "
           "named by its settings or counters (a cause indicated, or one whose evidence holds a server.* or speculation.* "
           "figure, at any size). Answer with the first cause the diagnosis ranks beyond that, else none.")


def draw(seed: int | None = None) -> Fault:
    return FAULTS[random.Random(seed).choice(sorted(OFFERED))]


def commands(lab: Lab, fault: Fault) -> list[str]:
    """The commands printed for the trainee: each works against the lab as started."""
    return [
        shell([*live_args(lab.url, fault), "-o", "case.yaml"]) + "   # measure and diagnose; keeps the case",
        "diagnoser diagnose case.yaml --json   # the same diagnosis again, every figure",
        shell(["diagnoser", "case", "from", str(lab.log), "-o", "log-case.yaml"]) + "   # what the server's log says",
        HEALTHY,
    ]


def verdict(fault: Fault, answer: str) -> tuple[bool, str]:
    """Whether the answer names the fault's cause (``none``: an empty answer or "none")."""
    answer = answer.strip()
    expected = fault.cause or "none"
    right = answer == expected or (not fault.cause and answer in ("", "none"))
    return right, f"the fault was {fault.name}: {fault.how}; its cause is {expected}"
