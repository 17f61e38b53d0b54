"""Text that came from outside diagnoser on its way to a terminal or a rich/Textual widget.

Server bodies, trace names (kernels, ops, NVTX ranges), probe reports, session labels and typed
answers are data, but rich and Textual read ``[...]`` in a string as markup: ``[/]`` in a
kernel name would end a report in a MarkupError, and an escape sequence in a server's error body
would drive the user's terminal. Every such string passes through here once, where it enters a
rendered table, line or widget; nothing else escapes or strips.
"""

from __future__ import annotations

import re
from typing import Any

# CSI and OSC sequences whole, then any other C0/C1 control character but newline and tab
_TERMINAL_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
)


def plain(text: Any) -> str:
    """``text`` as a string with terminal control sequences removed, for plain output (stderr lines)."""
    return _TERMINAL_CONTROL.sub("", str(text))


def markup_safe(text: Any) -> str:
    """``text`` for a rich or Textual string that is read as markup: controls removed, brackets escaped."""
    from rich.markup import escape

    return escape(plain(text))
