"""The scripted session's replies, log bytes, engine state and command-line texts are as
``expected.json`` keeps them: code that moves changes none of them (see ``session.py``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.golden.session import EXPECTED, run_session


@pytest.fixture(scope="module")
def session() -> dict[str, Any]:
    return run_session()


@pytest.fixture(scope="module")
def expected() -> dict[str, Any]:
    return json.loads(EXPECTED.read_text())  # type: ignore[no-any-return]


def test_replies_are_as_kept(session: dict[str, Any], expected: dict[str, Any]) -> None:
    assert len(session["transcript"]) == len(expected["transcript"])
    for got, kept in zip(session["transcript"], expected["transcript"], strict=True):
        assert got == kept


def test_log_bytes_are_as_kept(session: dict[str, Any], expected: dict[str, Any]) -> None:
    assert session["segments"] == expected["segments"]
    assert session["log_sha256"] == expected["log_sha256"]


def test_engine_state_is_as_kept_and_replays_to_itself(
    session: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert session["engine_sha256"] == expected["engine_sha256"]
    assert session["replayed_engine_sha256"] == session["engine_sha256"]


def test_command_line_texts_are_as_kept(
    session: dict[str, Any], expected: dict[str, Any]
) -> None:
    got = {args: (code, text) for args, code, text in session["command_line"]}
    kept = {args: (code, text) for args, code, text in expected["command_line"]}
    assert got.keys() == kept.keys()
    for args, value in kept.items():
        assert got[args] == value, args
