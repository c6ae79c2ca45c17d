"""What a server imports before its first reply: the optional parts (the etcd client under
``--ha-etcd``, FastAPI under ``--http``) only when they are asked for, since every module
loaded is start-up time (bench/RESULTS.md, "restart")."""

from __future__ import annotations

import subprocess
import sys

#: a server's start without --http or --ha-etcd: the command line and the server
_START = "import sys, jobq.entry, jobq.cli.server, jobq.server.app; print(sorted(sys.modules))"


def test_a_plain_server_start_loads_neither_etcd_nor_fastapi() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", _START], capture_output=True, text=True, check=True
    ).stdout
    for optional in ("etcd3gw", "requests", "fastapi", "uvicorn"):
        assert f"'{optional}'" not in loaded, f"{optional} is loaded by a plain server start"
    assert "'jobq.server.app'" in loaded  # the list is the one printed


#: which specs make ``prepare_cron`` import croniter, in a fresh interpreter
_CRON = (
    "import sys; from jobq.engine.specs import Spec, prepare_cron; "
    "print('croniter' in sys.modules, prepare_cron([Spec(every_ms=1000)]), "
    "'croniter' in sys.modules, prepare_cron([Spec(every_ms=1000), Spec(cron='* * * * *')]), "
    "'croniter' in sys.modules)"
)


def test_croniter_is_imported_after_a_replay_only_for_cron_schedules() -> None:
    """A start that replayed cron schedules imports croniter before serving
    (``specs.prepare_cron``), not in their first firing; one with none does not."""
    seen = subprocess.run(
        [sys.executable, "-c", _CRON], capture_output=True, text=True, check=True
    ).stdout.split()
    assert seen == ["False", "False", "False", "True", "True"]
