"""Each operation is written once (jobq.client.operations) and both clients expose it with
the same name, parameters, docstring and types: blocking on Client, a coroutine on
AsyncClient."""

from __future__ import annotations

import inspect
import pydoc
import typing

import pytest

from jobq.client import AsyncClient, Client, LeasedJob
from jobq.client.calls import Operation
from jobq.client.operations import Operations

OPERATIONS = sorted(
    name for name, value in vars(Operations).items() if isinstance(value, Operation)
)


def test_every_operation_is_a_method_of_both_clients() -> None:
    assert len(OPERATIONS) > 30
    for name in OPERATIONS:
        sync, aio = vars(Client)[name], vars(AsyncClient)[name]
        assert not inspect.iscoroutinefunction(sync), name
        assert inspect.iscoroutinefunction(aio), name
        assert inspect.signature(sync) == inspect.signature(aio), name
        assert sync.__doc__ == aio.__doc__ == getattr(Operations, name).build.__doc__, name
        assert (sync.__qualname__, aio.__qualname__) == (f"Client.{name}", f"AsyncClient.{name}")


@pytest.mark.parametrize("cls", [Client, AsyncClient])
def test_methods_show_their_parameters_and_types(cls: type) -> None:
    assert str(inspect.signature(cls.lease)) == (
        "(self, *names: 'str', wait_timeout_ms: 'int' = 60000) -> 'LeasedJob'"
    )
    assert str(inspect.signature(cls(timeout_s=1).pause)) == (
        "(id: 'JobId | None' = None, *, created_by: 'CreatedBy | None' = None, "
        "reason: 'str' = '', actor: 'str | None' = None) -> 'JobsChanged'"
    )
    hints = typing.get_type_hints(cls.lease)
    assert hints == {"names": str, "wait_timeout_ms": int, "return": LeasedJob}
    text = pydoc.render_doc(cls.add, renderer=pydoc.plaintext)
    assert "ttr_ms: 'int' = 60000" in text and "returns its id" in text


def test_a_subclass_keeps_the_methods() -> None:
    class Custom(Client):
        pass

    assert Custom.add is Client.add
    assert Custom.from_address("127.0.0.1:1").port == 1
    assert type(AsyncClient.from_address(":1")) is AsyncClient


def test_a_wrong_call_fails_at_the_call_as_a_hand_written_method_would() -> None:
    with pytest.raises(TypeError, match=r"^Client\.add\(\) missing 1 required positional"):
        Client().add()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^Client\.add\(\) takes from 2 to 3 positional"):
        Client().add("q", b"", 60_000)  # type: ignore[misc]
    with pytest.raises(TypeError, match=r"^AsyncClient\.lease\(\) got an unexpected keyword"):
        AsyncClient().lease("q", wait=1)  # type: ignore[call-arg]  # no coroutine is made


def test_wrong_arguments_raise_before_anything_is_sent() -> None:
    client = Client("127.0.0.1", 1, timeout_s=1)  # nothing listens: a send would fail
    with pytest.raises(TypeError):
        client.add("q", b"", 60_000)  # type: ignore[misc]
    with pytest.raises(ValueError, match="at least one queue name"):
        client.lease()
    with pytest.raises(ValueError, match="either an id or created_by"):
        client.cancel()
    assert not client.connected
