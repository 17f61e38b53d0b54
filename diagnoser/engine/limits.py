"""Keeping a rule a guest: a time limit per rule call, and stdout kept for diagnoser's own output.

Rules come from users and packs. One that loops, prints or calls ``sys.exit`` must cost the
report that rule, never the run: its body and each of its conditions run under a timer, and
anything it prints goes to stderr so ``--json`` stays a clean document on stdout.

The timer is SIGALRM, so it works in the main thread of a Unix process (the CLI); elsewhere
(a worker thread in the TUI, Windows) rules run without it, as they did before.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

# Bundled rules take microseconds; a second of Python is a loop, not a slow rule.
RULE_TIME_LIMIT_S = 2.0
_REPEAT_S = 0.25  # the alarm fires again if a rule swallows the first one with a bare except


class RuleTimeout(BaseException):
    """Raised into a rule that ran past its limit; a BaseException so ``except Exception`` in the rule cannot keep it."""


_active = False


def _can_time() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def time_limit(seconds: float, what: str) -> Iterator[None]:
    """Raise ``RuleTimeout`` into the block once it has run ``seconds``; nested blocks share the outer timer."""
    global _active
    if _active or not _can_time():
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise RuleTimeout(f"{what} ran past its {seconds:g} s limit")

    previous = signal.signal(signal.SIGALRM, expire)
    _active = True
    signal.setitimer(signal.ITIMER_REAL, seconds, _REPEAT_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        _active = False


@contextlib.contextmanager
def rules_print_to_stderr() -> Iterator[None]:
    """What rules print goes to stderr while they load and run."""
    with contextlib.redirect_stdout(sys.stderr):
        yield
