"""The compiled hot path's build (setup.py, jobq.build): a broken compiler leaves pure Python
with one warning line, and JOBQ_PURE_PYTHON=1 loads the pure-Python modules."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

from click.testing import CliRunner

import jobq.build
from jobq.cli import main as cli_main

ROOT = Path(__file__).resolve().parent.parent


def _python(code: str, src: Path, **env: str) -> str:
    environ = {**os.environ, "PYTHONPATH": str(src), **env}
    done = subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_a_broken_compiler_leaves_pure_python_and_one_warning(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "src" / "jobq", tree / "src" / "jobq",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.py", "pyproject.toml"):
        shutil.copy(ROOT / name, tree / name)
    # a compiled module of an earlier build must not survive a failed one
    stale = tree / "src" / "jobq" / "engine" / f"sortedjobs{EXTENSION_SUFFIXES[0]}"
    stale.write_bytes(b"not a library")
    environ = {
        **os.environ,
        "CC": "false",  # a compiler that fails whatever it is given
        # one small module, so that mypyc's type check is quick
        "JOBQ_HOT_MODULES": "jobq.engine.sortedjobs",
    }
    environ.pop("JOBQ_COMPILE", None)
    done = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=tree, env=environ, capture_output=True, text=True, timeout=240,
    )
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning: jobq")]
    assert len(warnings) == 1, done.stderr
    assert "not compiled" in warnings[0] and "pure-Python" in warnings[0]
    assert not [p for s in EXTENSION_SUFFIXES for p in (tree / "src").rglob(f"*{s}")]
    # the install starts, on the pure-Python modules
    found = _python(
        "import jobq.build as b, jobq.engine.sortedjobs as m; print(b.hot_path(), m.__file__)",
        tree / "src",
    )
    assert found.startswith("pure Python ") and found.endswith("sortedjobs.py")


def test_jobq_pure_python_loads_the_sources() -> None:
    src = Path(jobq.build.__file__).parent.parent
    code = (
        "import jobq.build as b, jobq.engine.machine as m, jobq.server.dispatch as d;"
        "print(b.hot_path(), m.__file__.endswith('.py'), d.__file__.endswith('.py'))"
    )
    assert _python(code, src, JOBQ_PURE_PYTHON="1") == "pure Python True True"


def test_version_says_which_hot_path_runs() -> None:
    result = CliRunner().invoke(cli_main, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"jobq, version {jobq.__version__} ({jobq.build.hot_path()} hot path)\n"
    assert jobq.build.hot_path() in (jobq.build.COMPILED, jobq.build.PURE)
