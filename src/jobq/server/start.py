"""Running the server from its settings: the event loop, logging, and the exit status.

``jobq server``'s click command (``cli/server.py``) ends here; ``jobq up`` and the test
harnesses run their servers on :func:`run_event_loop` too.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any

from jobq.config import ConfigError, ServerConfig


def run_event_loop(main: Coroutine[Any, Any, int]) -> int:
    """Run ``main`` on uvloop where it is installed (faster with many small requests),
    else on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def run_server(config: ServerConfig) -> int:
    """Serve until stopped; the process's exit status (an error it cannot start with is
    one line on stderr and status 1; a setting it cannot start with, status 2)."""
    from jobq.cmdlog.errors import CmdlogError
    from jobq.server.app import configure_logging, serve
    from jobq.server.listeners import ListenError
    from jobq.server.replay import ReplayError
    from jobq.server.replication.follower import PrimaryRefused

    configure_logging()
    try:
        return run_event_loop(serve(config))
    except ConfigError as exc:  # a tokens file that does not parse, an open address...
        print(f"jobq server: {exc}", file=sys.stderr)
        return 2
    except PrimaryRefused as exc:  # a standby whose primary cannot be followed
        print(f"jobq server: {exc}", file=sys.stderr)
        return 2 if exc.misuse else 1
    except (CmdlogError, ReplayError, ListenError) as exc:
        print(f"jobq server: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        listen = f"[{config.host}]" if ":" in config.host else config.host
        print(
            f"jobq server: cannot listen on {listen}:{config.port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1
