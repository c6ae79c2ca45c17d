"""Spark pipelines for jobq workers: the session factory, the progress bridge and the
built-in job types (``spark.import``, ``spark.export``, ``spark.backup``, ``spark.restore``,
``spark.sql``, ``spark.pipeline``). ``docs/spark.md`` describes them.

Importing :mod:`jobq.spark` does not import pyspark; :mod:`jobq.spark.args` validates the
built-in types' arguments without it.
"""

from __future__ import annotations

from typing import Any

from jobq.spark.args import JOB_TYPES, ArgumentError, validate

__all__ = ["BUILTIN_TYPES", "JOB_TYPES", "ArgumentError", "describe", "pipeline", "validate"]

#: the built-in job types (the scheduled-jobs executor registry offers them too)
BUILTIN_TYPES = tuple(JOB_TYPES)


def describe(name: str, payload: bytes | str | dict[str, Any] | None) -> str:
    """A one-line description of a job from its JSON arguments, credentials masked."""
    import json

    from jobq.spark.redact import describe as _describe

    args: Any = payload
    if isinstance(payload, bytes | str):
        try:
            args = json.loads(payload) if payload else None
        except ValueError:
            args = "<not JSON>"
    return _describe(name, args)


def __getattr__(name: str) -> Any:
    if name == "pipeline":
        from jobq.spark.registry import pipeline

        return pipeline
    raise AttributeError(f"module 'jobq.spark' has no attribute {name!r}")
