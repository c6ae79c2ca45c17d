"""HTTP statuses come from the kind an error reply carries, never from its text."""

from __future__ import annotations

from jobq.engine.errors import ErrorKind
from jobq.http import bridge
from jobq.http.errors import STATUS
from jobq.server import protocol as p


def test_every_kind_has_a_status() -> None:
    assert {kind: STATUS[kind] for kind in ErrorKind} == {
        ErrorKind.INVALID: 400,
        ErrorKind.NOT_FOUND: 404,
        ErrorKind.CONFLICT: 409,
        ErrorKind.TIMEOUT: 504,
        ErrorKind.UNAVAILABLE: 503,
        ErrorKind.FORBIDDEN: 403,
        ErrorKind.FULL: 507,
        ErrorKind.READONLY: 409,
    }


def test_a_standby_s_refusal_names_the_primary() -> None:
    from jobq.http.errors import refusal

    outcome = refusal(p.read_only("10.0.0.5:9922"))
    assert outcome.status == 409
    assert outcome.json() == {
        "error": "read-only standby: changes go to the primary at 10.0.0.5:9922",
        "primary": "10.0.0.5:9922",
    }


def test_error_replies_become_statuses_by_kind() -> None:
    cases = [
        (p.client_error("Invalid Name"), 400, "Invalid Name"),
        (p.client_error("Schedule not found", ErrorKind.NOT_FOUND), 404, "Schedule not found"),
        (p.client_error("Job is paused", ErrorKind.CONFLICT), 409, "Job is paused"),
        (p.not_found(), 404, "Not found"),
        (p.timeout(), 504, "Timeout"),
        (p.server_error("Command log unavailable"), 503, "Command log unavailable"),
        (p.server_error("Job limit reached", ErrorKind.FULL), 507, "Job limit reached"),
        # the same text of another kind is another status: never matched on text
        (p.server_error("Job limit reached"), 503, "Job limit reached"),
        # the text alone decides nothing
        (p.client_error("Job is paused"), 400, "Job is paused"),
        (p.client_error("Nothing not found"), 400, "Nothing not found"),
    ]
    for reply, status, text in cases:
        outcome = bridge.to_outcome(reply)
        assert (outcome.status, outcome.json()) == (status, {"error": text}), reply


def test_an_error_line_without_a_kind_is_not_trusted() -> None:
    outcome = bridge.to_outcome(b"-CLIENT-ERROR Job is paused\r\n")
    assert (outcome.status, outcome.json()) == (503, {"error": "Unexpected reply"})


def test_success_replies_are_their_body() -> None:
    assert bridge.to_outcome(b'+OK 2\r\n{}\r\n').body == b"{}"
    assert bridge.to_outcome(p.ok(), ok_body=b'{"id": "x"}').body == b'{"id": "x"}'
