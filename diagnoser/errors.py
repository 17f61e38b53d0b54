"""Errors that reach the user as one line and a documented exit code.

Exit codes: 0 success, 1 internal error (a bug in diagnoser or a rule), 2 bad input or usage.
Anything the user can fix (a missing file, a wrong schema, a missing tool) is an ``InputError``
so the CLI prints one line instead of a traceback.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_INPUT = 2
EXIT_FIXTURES_FAILED = 3  # `rules test`: a fixture failed (the rules misbehave, the tool did not)


def nearest(name: str, candidates: list[str]) -> str | None:
    """The candidate a mistyped ``name`` most likely meant, for "did you mean" in a one-line error."""
    import difflib  # only when there is a mistake to explain

    found = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return found[0] if found else None


class DiagnoserError(Exception):
    """Base class; ``exit_code`` tells the CLI how to leave."""

    exit_code = EXIT_INTERNAL


class InputError(DiagnoserError):
    """The user's input (file, flag, environment) is wrong or unusable."""

    exit_code = EXIT_INPUT


class ToolMissingError(InputError):
    """An external tool (nsys, a driver) the command needs is not available."""
