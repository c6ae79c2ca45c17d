"""Compiles jobq's hot path with mypyc at install (``pip install -e .``, ``make``).

The modules of ``jobq.build.HOT_MODULES`` become C extensions beside their sources, where they
win on import. Anything that goes wrong (no mypyc, a type error, no compiler, a failed
compile) leaves the pure-Python modules, with one warning line (``make`` prints it too,
since pip hides a build's output): the install always starts. ``JOBQ_COMPILE=0`` skips the
compile. ``CC`` names the compiler as usual. Rebuild in place after an edit:
``python setup.py build_ext --inplace``.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
SRC = ROOT / "src"
#: where mypyc writes its C sources (build/ is ignored by git)
C_DIR = ROOT / "build" / "mypyc"


def warn(reason: str) -> None:
    print(
        f"warning: jobq: the hot path is not compiled ({reason}); "
        "installing the pure-Python modules",
        file=sys.stderr,
        flush=True,
    )


def hot_modules() -> tuple[str, ...]:
    """``jobq.build.HOT_MODULES``, read without importing jobq (``JOBQ_HOT_MODULES``, names
    separated by commas, compiles others instead: for the tests)."""
    if os.environ.get("JOBQ_HOT_MODULES"):
        return tuple(os.environ["JOBQ_HOT_MODULES"].split(","))
    namespace: dict[str, object] = {}
    text = (SRC / "jobq" / "build.py").read_text()
    start = text.index("HOT_MODULES = (")
    exec(text[start : text.index(")", start) + 1], namespace)
    modules = namespace["HOT_MODULES"]
    assert isinstance(modules, tuple)
    return modules


def remove_compiled() -> None:
    """Drop every compiled module of an earlier build from the sources (jobq has no other
    extension modules): a failed or skipped build must leave none to load."""
    from importlib.machinery import EXTENSION_SUFFIXES

    for suffix in EXTENSION_SUFFIXES:
        for compiled in (SRC / "jobq").rglob(f"*{suffix}"):
            compiled.unlink()


#: the commands that build extensions (pip's metadata steps run setup.py too: no compile)
BUILD_COMMANDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "develop", "install"}
IN_PLACE = {"editable_wheel", "develop", "--inplace", "-i"}


def extensions() -> list[object]:
    """mypyc's extensions for the hot modules, or none (with the warning) if it fails."""
    if not BUILD_COMMANDS.intersection(sys.argv):
        return []
    if IN_PLACE.intersection(sys.argv):
        remove_compiled()  # whatever happens next, no stale build is left to load
    if os.environ.get("JOBQ_COMPILE", "1") == "0":
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        warn("mypyc is not installed")
        return []
    paths = [str(Path("src", *m.split("."))) + ".py" for m in hot_modules()]
    cwd = os.getcwd()
    said = io.StringIO()  # mypyc's notes (and errors) go to stdout: shown only if it fails
    try:
        os.chdir(ROOT)
        with contextlib.redirect_stdout(said):
            # one group: one shared library (jobq/hot__mypyc) that each module's stub imports
            return list(
                mypycify(paths, opt_level="3", group_name="jobq.hot", target_dir=str(C_DIR))
            )
    except (Exception, SystemExit) as exc:  # mypyc exits on a type error
        errors = [line for line in said.getvalue().splitlines() if ": error:" in line]
        warn(f"mypyc failed: {errors[0] if errors else exc}")
        return []
    finally:
        os.chdir(cwd)


class BuildHotPath(build_ext):
    """build_ext that falls back to pure Python if any extension fails to build."""

    def run(self) -> None:
        if not self.extensions:
            return
        try:
            super().run()
        except (Exception, SystemExit) as exc:  # distutils raises CompileError, LinkError...
            warn(f"the C compile failed: {str(exc).strip() or type(exc).__name__}")
            remove_compiled()
            self.extensions = []
            return
        touch_compiled()

    def get_outputs(self) -> list[str]:
        return super().get_outputs() if self.extensions else []

    def get_output_mapping(self) -> dict[str, str]:
        return super().get_output_mapping() if self.extensions else {}


def touch_compiled() -> None:
    """Date the compiled modules now: a build whose C sources did not change copies the
    earlier build's files with their old times, and ``jobq.build`` takes a compiled module
    older than its source for a stale one."""
    from importlib.machinery import EXTENSION_SUFFIXES

    for suffix in EXTENSION_SUFFIXES:
        for compiled in (SRC / "jobq").rglob(f"*{suffix}"):
            os.utime(compiled)


setup(ext_modules=extensions(), cmdclass={"build_ext": BuildHotPath})
