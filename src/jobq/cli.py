"""The ``jobq`` command line: one group, each subcommand group in the module that owns it.

Exit codes: 0 ok, 1 failure, 2 usage (bad input: a one-line message, nothing changed).
"""

from __future__ import annotations

import click

from jobq import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="jobq")
def main() -> None:
    """jobq: a durable job server and scheduler for Spark data pipelines."""


def _register() -> None:
    from jobq.logtool import log_group
    from jobq.server.cli import server_command

    main.add_command(log_group)
    main.add_command(server_command)


_register()
