"""The HTTP API's routes, by concern (``jobs.py``, ``schedules.py``), and what they share:
running a request through the core and answering with its outcome."""

from __future__ import annotations

from typing import Any

from fastapi.responses import Response

from jobq.http import bridge
from jobq.http.errors import Outcome, error
from jobq.http.models import OperateBody
from jobq.server.core import Core
from jobq.server.extensions import parse_time


def respond(outcome: Outcome) -> Response:
    return Response(outcome.body, status_code=outcome.status, media_type="application/json")


def bad(text: str, status: int = 400) -> Response:
    return respond(error(status, text))


async def run(core: Core, word: str, body: dict[str, Any]) -> Response:
    """The response to the extension command ``word`` with a JSON ``body``."""
    return respond(await bridge.extension(core, word, body))


def time_ok(text: str | None) -> bool:
    """Whether ``text`` is a time the server takes (or None)."""
    if text is None:
        return True
    try:
        value = parse_time(text)
    except Exception:
        return False
    return 0 <= value < 2**63


def operation_body(body: OperateBody | None, **extra: Any) -> dict[str, Any]:
    """The body of a pause, resume or cancel: ``extra`` and the reason and actor given."""
    out: dict[str, Any] = dict(extra)
    if body is not None:
        out["reason"] = body.reason
        if body.actor is not None:
            out["actor"] = body.actor
    return out
