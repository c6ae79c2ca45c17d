"""A call: one request, how long its reply may take, and how the reply becomes the result.

:class:`Operation` makes one description of a call (a function from a method's arguments to
its :class:`Call`) serve as the method of both clients: a ``Client`` method returning the
result, an ``AsyncClient`` coroutine method. Also the conversions of replies that carry no
result type of their own (``+OK``, fields of an extension command's JSON body).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, get_args, overload

import msgspec

from jobq.client.errors import ConnectionLost, malformed
from jobq.client.models import Body
from jobq.server import protocol as p

if TYPE_CHECKING:
    from jobq.client.aio import AsyncClient
    from jobq.client.sync import Client

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    request: p.Request
    #: seconds the server may legitimately take before replying, beyond ``timeout_s``
    wait_s: float
    convert: Callable[[p.Reply], T]


def ms(value: int) -> float:
    """A wait-timeout in milliseconds as the seconds a reply may take."""
    return max(value, 0) / 1000


# ---------------------------------------------------------------------------------------
# Conversions
# ---------------------------------------------------------------------------------------


def ok(value: T) -> Callable[[p.Reply], T]:
    """The conversion of a ``+OK`` reply: ``value``."""

    def convert(reply: p.Reply) -> T:
        if not isinstance(reply, p.Ok):
            raise malformed(reply)
        return value

    return convert


_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.Decoder().decode


def _body(reply: p.Reply) -> Body:
    """The JSON object of an extension command's ``+OK <size>`` reply."""
    if not isinstance(reply, p.DataReply):
        raise malformed(reply)
    try:
        body = _json_decode(reply.body)
    except msgspec.DecodeError as exc:
        raise ConnectionLost(f"malformed reply: {exc}") from exc
    if not isinstance(body, dict):
        raise ConnectionLost("malformed reply: the body is not a JSON object")
    return body


def ext(
    command: str, body: Mapping[str, Any], wait_s: float, convert: Callable[[Body], T]
) -> Call[T]:
    """The call of an extension command: its JSON body out, the reply's through ``convert``."""
    request = p.Extension(command, _json_encode(body))

    def finish(reply: p.Reply) -> T:
        return convert(_body(reply))

    return Call(request, wait_s, finish)


def with_body(call: Call[Any], convert: Callable[[Body], T]) -> Call[T]:
    """``call``'s extension request, its reply's JSON body converted by ``convert``."""

    def finish(reply: p.Reply) -> T:
        return convert(_body(reply))

    return Call(call.request, call.wait_s, finish)


def key(name: str) -> Callable[[Body], str]:
    """The conversion to the body's text field ``name``."""

    def convert(body: Body) -> str:
        value = body.get(name)
        if not isinstance(value, str):
            raise ConnectionLost(f"malformed reply: no {name}")
        return value

    return convert


def items(name: str) -> Callable[[Body], list[Any]]:
    """The conversion to the body's list ``name`` (empty if it is missing)."""

    def convert(body: Body) -> list[Any]:
        return list(body.get(name) or [])

    return convert


def nothing(body: Body) -> None:
    return None


def same(body: Body) -> Body:
    return body


# ---------------------------------------------------------------------------------------
# Operations: one description, a method of each client
# ---------------------------------------------------------------------------------------


class Operation(Generic[P, T]):
    """One client operation: ``build`` checks the method's arguments and returns its call.

    Written once in :class:`~jobq.client.operations.Operations`; each client class gets a
    plain method for it at its creation (see ``Operations.__init_subclass__``), so a method
    call costs what a hand-written one does. To the type checker the attribute reads as
    ``Callable[P, T]`` on a :class:`Client` and as a coroutine method on an
    :class:`AsyncClient`; ``help()`` and ``inspect.signature`` show ``build``'s parameters
    and docstring.
    """

    def __init__(self, build: Callable[P, Call[T]]) -> None:
        self.build = build
        self.name = build.__name__
        self.__doc__ = build.__doc__  # what inspect.getdoc finds when a method has none
        self._signature: inspect.Signature | None = None

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Operation[P, T]: ...
    @overload
    def __get__(self, obj: Client, owner: type[Any] | None = None) -> Callable[P, T]: ...
    @overload
    def __get__(
        self, obj: AsyncClient, owner: type[Any] | None = None
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...
    def __get__(self, obj: object, owner: type[Any] | None = None) -> Any:
        if obj is None:
            return self
        # only a class that did not install its methods gets here
        raise TypeError(f"{type(obj).__name__} runs no operations")

    def method(self, owner: type[Any], coroutine: bool) -> Callable[..., Any]:
        """``owner``'s method for this operation: it returns ``self._call(call)`` for the
        call ``build`` makes of its arguments (awaited, in a coroutine method, when
        ``coroutine``), with ``build``'s parameters (``self`` first) and docstring."""
        built = inspect.signature(self.build)
        method = _forwarder(self.name, built, self.build, coroutine)
        method.__qualname__ = f"{owner.__qualname__}.{self.name}"
        method.__module__ = owner.__module__
        method.__doc__ = self.build.__doc__
        if self._signature is None:
            this = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
            self._signature = built.replace(
                parameters=[this, *built.parameters.values()],
                return_annotation=_result_annotation(built.return_annotation),
            )
        method.__signature__ = self._signature  # type: ignore[attr-defined]
        # typing.get_type_hints resolves these names where build was written
        method.__annotations__ = {
            **self.build.__annotations__,
            "return": self._signature.return_annotation,
        }
        method.__wrapped__ = self.build  # type: ignore[attr-defined]
        return method


def _forwarder(
    name: str, signature: inspect.Signature, build: Callable[..., Any], coroutine: bool
) -> Callable[..., Any]:
    """``def name(self, <signature>): return self._call(build(<its arguments>))``, or the
    ``async def`` awaiting ``self._call`` when ``coroutine``.

    Made from source, as dataclasses makes ``__init__``: a real parameter list makes a wrong
    call fail as a hand-written method's would (at the call, even for a coroutine, with the
    same message) and passes the arguments on without packing them into ``*args``.
    """
    defaults: dict[str, Any] = {}
    params, args = ["self"], []
    keyword_only = False
    for param in signature.parameters.values():
        text = param.name
        if param.kind is param.VAR_POSITIONAL:
            text = f"*{param.name}"
            args.append(text)
            keyword_only = True
        elif param.kind is param.VAR_KEYWORD:
            text = f"**{param.name}"
            args.append(text)
        elif param.kind is param.KEYWORD_ONLY:
            if not keyword_only:
                params.append("*")
                keyword_only = True
            args.append(f"{param.name}={param.name}")
        elif param.kind is param.POSITIONAL_OR_KEYWORD:
            args.append(param.name)
        else:
            raise TypeError(f"{name}: positional-only parameters are not supported")
        if param.default is not param.empty:
            defaults[f"_default_{param.name}"] = param.default
            text += f"=_default_{param.name}"
        params.append(text)
    run = "await self._call" if coroutine else "self._call"
    source = (
        f"def make({', '.join(['_build', *defaults])}):\n"
        f"    {'async ' if coroutine else ''}def {name}({', '.join(params)}):\n"
        f"        return {run}(_build({', '.join(args)}))\n"
        f"    return {name}\n"
    )
    namespace: dict[str, Any] = {}
    exec(source, {}, namespace)
    method: Callable[..., Any] = namespace["make"](build, **defaults)
    return method


def operation(build: Callable[P, Call[T]]) -> Operation[P, T]:
    """Decorator: ``build`` becomes an operation of both clients."""
    return Operation(build)


def _result_annotation(annotation: Any) -> Any:
    """``Call[X]`` -> ``X``: a method returns what its call's reply converts to."""
    if isinstance(annotation, str):
        return annotation.removeprefix("Call[").removesuffix("]")
    return get_args(annotation)[0]
