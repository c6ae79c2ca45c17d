"""``jobq promote``: make a standby the primary by hand (docs/ha.md, "Promotion and epochs").

The standby stops following, logs a new epoch and takes writes from then on. Nothing
stops the old primary meanwhile: promote a standby only once the old primary is down or
cut off (``--ha-etcd`` leaves that to an election). Exit codes: 0 promoted, 1 the server
cannot be reached, 2 refused (it is the primary already, an epoch not newer than its
log's, a token that is not an admin's, several servers given).
"""

from __future__ import annotations

import click

from jobq.cli.common import (
    EXIT_USAGE,
    Remote,
    client_options,
    connected,
    fail,
    json_option,
    print_json,
)


@click.command("promote")
@click.option(
    "--epoch", type=click.IntRange(min=1), default=None,
    help="The epoch to start; it must be newer than any the server saw [default: one more].",
)
@json_option
@client_options
def promote_command(epoch: int | None, as_json: bool, server: Remote) -> None:
    """Make the standby at --server the primary: it logs a new epoch and takes writes."""
    if server.several:  # a list would promote whichever server answered first
        fail("promote takes one server (--server HOST:PORT), not a list", EXIT_USAGE)
    with connected(server) as client:
        result = client.promote(epoch=epoch)
    if as_json:
        print_json(result)
        return
    click.echo(f"{server.address} is the primary, epoch {result['epoch']} (was {result['was']})")
