"""Handlers and the registry that maps job names to them.

``@jobq.handler(name)`` registers a function in the default registry (:data:`REGISTRY`)
and returns it unchanged, so importing a module is what makes its handlers known to
``jobq worker --import MODULE``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

if TYPE_CHECKING:
    from jobq.client import Client
    from jobq.worker.context import JobContext

__all__ = [
    "DEFAULT_STALL_TIMEOUT_S",
    "REGISTRY",
    "Duration",
    "Handler",
    "HandlerFn",
    "Registry",
    "handler",
    "parse_duration_s",
]

#: the least stall timeout when a handler gives none (10 minutes; longer if its TTR is)
DEFAULT_STALL_TIMEOUT_S = 600.0

#: a handler: gets the job's context; returns the result (bytes, text or None)
HandlerFn: TypeAlias = "Callable[[JobContext], bytes | str | None]"
#: a cancel hook: gets the job's context of a canceled job, before the job is released
CancelHook: TypeAlias = "Callable[[JobContext], object]"
#: a duration: ``"5m"``, ``"30s"``, ``"1h30m"``, ``"500ms"``, a timedelta, or seconds
Duration: TypeAlias = str | timedelta | int | float

F = TypeVar("F", bound=Callable[..., Any])


def parse_duration_s(value: Duration, what: str = "duration") -> float:
    """A :data:`Duration` in seconds (> 0); ValueError for anything else."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, str):
        from jobq.config import ConfigError, parse_duration_ms

        try:
            seconds = parse_duration_ms(value) / 1000
        except ConfigError as exc:
            raise ValueError(f"{what}: {exc}") from None
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise TypeError(f"{what} is a duration text, a timedelta or seconds, not {value!r}")
    if not seconds > 0:
        raise ValueError(f"{what} must be positive, not {value!r}")
    return seconds


@dataclass(frozen=True, slots=True)
class Handler:
    """A registered handler.

    :ivar name: the job name (queue) it serves
    :ivar fn: the function; gets a :class:`~jobq.JobContext`
    :ivar ttr_ms: the TTR jobs of this handler are meant to have (used by :meth:`submit`
        and for the default stall timeout); None: not set. The lease's own TTR is what the
        worker heartbeats against.
    :ivar on_cancel: called with the context when the job was canceled while running,
        before the worker releases it
    :ivar stall_timeout_s: background heartbeats for a job stop once its handler has not
        called ``progress()`` for this long, so a hung handler loses its lease; None: the
        default, ``max(ttr, 10 minutes)``
    """

    name: str
    fn: HandlerFn
    ttr_ms: int | None = None
    on_cancel: CancelHook | None = None
    stall_timeout_s: float | None = None

    def stall_timeout_for(self, lease_ttr_ms: int) -> float:
        """The stall timeout for a job leased with ``lease_ttr_ms``, in seconds."""
        if self.stall_timeout_s is not None:
            return self.stall_timeout_s
        ttr_ms = self.ttr_ms if self.ttr_ms is not None else lease_ttr_ms
        return max(ttr_ms / 1000, DEFAULT_STALL_TIMEOUT_S)

    def submit(self, client: Client, payload: bytes | str = b"", **options: Any) -> str:
        """Submit a job for this handler with ``client``; ``ttr_ms`` defaults to the
        handler's TTR. Other options as :meth:`jobq.client.Client.submit`."""
        if self.ttr_ms is not None:
            options.setdefault("ttr_ms", self.ttr_ms)
        return client.submit(self.name, payload, **options)


class Registry:
    """Job name -> :class:`Handler`. One name has one handler."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}
        self._lock = threading.Lock()

    def add(self, entry: Handler) -> Handler:
        """Register ``entry``; ValueError if its name already has a different handler."""
        with self._lock:
            known = self._handlers.get(entry.name)
            if known is not None and not _same_function(known.fn, entry.fn):
                raise ValueError(f"a handler for {entry.name!r} is already registered")
            self._handlers[entry.name] = entry
        return entry

    def handler(
        self,
        name: str,
        *,
        ttr: Duration | None = None,
        ttr_ms: int | None = None,
        on_cancel: CancelHook | None = None,
        stall_timeout: Duration | None = None,
    ) -> Callable[[F], F]:
        """Register the decorated function as the handler of jobs named ``name``.

        :param ttr: the TTR its jobs are meant to have (``"5m"``, a timedelta, seconds), or
            ``ttr_ms``; used by :meth:`Handler.submit` and for the default stall timeout
        :param on_cancel: ``hook(job)``, run when the job is canceled while running
        :param stall_timeout: stop heartbeating a job whose handler has not called
            ``progress()`` for this long (default ``max(ttr, 10 minutes)``)
        """
        from jobq.client import _name

        _name(name)
        if ttr is not None and ttr_ms is not None:
            raise ValueError("give ttr or ttr_ms, not both")
        if ttr is not None:
            ttr_ms = round(parse_duration_s(ttr, "ttr") * 1000)
        if ttr_ms is not None and not (isinstance(ttr_ms, int) and ttr_ms > 0):
            raise ValueError(f"ttr_ms must be a positive int, not {ttr_ms!r}")
        stall_s = None if stall_timeout is None else parse_duration_s(stall_timeout, "stall")
        if on_cancel is not None and not callable(on_cancel):
            raise TypeError("on_cancel must be callable")

        def register(fn: F) -> F:
            if not callable(fn):
                raise TypeError("a handler must be callable")
            self.add(Handler(name, fn, ttr_ms, on_cancel, stall_s))
            return fn

        return register

    def get(self, name: str) -> Handler | None:
        return self._handlers.get(name)

    def __getitem__(self, name: str) -> Handler:
        return self._handlers[name]

    def __contains__(self, name: object) -> bool:
        return name in self._handlers

    def __iter__(self) -> Iterator[Handler]:
        return iter(list(self._handlers.values()))

    def __len__(self) -> int:
        return len(self._handlers)

    def names(self) -> list[str]:
        """The registered job names, sorted."""
        return sorted(self._handlers)

    def remove(self, name: str) -> None:
        """Forget the handler of ``name`` (tests)."""
        with self._lock:
            self._handlers.pop(name, None)

    def clear(self) -> None:
        with self._lock:
            self._handlers.clear()


def _same_function(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    # a module imported twice (as a script and as a module, or reloaded) registers the
    # same function again: accept that, refuse a different function under the same name
    if a is b:
        return True
    return (
        getattr(a, "__module__", None) == getattr(b, "__module__", None)
        and getattr(a, "__qualname__", None) == getattr(b, "__qualname__", None)
    )


#: the registry ``@jobq.handler`` and ``jobq worker`` use
REGISTRY = Registry()

#: ``@jobq.handler(name, ...)``: :meth:`Registry.handler` of :data:`REGISTRY`
handler = REGISTRY.handler
