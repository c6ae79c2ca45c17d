"""The shell examples of README.md and docs/*.md: every command of every ```sh block."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```(sh|bash|shell|console)\s*$")


@dataclass(frozen=True)
class Example:
    """One command as a doc shows it (a quoted string may run over several lines)."""

    doc: str
    line: int
    text: str

    @property
    def key(self) -> str:
        """The command's words, without its comment: what the checks are keyed by."""
        return " ".join(shlex.split(self.text, comments=True))

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.key}"


def examples() -> list[Example]:
    found: list[Example] = []
    for path in DOCS:
        lines = path.read_text(encoding="utf-8").splitlines()
        inside = False
        pending: list[str] = []
        start = 0
        for number, line in enumerate(lines, 1):
            if not inside:
                inside = _FENCE.match(line) is not None
                continue
            if line.startswith("```"):
                assert not pending, f"{path.name}:{start}: unfinished command"
                inside = False
                continue
            if not pending and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if not pending:
                start = number
            pending.append(line)
            text = "\n".join(pending)
            try:
                shlex.split(text, comments=True)
            except ValueError:  # an open quote: the command goes on
                continue
            found.append(Example(path.relative_to(ROOT).as_posix(), start, text))
            pending = []
    return found


def example(key: str) -> Example:
    """The example whose words are ``key``."""
    matches = [e for e in examples() if e.key == key]
    assert matches, f"no shell example in the docs is {key!r}"
    return matches[0]
