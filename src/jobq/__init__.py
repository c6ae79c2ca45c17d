"""jobq: a durable job server and scheduler for Spark data pipelines, compatible with workq.

``jobq.handler``, ``jobq.JobContext``, ``jobq.Paused``, ``jobq.Canceled`` and
``jobq.Runtime`` come from :mod:`jobq.worker`, and ``jobq.pipeline`` from
:mod:`jobq.spark.registry`, imported on first use so ``import jobq`` stays cheap (and never
imports pyspark).
"""

from __future__ import annotations

__version__ = "0.1.0"

# The hot path may run compiled (jobq.build): JOBQ_PURE_PYTHON=1, or compiled modules older
# than their sources, make the pure-Python ones load instead. Before anything imports them.
from jobq.build import choose_modules

choose_modules()

TYPE_CHECKING = False  # not typing's: importing typing would make `import jobq` slower
if TYPE_CHECKING:
    from typing import Any

    from jobq.spark.registry import pipeline
    from jobq.worker import Canceled, JobContext, Paused, Runtime, handler

__all__ = ["Canceled", "JobContext", "Paused", "Runtime", "__version__", "handler", "pipeline"]

#: lazily exported name -> the module it lives in
_LAZY = {
    "handler": "jobq.worker",
    "JobContext": "jobq.worker",
    "Paused": "jobq.worker",
    "Canceled": "jobq.worker",
    "Runtime": "jobq.worker",
    "pipeline": "jobq.spark.registry",
}


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'jobq' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
