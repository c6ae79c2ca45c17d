"""Credentials in job arguments are masked in descriptions, the job list and logs.

A key that names a secret (password, secret, token, access key, credentials, ...) has its value
replaced by ``***``; a URL's user info (``scheme://user:pass@host``) too.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["MASK", "describe", "redact", "redact_text"]

#: what a secret is replaced by
MASK = "***"

_SECRET_KEY = re.compile(
    r"(pass(word|wd)?|secret|token|access[_.-]?key|credential|private[_.-]?key|api[_.-]?key|"
    r"auth|session[_.-]?key|sas)",
    re.IGNORECASE,
)
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<info>[^/@\s]+)@")
_INLINE = re.compile(
    r"(?P<key>[\w.-]*(?:password|secret|token|access[_.-]?key|credential|api[_.-]?key)[\w.-]*)"
    r"(?P<sep>\s*[=:]\s*)(?P<q>['\"]?)(?P<value>[^'\"\s,;&)}]+)",
    re.IGNORECASE,
)


def redact_text(text: str) -> str:
    """``text`` with URL user info and ``key=value`` secrets masked."""
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    return _INLINE.sub(lambda m: f"{m['key']}{m['sep']}{m['q']}{MASK}", text)


def redact(value: Any) -> Any:
    """A copy of a JSON value with secrets masked: the values of secret-named keys, URL user
    info and inline ``password=...`` in strings."""
    if isinstance(value, dict):
        return {
            k: (MASK if isinstance(k, str) and _SECRET_KEY.search(k) else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


def describe(name: str, args: Any, limit: int = 200) -> str:
    """A one-line description of a job from its arguments, secrets masked."""
    text = json.dumps(redact(args), separators=(",", ":"), sort_keys=True)
    line = f"{name} {text}"
    return line if len(line) <= limit else line[: limit - 1] + "…"
