"""Restart and replay (issue 24): jobq before and after a change, beanstalkd, in one run.

    python -m bench.bench_restart [--pending 500000] [--rounds 3] [--before DIR]

Rows, each the median of ``--rounds`` rounds, the trees alternated within every round:
- **clean stop**: a log of ``--pending`` pending jobs and the snapshot a clean stop wrote;
  process start to the first reply (beanstalkd: restarted from its binlog, the same jobs);
- **SIGKILL soon after loading**: a server started empty takes ``--pending`` adds over the
  protocol (64-byte payloads, pipelined), is killed (SIGKILL, its process group) at once
  after the last reply, and is started again: to its first reply. What it replayed after
  which snapshot is read from its log;
- **SIGKILL soon after a start that replayed a workq log**: the server of the next row is
  killed ``KILL_AFTER_START_S`` after its first reply, and started again;
- **full replay of a workq log**: ``--pending`` add records as workq-server writes them
  (segment version 1, a logged time per record), no snapshot: to the first reply.

Beside the clean stop, the SIGKILL after loading and the full replay, two CPU times,
steadier than wall times on a shared machine: the server process's (user + system) at its
first reply, and ``restore``'s alone in one process of the tree on the same data
directory (before the timed start).

``--before DIR`` is a checkout of the tree to compare with (``git archive main``; the
checkout or its ``src``): its ``src`` goes first on the ``PYTHONPATH`` of the "before"
servers, this tree's of the others. Without it only this tree is measured. Each tree gets
its own data directories.
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.beanstalkd import LOOPBACK, ServerProcess, beanstalkd_server, free_port
from bench.bench_server import (
    JOBQ,
    PAYLOAD,
    _launch,
    fill_beanstalkd,
    fill_jobq,
    first_reply_s,
)

ROOT = Path(__file__).resolve().parent.parent
#: how long after its first reply a server that replayed a whole log is killed
KILL_AFTER_START_S = 2.0
#: the first reply asked for
INSPECT = b"inspect server\r\n"
_REPLAYED = re.compile(r"replayed (\d+) records .*?: (\d+) jobs in ([\d.]+) s( \(after)?")


class Tree:
    """A jobq source tree run as ``jobq server`` with its ``src`` first on the path."""

    def __init__(self, name: str, root: Path) -> None:
        self.name = name
        self.root = root
        self.env = dict(os.environ, PYTHONPATH=f"{root / 'src'}:{root}")

    def server(self, data_dir: Path, port: int) -> ServerProcess:
        argv = [JOBQ, "server", "--listen", f"{LOOPBACK}:{port}", "--data-dir", str(data_dir)]
        return _EnvServer(
            self.env, "jobq", argv, port, data_dir.parent / f"{self.name}-{port}.log"
        )


class _EnvServer(ServerProcess):
    def __init__(self, env: dict[str, str], *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.env = env


def launch(server: _EnvServer) -> ServerProcess:
    """Start ``server`` with its tree's environment, not waiting for its port."""
    server.log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(server.log_path, "wb") as log:
        server.proc = subprocess.Popen(
            server.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, env=server.env,
        )
    return server


def start_timed(tree: Tree, data_dir: Path) -> tuple[float, ServerProcess]:
    port = free_port()
    return first_reply_s(lambda: launch(tree.server(data_dir, port)), INSPECT, port)


def process_cpu_s(server: ServerProcess) -> float:
    """The CPU time (user + system) the server's process has used so far: read at its
    first reply, its start-up's cost (the interpreter, imports, opening the log, restore),
    less sensitive to the machine's load than the wall time."""
    fields = Path(f"/proc/{server.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sigkill(server: ServerProcess) -> None:
    os.killpg(server.pid, signal.SIGKILL)
    assert server.proc is not None
    server.proc.wait()


def replayed(server: ServerProcess) -> str:
    """``N records after a snapshot of M jobs`` from the server's start-up line."""
    match = _REPLAYED.search(server.log_path.read_text())
    if match is None:
        return "?"
    records, jobs = int(match.group(1)), int(match.group(2))
    if match.group(4) is None:
        return f"{records:,} records, no snapshot"
    return f"{records:,} records after a snapshot of {jobs - records:,} jobs"


def write_workq_log(log_dir: Path, count: int, segment_bytes: int = 64 * 1024 * 1024) -> None:
    """``count`` add records as workq-server writes them: version-1 segments, each record
    with its own logged time (a client's adds, one after another), 64-byte payloads."""
    from jobq.cmdlog.record import VERSION_1, encode_header, encode_record
    from jobq.cmdlog.segment import segment_name
    from jobq.engine.commands import AddJob, encode_workq_command

    log_dir.mkdir(parents=True, exist_ok=True)
    now_ns = time.time_ns() - count * 1000
    segments: list[list[bytes]] = [[encode_header(VERSION_1)]]
    size = 8
    for i in range(count):
        created_ns = now_ns + i * 1000
        command = AddJob(
            uuid.uuid4().bytes, f"q{i % 10}", 60_000, 7 * 86_400_000, 0, 0, 0,
            os.urandom(32).hex().encode(), created_ns,
        )
        record = encode_record(encode_workq_command(command), created_ns + 5_000)
        if size >= segment_bytes:
            segments.append([encode_header(VERSION_1)])
            size = 8
        segments[-1].append(record)
        size += len(record)
    for sequence, records in enumerate(segments, start=1):
        (log_dir / segment_name(sequence)).write_bytes(b"".join(records))


def add_pipelined(port: int, count: int, connections: int = 4) -> None:
    """``count`` adds over ``connections`` connections, each pipelining 1000 at a time;
    returns once every reply came."""
    import threading

    errors: list[BaseException] = []

    def one(share: int) -> None:
        try:
            with socket_to(port) as sock:
                for start in range(0, share, 1000):
                    n = min(1000, share - start)
                    sock.sendall(b"".join(
                        b"add %s q%d 60000 604800000 64\r\n%s\r\n"
                        % (str(uuid.uuid4()).encode(), i % 10, PAYLOAD)
                        for i in range(n)
                    ))
                    buf = b""
                    while buf.count(b"\r\n") < n:
                        data = sock.recv(65536)
                        if not data:
                            raise ConnectionError("the server closed the connection")
                        buf += data
                    if b"-" in buf[:1]:
                        raise RuntimeError(f"unexpected reply: {buf[:80]!r}")
        except BaseException as exc:  # reported below
            errors.append(exc)

    shares = [count // connections + (k < count % connections) for k in range(connections)]
    threads = [threading.Thread(target=one, args=(share,)) for share in shares]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def socket_to(port: int):  # type: ignore[no-untyped-def]
    import socket

    return socket.create_connection((LOOPBACK, port), timeout=120)


def clean_stop_dir(tree: Tree, tmp: Path, pending: int) -> Path:
    """A data directory of ``pending`` jobs and a clean stop's snapshot (the first start
    replays the log, its stop writes the snapshot)."""
    data = tmp / f"clean-{tree.name}"
    fill_jobq(data, pending)
    _, server = start_timed(tree, data)
    server.stop()
    assert (data / "cmdlog" / "engine.snapshot").exists()
    return data


#: run in a tree's environment: the CPU time (``process_time``) of ``restore`` alone, on the
#: server's allocator (``entry.py``), from the data directory given
_RESTORE_CPU = """
import sys, time
from jobq.cmdlog.log import CommandLog
from jobq.engine.machine import Engine
from jobq.server.replay import restore
log = CommandLog.open(sys.argv[1] + "/cmdlog")
engine = Engine(started_ns=time.time_ns())
started = time.process_time()
restore(log, engine, time.time_ns())
print(time.process_time() - started)
log.close()
"""


def restore_cpu_s(tree: Tree, data_dir: Path) -> float:
    """The CPU time of ``restore`` of ``data_dir`` in one process of ``tree`` (steadier
    than the first reply's wall time on a shared machine)."""
    from jobq.entry import GLIBC_TUNABLES

    env = dict(tree.env, PYTHONMALLOC="malloc", GLIBC_TUNABLES=GLIBC_TUNABLES)
    done = subprocess.run(
        [sys.executable, "-c", _RESTORE_CPU, str(data_dir)],
        env=env, cwd=tree.root, capture_output=True, text=True, check=True,
    )
    return float(done.stdout.split()[-1])


def bench(trees: list[Tree], tmp: Path, pending: int, rounds: int) -> dict[str, object]:
    workq = tmp / "workq-log"
    write_workq_log(workq, pending)
    clean = {tree.name: clean_stop_dir(tree, tmp, pending) for tree in trees}
    bean_dir = tmp / "bean"
    port = free_port()
    with beanstalkd_server(bean_dir, 1000, port=port):
        fill_beanstalkd(port, pending)
    results: dict[str, dict[str, list[float]]] = {
        tree.name: {
            "clean": [], "clean_cpu": [], "clean_process": [], "crash": [], "crash_cpu": [],
            "crash_process": [], "crash_start": [], "replay": [], "replay_cpu": [],
            "replay_process": [],
        }
        for tree in trees
    }
    tails: dict[str, dict[str, list[str]]] = {
        tree.name: {"crash": [], "crash_start": []} for tree in trees
    }
    bean: list[float] = []
    for number in range(rounds):
        order = trees if number % 2 == 0 else trees[::-1]
        for tree in order:
            secs, server = start_timed(tree, clean[tree.name])
            results[tree.name]["clean"].append(secs)
            results[tree.name]["clean_process"].append(process_cpu_s(server))
            server.stop()
        for tree in order:
            results[tree.name]["clean_cpu"].append(restore_cpu_s(tree, clean[tree.name]))
        port = free_port()
        secs, server = first_reply_s(
            lambda p=port: _launch(beanstalkd_server(bean_dir, 1000, port=p)), b"stats\r\n", port
        )
        server.stop()
        bean.append(secs)
        for tree in order:
            data = tmp / f"replay-{tree.name}-{number}" / "data"
            shutil.copytree(workq, data / "cmdlog")
            results[tree.name]["replay_cpu"].append(restore_cpu_s(tree, data))
            secs, server = start_timed(tree, data)
            results[tree.name]["replay"].append(secs)
            results[tree.name]["replay_process"].append(process_cpu_s(server))
            time.sleep(KILL_AFTER_START_S)
            sigkill(server)
            secs, server = start_timed(tree, data)
            results[tree.name]["crash_start"].append(secs)
            tails[tree.name]["crash_start"].append(replayed(server))
            sigkill(server)
            shutil.rmtree(data.parent)
        for tree in order:
            data = tmp / f"crash-{tree.name}-{number}" / "data"
            _, server = start_timed(tree, data)
            add_pipelined(server.port, pending)
            sigkill(server)  # at once after the last reply: soon after loading
            # (the restore alone first: it changes nothing on disk but a torn tail's cut,
            # which the server's start would make too)
            results[tree.name]["crash_cpu"].append(restore_cpu_s(tree, data))
            secs, server = start_timed(tree, data)
            results[tree.name]["crash"].append(secs)
            results[tree.name]["crash_process"].append(process_cpu_s(server))
            tails[tree.name]["crash"].append(replayed(server))
            sigkill(server)
            shutil.rmtree(data.parent)
    return {"jobq": results, "beanstalkd": bean, "tails": tails}


def table(found: dict[str, object], trees: list[Tree], pending: int) -> str:
    results = found["jobq"]
    bean = statistics.median(found["beanstalkd"])  # type: ignore[arg-type]
    assert isinstance(results, dict)
    tails = found["tails"]
    assert isinstance(tails, dict)
    # this tree first: the summary (bench/run_all.py) reads a row's first figure
    names = [tree.name for tree in trees][::-1]
    rows = [
        ("clean", f"restart with {pending:,} pending, clean stop: first reply", "<= 0.8 s", True),
        ("clean_process", "the same: CPU time of the server's process at its first reply",
         "-", False),
        ("clean_cpu", "the same: CPU time of `restore` alone, in one process", "-", False),
        ("crash", f"restart with {pending:,} pending after SIGKILL soon after loading "
         f"them over the protocol: first reply", "<= 1.0 s", False),
        ("crash_process", "the same: CPU time of the server's process at its first reply",
         "-", False),
        ("crash_cpu", "the same: CPU time of `restore` alone, in one process", "-", False),
        ("crash_start", f"restart with {pending:,} pending after SIGKILL "
         f"{KILL_AFTER_START_S:.0f} s after a start that replayed them (a workq log): "
         "first reply", "<= 1.0 s", False),
        ("replay", f"full replay of a {pending:,}-job workq log, no snapshot: first reply",
         "<= 1.5 s", False),
        ("replay_process", "the same: CPU time of the server's process at its first reply",
         "-", False),
        ("replay_cpu", "the same: CPU time of `restore` alone, in one process", "-", False),
    ]
    head = " | ".join(names)
    lines = [
        f"| row | {head} | beanstalkd | {names[0]} / beanstalkd | target |",
        "|---|" + "---:|" * (len(names) + 2) + "---|",
    ]
    for key, label, goal, with_bean in rows:
        medians = [statistics.median(results[name][key]) for name in names]
        cells = " | ".join(f"{m:.2f} s" for m in medians)
        peer = f"{bean:.2f} s" if with_bean else "-"
        ratio = f"{medians[0] / bean:.2f}x" if with_bean else "-"
        lines.append(f"| {label} | {cells} | {peer} | {ratio} | {goal} |")
    lines.append("")
    lines.append("Runs (seconds, in round order):")
    for name in names:
        for key, _, _, _ in rows:
            values = ", ".join(f"{v:.2f}" for v in results[name][key])
            lines.append(f"- {name} {key}: {values}")
    lines.append(f"- beanstalkd restart: {', '.join(f'{v:.2f}' for v in found['beanstalkd'])}")
    lines.append("")
    lines.append("What each start after a SIGKILL replayed:")
    for name in names:
        for key in ("crash", "crash_start"):
            lines.append(f"- {name} {key}: {'; '.join(tails[name][key])}")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    found.add_argument("--pending", type=int, default=500_000)
    found.add_argument("--rounds", type=int, default=3)
    found.add_argument("--before", type=Path, help="the tree to compare with")
    return found


def main(argv: list[str] | None = None) -> str:
    args = parser().parse_args(argv)
    trees = [Tree("after", ROOT)]
    if args.before is not None:
        before = args.before.resolve()
        trees.insert(0, Tree("before", before.parent if before.name == "src" else before))
    for tree in trees:
        compileall.compile_dir(str(tree.root / "src"), quiet=1)
    base = Path("/var/tmp") if Path("/var/tmp").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="jobq-bench-restart-", dir=base) as name:
        found = bench(trees, Path(name), args.pending, args.rounds)
    text = table(found, trees, args.pending)
    print(text)
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / "restart.md").write_text(text + "\n")
    return text


if __name__ == "__main__":
    main()
