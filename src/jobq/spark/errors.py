"""Spark's failures as one line of text: the error's own message (condition and first line),
never a Java stack trace, with credentials masked."""

from __future__ import annotations

import re

from jobq.spark.redact import redact_text

__all__ = ["SparkJobError", "one_line"]

#: longest error text, in characters
MAX_ERROR_CHARS = 500
#: how deep the Java causes of a read failure are looked at
_MAX_CAUSES = 8

_CONDITION = re.compile(r"^\s*\[(?P<condition>[A-Z0-9_.]+)\]\s*")
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+.*$")
_JAVA_CLASS = re.compile(r"^(?:[a-z][\w$]*\.)+(?P<name>[A-Z][\w$]*(?:Exception|Error))\s*:?\s*")


class SparkJobError(Exception):
    """A Spark job failed; its message is one line (the worker sends it with ``xfail``)."""


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line, without stack traces or query plans."""
    if isinstance(exc, SparkJobError):
        return str(exc)
    text = _message(exc)
    text = redact_text(" ".join(text.split()))
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 1] + "…"
    return text or type(exc).__name__


def _message(exc: BaseException) -> str:
    try:
        from pyspark.errors import PySparkException
    except ImportError:  # pragma: no cover - pyspark is there when Spark jobs run
        PySparkException = ()  # type: ignore[assignment,misc]
    if isinstance(exc, PySparkException):
        raw = exc.getMessage() if hasattr(exc, "getMessage") else str(exc)
        if not raw:
            raw = str(exc)
        return _with_cause(exc, _first_line(raw))
    java = getattr(exc, "java_exception", None)
    if java is not None:  # a Py4JJavaError that pyspark did not convert
        try:
            raw = str(java.toString())
        except Exception:
            raw = str(exc)
        return _with_cause(exc, _first_line(raw))
    return _first_line(str(exc)) if "\n\tat " in str(exc) else str(exc)


def _with_cause(exc: BaseException, first: str) -> str:
    """A failed read's message says only which file: add what it failed on."""
    if "[FAILED_READ_FILE" not in first:
        return first
    cause = _cause_text(exc)
    return f"{first}: {cause}" if cause else first


def _causes(exc: BaseException) -> list[str]:
    """The first lines of the Java causes of a Spark error, outermost first."""
    found: list[str] = []
    origin = getattr(exc, "_origin", None) or getattr(exc, "java_exception", None)
    cause = origin.getCause() if origin is not None else None
    while cause is not None and len(found) < _MAX_CAUSES:
        try:
            found.append(_first_line(str(cause.toString())))
            cause = cause.getCause()
        except Exception:
            break
    return [text for text in found if text]


def _cause_text(exc: BaseException) -> str:
    """What a read failed on: the first cause naming an error condition (``[...]``),
    and the root cause when it says more."""
    try:
        causes = _causes(exc)
    except Exception:
        return ""
    if not causes:
        return ""
    named = next((c for c in causes if c.endswith("]") and "[" in c), causes[0])
    root = causes[-1]
    return named if root == named or root in named else f"{named}; {root}"


def _first_line(raw: str) -> str:
    lines = [line.strip() for line in raw.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    first = lines[0]
    if first.startswith("An error occurred while calling") and len(lines) > 1:
        first = lines[1].lstrip(": ")
    first = _JAVA_CLASS.sub("", first)
    condition = ""
    match = _CONDITION.match(first)
    if match:
        condition = match["condition"]
        first = first[match.end() :]
    first = _SQLSTATE.sub("", first).strip()
    if condition == "PARSE_SYNTAX_ERROR" or (not first and len(lines) > 1):
        # the parser's message is on the next line; the position follows
        rest = _CONDITION.sub("", first if first else lines[1])
        first = _SQLSTATE.sub("", rest).strip() + _position(lines)
    first = first.split(" Search path:")[0].strip()
    first = re.sub(r";\s*line \d+ pos \d+.*$", "", first)
    return f"{first} [{condition}]" if condition else first


def _position(lines: list[str]) -> str:
    for line in lines:
        m = re.search(r"\(line \d+, pos \d+\)", line)
        if m:
            return f" {m.group(0)}"
    return ""
