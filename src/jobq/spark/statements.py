"""SQL text split into statements at its top-level semicolons, as Spark's lexer reads it:
a ``;`` inside a string (``'...'``, ``"..."``, with backslash escapes; raw ``r'...'``), a
back-quoted name or a comment (``-- ...``, nested ``/* ... */``) does not split.

A SQL script (text whose first word is ``BEGIN``) is one statement. Pure Python: the
arguments' checks use it at submit time, without pyspark.
"""

from __future__ import annotations

__all__ = ["split_statements"]

_QUOTES = "'\"`"


def split_statements(text: str) -> list[str]:
    """The statements of ``text``, stripped, without empty ones (``"SELECT 1;;"`` is one)."""
    if _first_word(text).upper() == "BEGIN":
        stripped = text.strip().rstrip(";").strip()
        return [stripped] if stripped else []
    statements: list[str] = []
    start = 0
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == ";":
            statements.append(text[start:i])
            start = i + 1
            i += 1
        elif c in _QUOTES:
            i = _end_of_quoted(text, i, raw=_is_raw_prefix(text, i))
        elif text.startswith("--", i):
            newline = text.find("\n", i)
            i = n if newline < 0 else newline + 1
        elif text.startswith("/*", i):
            i = _end_of_comment(text, i)
        else:
            i += 1
    statements.append(text[start:])
    return [s.strip() for s in statements if s.strip()]


def _is_raw_prefix(text: str, quote: int) -> bool:
    """True when the quote at ``quote`` opens a raw string (``r'...'``, ``R"..."``)."""
    if text[quote] == "`" or quote == 0 or text[quote - 1] not in "rR":
        return False
    return quote == 1 or not (text[quote - 2].isalnum() or text[quote - 2] == "_")


def _end_of_quoted(text: str, start: int, raw: bool) -> int:
    """The index after the quoted text opened at ``start`` (the end of ``text`` if it is
    not closed: Spark then reports the error)."""
    quote = text[start]
    i = start + 1
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\" and quote != "`" and not raw:
            i += 2
        elif c == quote:
            return i + 1
        else:
            i += 1
    return n


def _end_of_comment(text: str, start: int) -> int:
    """The index after the bracketed comment opened at ``start`` (they nest)."""
    depth = 0
    i = start
    n = len(text)
    while i < n:
        if text.startswith("/*", i):
            depth += 1
            i += 2
        elif text.startswith("*/", i):
            depth -= 1
            i += 2
            if depth == 0:
                return i
        else:
            i += 1
    return n


def _first_word(text: str) -> str:
    """The first word of ``text`` outside comments (a label ``name:`` is skipped)."""
    i = 0
    n = len(text)
    words: list[str] = []
    while i < n and len(words) < 2:
        if text[i].isspace():
            i += 1
        elif text.startswith("--", i):
            newline = text.find("\n", i)
            i = n if newline < 0 else newline + 1
        elif text.startswith("/*", i):
            i = _end_of_comment(text, i)
        else:
            j = i
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            if j == i:
                break
            words.append(text[i:j])
            i = j
            while i < n and text[i].isspace():
                i += 1
            if i < n and text[i] == ":" and not text.startswith(":=", i):
                i += 1  # a label: the word after it counts
                continue
            break
    return words[-1] if words else ""
