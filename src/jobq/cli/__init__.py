"""The ``jobq`` command line: one click group, each command group in its own module here
(``cli/jobs.py``, ``cli/server.py``, ...), what they share in ``cli/common.py``.

Subcommands are imported only when run, so ``jobq server`` starts without loading the
others (nor FastAPI, rich, the client). Exit codes: 0 ok, 1 failure, 2 usage (bad input:
a one-line message, nothing changed).
"""

from __future__ import annotations

import importlib

import click

from jobq import __version__
from jobq.build import hot_path

#: command name -> "module:attribute" of its click command
SUBCOMMANDS: dict[str, str] = {
    "server": "jobq.cli.server:server_command",
    "log": "jobq.cli.log:log_group",
    "worker": "jobq.cli.worker:worker_command",
    "submit": "jobq.cli.submit:submit_command",
    "jobs": "jobq.cli.jobs:jobs_group",
    "up": "jobq.cli.up:up_command",
    "status": "jobq.cli.status:status_command",
    "schedules": "jobq.cli.schedules:schedules_group",
    "audit": "jobq.cli.audit:audit_command",
    "workers": "jobq.cli.workers:workers_group",
    "promote": "jobq.cli.promote:promote_command",
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *SUBCOMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = SUBCOMMANDS.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module_name, attribute = target.split(":")
        command = getattr(importlib.import_module(module_name), attribute)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    __version__, prog_name="jobq", package_name="jobq",
    message=f"%(prog)s, version %(version)s ({hot_path()} hot path)",
)
def main() -> None:
    """jobq: a durable job server and scheduler for Spark data pipelines."""
