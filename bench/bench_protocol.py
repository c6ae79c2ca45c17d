"""Request parser throughput: commands parsed per second, before and after an optimization.

Run: ``python -m bench.bench_protocol [--commands 200000] [--runs 3] [--baseline PATH]``.

Parses a realistic stream of workq commands (``add`` with a 100-byte payload, ``lease``,
``complete`` with a small result, in equal thirds) fed one command per ``feed()`` and in
16 KiB chunks, draining ``next_event()`` after every feed as the server does. The current
``jobq.server.protocol`` is compared with a baseline copy of the module loaded by path
(default ``/tmp/protocol_orig.py``; skipped when the file does not exist). Also times each
hot command alone. Prints a markdown table of the best of ``--runs`` runs (before and
after alternate, so that load from elsewhere hits both alike).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import astuple, is_dataclass
from types import ModuleType
from typing import Any

import msgspec

from jobq.server import protocol as current

#: payload of every add, in bytes
PAYLOAD_BYTES = 100
#: feed size of the chunked case
CHUNK_BYTES = 16 * 1024
DEFAULT_BASELINE = "/tmp/protocol_orig.py"


def load_baseline(path: str) -> ModuleType | None:
    if not os.path.exists(path):
        return None
    spec = importlib.util.spec_from_file_location("_jobq_protocol_baseline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _id(i: int) -> str:
    return str(uuid.UUID(int=(i * 0x9E3779B97F4A7C15) % 2**128))


def command(kind: str, i: int) -> bytes:
    """One command of the given kind, as a client sends it."""
    if kind == "add":
        payload = bytes((i + k) % 256 for k in range(PAYLOAD_BYTES))
        head = f"add {_id(i)} email-jobs 60000 3600000 {len(payload)}\r\n"
        return head.encode() + payload + b"\r\n"
    if kind == "lease":
        return b"lease email-jobs sms-jobs 10000\r\n"
    if kind == "complete":
        return f"complete {_id(i)} 2\r\n".encode() + b"ok\r\n"
    if kind == "fail":
        return f"fail {_id(i)} 4\r\n".encode() + b"oops\r\n"
    if kind == "delete":
        return f"delete {_id(i)}\r\n".encode()
    if kind == "result":
        return f"result {_id(i)} 1000\r\n".encode()
    if kind == "inspect-job":
        return f"inspect job {_id(i)}\r\n".encode()
    raise ValueError(kind)


MIX = ("add", "lease", "complete")


def stream(kinds: tuple[str, ...], count: int) -> list[bytes]:
    # a pool of distinct commands, repeated: building 200k payloads would dominate setup
    pool = [command(kinds[i % len(kinds)], i) for i in range(min(count, 3000))]
    return [pool[i % len(pool)] for i in range(count)]


def chunked(commands: list[bytes], size: int) -> list[bytes]:
    data = b"".join(commands)
    return [data[i : i + size] for i in range(0, len(data), size)]


def parse_all(module: ModuleType, feeds: list[bytes]) -> int:
    parser = module.RequestParser()
    feed, next_event = parser.feed, parser.next_event
    events = 0
    for chunk in feeds:
        feed(chunk)
        while next_event() is not None:
            events += 1
    return events


def best_rates(bodies: list[Callable[[], int]], runs: int) -> list[float]:
    """Each body's best rate; runs alternate between the bodies so load hits all alike."""
    best = [0.0] * len(bodies)
    for _ in range(runs):
        for index, body in enumerate(bodies):
            start = time.perf_counter()
            n = body()
            elapsed = time.perf_counter() - start
            best[index] = max(best[index], n / elapsed)
    return best


def _values(event: Any) -> tuple[Any, ...]:
    """An event's field values, whether a msgspec Struct or (an older baseline) a dataclass."""
    if is_dataclass(event):
        return astuple(event)  # type: ignore[arg-type]
    return msgspec.structs.astuple(event)


def events_of(module: ModuleType, feeds: list[bytes]) -> list[tuple[str, Any]]:
    parser = module.RequestParser()
    out = []
    for chunk in feeds:
        parser.feed(chunk)
        while (event := parser.next_event()) is not None:
            out.append((type(event).__name__, _values(event)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commands", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--baseline", default=DEFAULT_BASELINE)
    args = ap.parse_args()
    baseline = load_baseline(args.baseline)
    modules: list[tuple[str, ModuleType]] = [("after", current)]
    if baseline is not None:
        modules.insert(0, ("before", baseline))

    mixed = stream(MIX, args.commands)
    cases: list[tuple[str, list[bytes]]] = [
        ("mix, 1 command per feed", mixed),
        ("mix, 16 KiB feeds", chunked(mixed, CHUNK_BYTES)),
    ]
    single = max(args.commands // 4, 1000)
    for kind in ("add", "lease", "complete", "fail", "delete", "result", "inspect-job"):
        cases.append((f"{kind} only, 16 KiB feeds", chunked(stream((kind,), single), CHUNK_BYTES)))

    if baseline is not None:  # the optimization must not change a single event
        for name, feeds in cases:
            assert events_of(baseline, feeds) == events_of(current, feeds), name

    print(f"{args.commands} mixed commands ({'/'.join(MIX)}), best of {args.runs} runs\n")
    head = " | ".join(f"{label} (cmd/s)" for label, _ in modules)
    print(f"| case | {head} |" + (" speedup |" if baseline is not None else ""))
    print("|---|" + "---:|" * (len(modules) + (baseline is not None)))
    for name, feeds in cases:
        bodies = [lambda m=m, f=feeds: parse_all(m, f) for _, m in modules]
        rates = best_rates(bodies, args.runs)
        cells = " | ".join(f"{r:,.0f}" for r in rates)
        extra = f" {rates[-1] / rates[0]:.2f}x |" if baseline is not None else ""
        print(f"| {name} | {cells} |{extra}")


if __name__ == "__main__":
    main()
