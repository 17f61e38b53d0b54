"""One input file, loaded once and viewed as whatever it parses as (JSON, JSON lines, YAML, lines).

Recognisers look at content, never at names: an export renamed by the user or a log saved as
``out.txt`` is still what it is. Every view is parsed lazily and at most once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from diagnoser.errors import InputError

MAX_BYTES = 64 * 1024 * 1024  # a day of a busy server's log; cut a larger one to the run it is about
_YAML_MAX_BYTES = 4 * 1024 * 1024  # YAML parsing is slow and only configurations and small reports are YAML


@dataclass
class Artifact:
    path: Path
    text: str

    @classmethod
    def load(cls, path: str | Path) -> "Artifact":
        from diagnoser.jsondoc import read_bytes

        where = Path(path)
        data = read_bytes(where, "an artifact", MAX_BYTES)
        if not data.strip():
            raise InputError(f"{where}: file is empty")
        if b"\0" in data[:4096]:
            raise InputError(f"{where}: binary data, not a text artifact (gzip or other archives: unpack them first)")
        return cls(where, data.decode("utf-8", errors="replace"))

    @property
    def name(self) -> str:
        return self.path.name

    def at(self, line: int) -> str:
        """Source of a fact read from one line."""
        return f"{self.name}:{line}"

    def key(self, *keys: str | int) -> str:
        """Source of a fact read from a JSON or YAML key."""
        return f"{self.name} {'.'.join(str(k) for k in keys)}"

    @cached_property
    def lines(self) -> list[str]:
        """Lines as ``grep -n`` and editors count them: split at newlines only (a progress bar's
        carriage returns stay inside its line), so a ``file:line`` source can be looked up."""
        lines = self.text.split("\n")
        if lines[-1] == "":
            lines.pop()
        return [line.removesuffix("\r") for line in lines]

    @cached_property
    def json(self) -> Any:
        """The whole text as one JSON document, or None."""
        if self.text.lstrip()[:1] not in ("{", "["):
            return None
        try:
            return json.loads(self.text)
        except ValueError:
            return None
        except RecursionError:
            raise InputError(f"{self.name}: JSON nested too deeply to read") from None

    @cached_property
    def jsonl(self) -> list[dict] | None:
        """JSON lines: every non-blank line one JSON object (at least two lines), or None."""
        rows = [line for line in self.lines if line.strip()]
        if len(rows) < 2 or self.json is not None:
            return None
        parsed = []
        for line in rows:
            try:
                row = json.loads(line)
            except ValueError:
                return None
            if not isinstance(row, dict):
                return None
            parsed.append(row)
        return parsed

    @cached_property
    def yaml(self) -> Any:
        """A YAML mapping (JSON first, it is YAML too), or None; plain text that YAML reads as one string is not YAML."""
        if self.json is not None:
            return self.json
        if len(self.text) > _YAML_MAX_BYTES:
            return None
        from diagnoser.models.documents import NotYaml, parse_yaml

        try:
            doc = parse_yaml(self.text, self.name)
        except NotYaml:
            return None
        return doc if isinstance(doc, dict) else None

    @cached_property
    def mapping(self) -> dict | None:
        """The document as a mapping from JSON or YAML, the form most exports take."""
        doc = self.yaml
        return doc if isinstance(doc, dict) else None
