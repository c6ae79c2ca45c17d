"""Which build of the hot path runs: the modules mypyc compiled at install, or pure Python.

``setup.py`` compiles :data:`HOT_MODULES` (the request path: connection, core, parser,
dispatcher, engine, record codec) into C extensions placed next to their sources, where they
win on import; a missing or broken compiler leaves the pure-Python modules (docs/server.md,
"The compiled hot path"). ``JOBQ_PURE_PYTHON=1`` makes ``import jobq`` skip the compiled
modules (a finder put ahead of the others by :func:`prefer_sources`), so that both builds can
be tested; so does a compiled build older than its sources (an edit since the last install),
with a warning.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES, ModuleSpec

#: the modules setup.py compiles. Not compiled: modules holding msgspec structs (the classes
#: mypyc makes of them lose their field types, which msgspec needs), and those whose heap
#: entries are tuples known by identity (``queues.py``, ``deadlines.py``: mypyc unboxes a
#: fixed-length tuple, and boxes it anew wherever it is stored)
HOT_MODULES = (
    "jobq.cmdlog.record",
    "jobq.engine.apply",
    "jobq.engine.ceiling",
    "jobq.engine.indexes",
    "jobq.engine.journal",
    "jobq.engine.kept_runs",
    "jobq.engine.machine",
    "jobq.engine.scheduler",
    "jobq.engine.sortedjobs",
    "jobq.engine.tick",
    "jobq.server.commit",
    "jobq.server.core",
    "jobq.server.dispatch",
    "jobq.server.protocol.parser",
    "jobq.server.protocol.values",
    "jobq.server.tcp",
)
#: set to 1 to run the pure-Python modules although compiled ones are installed
PURE_ENV = "JOBQ_PURE_PYTHON"
COMPILED = "compiled"
PURE = "pure Python"

_SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _paths(module: str) -> tuple[str, list[str]]:
    """The module's source file and the extension files it may have beside it."""
    base = os.path.join(_SRC, *module.split("."))
    return base + ".py", [base + suffix for suffix in EXTENSION_SUFFIXES]


def compiled_files() -> list[str]:
    """The compiled hot-path modules present beside their sources."""
    return [f for module in HOT_MODULES for f in _paths(module)[1] if os.path.exists(f)]


def stale() -> bool:
    """Whether a hot module's source is newer than its compiled file (edited since the build)."""
    for module in HOT_MODULES:
        source, extensions = _paths(module)
        for extension in extensions:
            try:
                if os.stat(source).st_mtime > os.stat(extension).st_mtime:
                    return True
            except FileNotFoundError:
                continue
    return False


class _SourceFinder:
    """A meta-path finder that loads the hot modules from their ``.py`` files."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> ModuleSpec | None:
        if fullname not in HOT_MODULES:
            return None
        from importlib.util import spec_from_file_location  # (not on import jobq's path)

        return spec_from_file_location(fullname, _paths(fullname)[0])


def prefer_sources() -> None:
    """Load the hot modules from their sources from now on (before any of them is imported)."""
    if not any(isinstance(finder, _SourceFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder())


def choose_modules() -> None:
    """Called by ``import jobq``: load the hot modules from their sources if
    ``JOBQ_PURE_PYTHON=1``, or if any compiled one is older than its source (one warning)."""
    if os.environ.get(PURE_ENV) == "1":
        prefer_sources()
    elif stale():
        print(
            "warning: jobq: the compiled hot path is older than its sources; running pure "
            "Python (`make` or `python setup.py build_ext --inplace` rebuilds it)",
            file=sys.stderr,
        )
        prefer_sources()


def hot_path() -> str:
    """:data:`COMPILED` if the hot modules running (or that would run) are compiled, else
    :data:`PURE`."""
    if any(isinstance(finder, _SourceFinder) for finder in sys.meta_path):
        return PURE
    module = sys.modules.get(HOT_MODULES[0])
    if module is not None:
        return COMPILED if not (module.__file__ or "").endswith(".py") else PURE
    return COMPILED if len(compiled_files()) == len(HOT_MODULES) else PURE

