"""Every shell example in README.md and docs/ is run: a doc that lies is a bug.

Each example (``examples.py``) has its check in :data:`CHECKS`, and a doc's example with no
check fails :func:`test_every_example_has_a_check`. Most run here as written, against a real
server: `jobq` commands, `curl`, shell completion. A few are adapted as little as a test
needs: an address that is not loopback or a fixed port becomes a free loopback port, a
system directory a temporary one, a long run a short one (the fault suite with one round).
The rest run for many minutes and run elsewhere: ``make test`` itself is CI's command,
``make run`` and the demo's Spark export run in ``tests/cli/test_up.py``, the soak's short
form in ``tests/load/test_soak_short.py``; for ``make fault``, ``make fuzz``, ``make soak``
and the end-to-end benchmark this checks what the command runs (make's recipe, the
benchmark's own argument parser), so that a renamed target or option fails here.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from jobq.client import Client
from tests.docs.examples import ROOT, Example, examples
from tests.harness import TOKEN, RunningServer
from tests.ports import free_port
from tests.tls import CertFiles, make_certificate

VENV_BIN = Path(sys.prefix) / "bin"


@dataclass
class World:
    """Where examples run: a directory whose ``.venv`` is this test run's environment, and
    a server with HTTP holding a job, a paused job, a running job and a schedule."""

    workdir: Path
    server: RunningServer
    #: the id of a pending job beginning with 3f2a (docs/http.md pauses ``3f2a``)
    prefixed_id: str
    #: a server with a token and TLS, its certificate and a file holding its token, made
    #: by the first example that needs them (:meth:`secure`)
    secured: tuple[RunningServer, CertFiles, Path] | None = field(default=None)
    #: a succeeded job whose id begins with 7c41 (docs/jobs.md and http.md rerun ``7c41``),
    #: made by the first example that needs it (:meth:`finished_job`)
    finished: str | None = field(default=None)

    def finished_job(self) -> str:
        if self.finished is None:
            job_id = f"7c41{uuid.uuid4().hex[4:8]}-0000-4000-8000-000000000002"
            with self.server.client() as client:
                client.submit("reports.daily", b"{}", id=job_id, description="to rerun")
                client.complete(job_id, b"done")
            self.finished = job_id
        return self.finished

    def secure(self) -> tuple[RunningServer, CertFiles, Path]:
        if self.secured is None:
            certificate = make_certificate(self.workdir)
            token_file = self.workdir / "token"
            token_file.write_text(TOKEN + "\n")
            server = RunningServer(auth_token=TOKEN, tls_cert=certificate.cert,
                                   tls_key=certificate.key)
            self.secured = (server, certificate, token_file)
        return self.secured

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "JOBQ_SERVER": self.server.tcp_address,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }

    @property
    def http_address(self) -> str:
        return self.server.http_url.removeprefix("http://").rstrip("/")

    def run(self, text: str, timeout_s: float = 120, env: dict[str, str] | None = None) -> str:
        """Run ``text`` with bash (``env`` added to :attr:`env`); its output (exit status 0
        asserted)."""
        done = subprocess.run(
            ["bash", "-c", text], cwd=self.workdir, env={**self.env, **(env or {})},
            capture_output=True, text=True, timeout=timeout_s,
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"{text!r} exited with {done.returncode}:\n{output}"
        return output


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    workdir = tmp_path_factory.mktemp("docs")
    (workdir / ".venv").symlink_to(Path(sys.prefix))
    server = RunningServer(workdir / "server", with_http=True)
    prefixed = f"3f2a{uuid.uuid4().hex[4:8]}-0000-4000-8000-000000000001"
    with server.client() as client:
        client.submit("reports.daily", b"{}", id=prefixed)
        client.submit("reports.daily", b"{}")
        client.submit("thumbnails", b"{}")
        client.xlease("thumbnails", worker_id="docs", wait_timeout_ms=1000)
        client.create_schedule("nightly-report", cron="0 3 * * *", args={"name": "reports"})
    world = World(workdir, server, prefixed)
    yield world
    server.stop()
    if world.secured is not None:
        world.secured[0].stop()


# ---------------------------------------------------------------------------------------
# The checks
# ---------------------------------------------------------------------------------------

Check = Callable[[Example, World], None]


def runs(ex: Example, world: World) -> None:
    """Runs as written and says something."""
    assert world.run(ex.text).strip()


def runs_until_interrupted(ex: Example, world: World) -> None:
    """A command that runs until Ctrl-C (``jobs watch``): it draws, then Ctrl-C ends it with
    status 0."""
    proc = subprocess.Popen(
        ["bash", "-c", f"exec {ex.text}"], cwd=world.workdir, env=world.env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        # as from a terminal: a test run in the background of a script inherits SIGINT
        # ignored (POSIX), and Python then leaves Ctrl-C ignored too
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout is not None
    first = proc.stdout.read1(65536)  # type: ignore[attr-defined]
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=30)
    assert first.strip(), "it drew nothing"
    assert proc.returncode == 0, (first + rest).decode(errors="replace")


def schedule_shown(ex: Example, world: World) -> None:
    """``schedules show --next 3`` says the spec in words and three next runs; ``schedules
    runs`` lists the schedule's runs (a trigger's, made here), newest first."""
    if " runs " in f" {ex.text} ":
        with Client.from_address(world.server.tcp_address) as client:
            job_id = client.trigger_schedule("nightly-report")
        output = world.run(ex.text)
        assert output.splitlines()[0].split()[:3] == ["ID", "NAME", "STATUS"]
        assert job_id in output and "trigger" in output
        return
    output = world.run(ex.text)
    assert "at 03:00 every day, UTC" in output
    next_runs = output.split("next runs:\n")[1].split("changes:")[0].splitlines()
    assert len(next_runs) == 3 and all(r.endswith(":00 UTC") for r in next_runs), output


def curl(ex: Example, world: World) -> None:
    """Against the server's HTTP address for ``localhost:8080``: a JSON answer, no error."""
    output = world.run(ex.text.replace("localhost:8080", world.http_address))
    assert '"error"' not in output, output
    if "3f2a/pause" in ex.text:
        with Client.from_address(world.server.tcp_address) as client:
            job = client.job(world.prefixed_id)
        assert (job["status"], job["reason"]) == ("paused", "disk full")


def lists_workers(ex: Example, world: World) -> None:
    """``jobq workers list`` and ``GET /api/workers`` (``localhost:8080``: the server's HTTP
    address) name a worker the server's list holds."""
    with Client.from_address(world.server.tcp_address) as client:
        client.whello("docs-worker", ["reports.daily"], heartbeat_ms=3_600_000)
    output = world.run(ex.text.replace("localhost:8080", world.http_address))
    assert "docs-worker" in output and "reports.daily" in output, output


def reruns(ex: Example, world: World) -> None:
    """A rerun of the finished job ``7c41...``: a new job names it (``rerun_of``), and it
    lists the new job; the CLI prints the new id, the API answers with it."""
    original = world.finished_job()
    output = world.run(ex.text.replace("localhost:8080", world.http_address))
    assert '"error"' not in output, output
    new_id = json.loads(output)["id"] if output.lstrip().startswith("{") else output.strip()
    with Client.from_address(world.server.tcp_address) as client:
        assert client.job(new_id)["rerun_of"] == original
        assert new_id in client.job(original)["reruns"]


def submits_with_backoff(ex: Example, world: World) -> None:
    """The job (its id printed, or answered as JSON) has the backoff the example asks for."""
    output = world.run(ex.text.replace("localhost:8080", world.http_address))
    assert '"error"' not in output, output
    job_id = json.loads(output)["id"] if output.lstrip().startswith("{") else output.strip()
    with Client.from_address(world.server.tcp_address) as client:
        backoff = client.job(job_id)["retry_backoff"]
    assert backoff == {"initial_ms": 10_000, "multiplier": 3.0,
                       "max_ms": 1_800_000 if "30m" in ex.text else 300_000}


def submits_after(ex: Example, world: World) -> None:
    """A job after the job ``3f2a...`` (pending, or paused by another example): it waits for
    it; the API's example runs after any outcome."""
    output = world.run(ex.text.replace("localhost:8080", world.http_address))
    assert '"error"' not in output, output
    job_id = json.loads(output)["id"] if output.lstrip().startswith("{") else output.strip()
    with Client.from_address(world.server.tcp_address) as client:
        job = client.job(job_id)
    assert job["status"] == "pending"
    assert job["after"] == job["waiting_for"] == [world.prefixed_id]
    assert job["after_any"] is ("after_any" in ex.text)


def creates_a_chain(ex: Example, world: World) -> None:
    """A schedule whose runs are a chain, its payload a template: a trigger makes both jobs,
    the later one after the first, the payload rendered for the run's day in Berlin."""
    assert world.run(ex.text).strip()
    with Client.from_address(world.server.tcp_address) as client:
        first = client.trigger_schedule("nightly-import")
        runs = client.schedule_runs("nightly-import").jobs
        payload = client.job(first)["payload"]
    by_name = {run["name"]: run for run in runs}
    assert by_name["reports.daily"]["after"] == [first] == [by_name["imports"]["id"]]
    day = json.loads(base64.b64decode(payload))["path"].split("/")[2]
    assert len(day) == 10 and day[4] == day[7] == "-", payload


def completion(ex: Example, world: World) -> None:
    """bash: the completion is installed; zsh and fish where they are installed, else the
    script the command gives them."""
    shell = next(word for word in ("bash", "zsh", "fish") if f"{word}_source" in ex.text)
    if shell == "bash":
        assert "jobq" in world.run(f"{ex.text}\ncomplete -p jobq")
        return
    if shutil.which(shell) is not None:
        done = subprocess.run([shell, "-c", ex.text], cwd=world.workdir, env=world.env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        return
    script = world.run(f"_JOBQ_COMPLETE={shell}_source jobq")
    assert ("compdef jobq" if shell == "zsh" else "complete --no-files --command jobq") in script


def serves(ex: Example, world: World) -> None:
    """``jobq server`` starts, listens and stops cleanly on SIGTERM; a non-loopback or fixed
    address becomes a free loopback port, a system directory a temporary one."""
    port = free_port()
    data = world.workdir / f"server-{port}"
    words = shlex.split(ex.text, comments=True)
    default = not any(word.lstrip("-") in ("listen",) for word in words)
    text = " ".join(words)
    for old, new in (("0.0.0.0:9922", f"127.0.0.1:{port}"), ("127.0.0.1:9922", f"127.0.0.1:{port}"),
                     ("/var/lib/jobq", str(data)), ("/var/lib/workq/cmdlog", str(data / "log"))):
        text = text.replace(old, new)
    cwd = world.workdir / f"cwd-{port}"
    cwd.mkdir()
    if default:  # the documented default address
        port = 9922
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                pytest.fail("something already listens on 127.0.0.1:9922")
    proc = subprocess.Popen(["bash", "-c", f"exec {text}"], cwd=cwd, env=world.env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait_listening(port, proc)
        if default:
            assert (cwd / ".jobq" / "cmdlog").is_dir()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out.decode(errors="replace")


def _wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the server exited"
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listened on {port}")


def with_token_and_tls(ex: Example, world: World) -> None:
    """Against a server with a token and TLS, with a self-signed certificate for 127.0.0.1:
    ``jobs.internal:9922`` becomes that server, ``~/.jobq-token`` a file holding its token,
    ``ca.pem`` its certificate, and the system's CAs (``--tls``) that certificate
    (``SSL_CERT_FILE``)."""
    server, certificate, token_file = world.secure()
    text = (ex.text.replace("jobs.internal:9922", server.tcp_address)
            .replace("~/.jobq-token", str(token_file)).replace("ca.pem", certificate.cert))
    output = world.run(text, env={"SSL_CERT_FILE": certificate.cert})
    assert output.strip()
    if " submit " in text:
        with Client.from_address(server.tcp_address, token=TOKEN,
                                 tls_ca=certificate.cert) as client:
            # the id, then on stderr a warning (no worker serves reports.daily there)
            job_id, warning = output.strip().splitlines()
            assert warning == "jobq: warning: no live worker serves reports.daily"
            assert client.job(job_id)["name"] == "reports.daily"


def serves_tls(ex: Example, world: World) -> None:
    """``jobq server`` with TLS and a plain listener: ``/etc/jobq`` becomes a directory with
    a self-signed certificate, its key and a token; the two addresses free loopback ports.
    A TLS client and a plain one are served; SIGTERM stops it cleanly."""
    etc = world.workdir / "etc-jobq"
    etc.mkdir(exist_ok=True)
    made = make_certificate(etc)
    shutil.copy(made.cert, etc / "cert.pem")
    shutil.copy(made.key, etc / "key.pem")
    (etc / "token").write_text(TOKEN + "\n")
    port, plain = free_port(), free_port()
    text = ex.text
    for old, new in (("0.0.0.0:9922", f"127.0.0.1:{port}"),
                     ("10.0.0.5:9921", f"127.0.0.1:{plain}"), ("/etc/jobq/", f"{etc}/")):
        text = text.replace(old, new)
    cwd = world.workdir / f"cwd-{port}"
    cwd.mkdir()
    proc = subprocess.Popen(["bash", "-c", text], cwd=cwd, env=world.env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        _wait_listening(port, proc)
        _wait_listening(plain, proc)
        with Client("127.0.0.1", port, token=TOKEN, tls_ca=str(etc / "cert.pem")) as client:
            assert client.inspect_server().active_clients >= 1
        with Client("127.0.0.1", plain, token=TOKEN) as client:
            assert client.inspect_server().active_clients >= 1
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out.decode(errors="replace")


def make_recipe(*wanted: str) -> Check:
    """A make target that runs for many minutes: make's recipe for it (``make -n``, with the
    example's variables) runs what the docs say."""

    def check(ex: Example, world: World) -> None:
        words = shlex.split(ex.text, comments=True)
        variables = [w for w in words if "=" in w and w.split("=")[0].isupper()]
        target = words[words.index("make") + 1]
        done = subprocess.run(["make", "-n", "-C", str(ROOT), target, *variables],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        for text in wanted:
            assert text in done.stdout, (text, done.stdout)

    return check


def fault_rounds(ex: Example, world: World) -> None:
    """The fault suite's kill test with the rounds it is given (one, not a thousand)."""
    world.run(ex.text.replace("JOBQ_FAULT_ROUNDS=1000", "JOBQ_FAULT_ROUNDS=1")
              .replace(".venv/bin/python -m pytest", ".venv/bin/python -m pytest -q "
                       f"--rootdir {ROOT} -p no:cacheprovider")
              .replace("tests/fault/", f"{ROOT}/tests/fault/"), timeout_s=600)


def benchmark_arguments(module: str) -> Check:
    """A benchmark that runs for many minutes (``make bench``): its own parser takes the
    example's arguments."""

    def check(ex: Example, world: World) -> None:
        words = shlex.split(ex.text, comments=True)
        arguments = words[words.index(module) + 1 :]
        parser = __import__(module, fromlist=["parser"]).parser()
        parser.exit = _no_exit  # type: ignore[method-assign]
        parser.error = _raise  # type: ignore[method-assign]
        parser.parse_args(arguments)

    return check


def _no_exit(status: int = 0, message: str | None = None) -> None:
    raise AssertionError(f"the parser exited ({status}): {message}")


def _raise(message: str) -> None:
    raise AssertionError(message)


def elsewhere(test: str, *texts: str) -> Check:
    """Run by ``test`` (``path::name``), which names the example (``texts``, for instance
    its command) in its code."""

    def check(ex: Example, world: World) -> None:
        path, name = test.split("::")
        source = (ROOT / path).read_text()
        assert f"def {name}(" in source, f"{test} is gone"
        for text in texts:
            assert text in source, f"{test} does not run {text!r}"

    return check


def worktree(ex: Example, world: World) -> None:
    """``git worktree add`` of an earlier commit, in a clone of this repository (so that
    the repository's own worktree list stays as it is), at a temporary path for ``/tmp/...``."""
    if shutil.which("git") is None:
        pytest.skip("needs git")
    clone = world.workdir / "clone"
    if not clone.exists():
        subprocess.run(["git", "clone", "-q", f"file://{ROOT}", str(clone)], check=True,
                       capture_output=True, timeout=120)
    depth = subprocess.run(["git", "rev-list", "--count", "HEAD"], cwd=clone, check=True,
                           capture_output=True, text=True).stdout.strip()
    if int(depth) <= 10:
        pytest.skip("the history is too short for HEAD~10")
    target = world.workdir / "jobq-before"
    text = ex.text.replace("/tmp/jobq-before", str(target))
    done = subprocess.run(["bash", "-c", text], cwd=clone, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert (target / "src" / "jobq" / "__init__.py").exists()


def ci_runs_it(ex: Example, world: World) -> None:
    """``make test`` is what CI runs (``.ci/run``), and it runs the suite."""
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    make_recipe("pytest", "ruff", "mypy")(ex, world)


def repairs_a_log(ex: Example, world: World) -> None:
    """``jobq log repair`` of a copy of workq's vectors (for ``/var/lib/jobq/cmdlog``) with
    one flipped byte: the dry run names the range and changes nothing; the repair drops
    that record alone and the log then verifies."""
    vectors = Path("/work/shared/vectors/workq-v1/basic")
    if not vectors.is_dir():
        pytest.skip(f"vectors not found at {vectors}")
    log = world.workdir / f"repair-{uuid.uuid4().hex[:8]}"
    shutil.copytree(vectors, log)
    segment = log / "000000002.log"
    segment.chmod(0o644)
    damaged = bytearray(segment.read_bytes())
    damaged[220] ^= 0xFF  # inside the record at offset 217
    segment.write_bytes(bytes(damaged))
    output = world.run(ex.text.replace("/var/lib/jobq/cmdlog", str(log)))
    assert "000000002.log offsets 217-298 (81 bytes): CRC mismatch" in output, output
    if "--dry-run" in ex.text:
        assert "nothing changed" in output and segment.read_bytes() == damaged
        return
    assert "repaired 1 of 3 segments: 81 bytes dropped, 14 records kept" in output, output
    assert "ok: 14 records" in world.run(f"jobq log verify {log}")


#: the worlds whose docs/ha.md walk-through ran (its examples are one scenario)
_HA_WALKED: set[int] = set()


def walks_the_standby(ex: Example, world: World) -> None:
    """docs/ha.md's two servers and what follows, in order, as real processes, once per
    world (each of its examples is a step of it): the fixed ports become free ones, the
    ``/tmp`` directories temporary ones. The standby holds what was submitted to the
    primary, lists it, shows its lag; a submit to it is refused with the primary's address."""
    assert ex.doc == "docs/ha.md"
    if id(world) in _HA_WALKED:
        return
    _HA_WALKED.add(id(world))
    ports = {old: str(free_port()) for old in ("9922", "9923", "8080", "8081")}
    base = world.workdir / "ha"

    adapt = _ha_adapter(ports, {"/tmp/jobq-": f"{base}-"})

    steps = [
        e for e in examples() if e.doc == "docs/ha.md" and CHECKS.get(e.key) is walks_the_standby
    ]
    servers = [e for e in steps if e.key.startswith("jobq server")]
    # the promotion ends the walk: until then the standby is one
    promotions = [e for e in steps if e.key.startswith("jobq promote")]
    steps = [e for e in steps if e not in promotions]
    assert len(servers) == 2
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for step in servers:
            proc = subprocess.Popen(["bash", "-c", f"exec {adapt(step.text)}"],
                                    cwd=world.workdir, env=world.env,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            procs.append(proc)
            words = adapt(step.text).split()
            _wait_listening(int(words[words.index("--listen") + 1].split(":")[1]), proc)
            _wait_listening(int(words[words.index("--http") + 1].split(":")[1]), proc)
        primary, standby = f"127.0.0.1:{ports['9922']}", f"127.0.0.1:{ports['9923']}"
        outputs: dict[str, str] = {}
        for step in steps:
            if step in servers:
                continue
            text = adapt(step.text)
            deadline = time.monotonic() + 10
            while True:  # the standby has the job a moment later
                output = world.run(text)
                if "jobs list" not in text or "reports.daily" in output:
                    break
                assert time.monotonic() < deadline, output
                time.sleep(0.05)
            outputs[step.key] = output
        assert any(
            f"standby of {primary} (streaming)" in out for out in outputs.values()
        ), outputs
        assert any('"role": "standby"' in out for out in outputs.values()), outputs
        # a list that starts with the standby: the submit went to the primary
        followed = next(out for key, out in outputs.items() if f"{standby}," in adapt(key))
        assert followed.strip(), outputs
        refused = subprocess.run(
            ["bash", "-c", f"jobq submit reports.daily --server {standby}"],
            cwd=world.workdir, env=world.env, capture_output=True, text=True, timeout=60,
        )
        assert refused.returncode == 1
        assert f"READONLY {primary}" in refused.stderr, refused.stderr
        assert len(promotions) == 1
        promoted = world.run(adapt(promotions[0].text))
        assert f"{standby} is the primary, epoch 1 (was standby of {primary})" in promoted
        assert world.run(f"jobq submit reports.daily --server {standby}").strip()
    finally:
        _stop_in_turn(procs)


def _ha_adapter(
    ports: dict[str, str], paths: dict[str, str], *, split_pipes: bool = False
) -> Callable[[str], str]:
    """docs/ha.md's command lines made to run here: comments dropped and the words joined
    again (a pipeline's only with ``split_pipes``), then the doc's fixed ports and ``/tmp``
    paths replaced, in that order, by the world's."""

    def adapt(text: str) -> str:
        if split_pipes or "|" not in text:
            text = " ".join(shlex.split(text, comments=True))
        for old, new in {**ports, **paths}.items():
            text = text.replace(old, new)
        return text

    return adapt


def _stop_in_turn(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to each server, newest first; each must stop cleanly (exit 0)."""
    for proc in reversed(procs):
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out.decode(errors="replace")


#: the worlds whose docs/ha.md synchronous pair ran
_SYNC_WALKED: set[int] = set()


def walks_sync_replication(ex: Example, world: World) -> None:
    """docs/ha.md's synchronous pair, once per world: a primary with ``--sync-replicas 1``
    and its standby as real processes; a submit is acknowledged once the standby holds it,
    and ``jobq status`` shows the sync line."""
    if id(world) in _SYNC_WALKED:
        return
    _SYNC_WALKED.add(id(world))
    ports = {old: str(free_port()) for old in ("9932", "9933")}

    adapt = _ha_adapter(ports, {"/tmp/jobq-": f"{world.workdir / 'ha-'}"}, split_pipes=True)

    steps = [
        e for e in examples()
        if e.doc == "docs/ha.md" and CHECKS.get(e.key) is walks_sync_replication
    ]
    servers = [e for e in steps if e.key.startswith("jobq server")]
    assert len(servers) == 2 and "--sync-replicas 1" in servers[0].text
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for step in servers:
            proc = subprocess.Popen(["bash", "-c", f"exec {adapt(step.text)}"],
                                    cwd=world.workdir, env=world.env,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            procs.append(proc)
            words = adapt(step.text).split()
            _wait_listening(int(words[words.index("--listen") + 1].split(":")[1]), proc)
        primary = f"127.0.0.1:{ports['9932']}"
        world.run(f"jobq submit reports.daily --server {primary}", timeout_s=60)
        (status,) = [adapt(e.text) for e in steps if e not in servers]
        output = world.run(status)
        assert "sync 1/1, 0 replies waiting" in output, output
    finally:
        _stop_in_turn(procs)


#: the worlds whose docs/ha.md election walk-through ran
_ELECTION_WALKED: set[int] = set()


def walks_the_election(ex: Example, world: World) -> None:
    """docs/ha.md's etcd and three servers with ``--ha-etcd``, in order, as real processes,
    once per world: the fixed ports become free ones (etcd's peer port too, which the doc
    leaves at its default), the ``/tmp`` directories temporary ones. One server leads; a
    submit to the three addresses reaches it; killed (SIGKILL), another leads, with a
    larger epoch, and the same submit reaches that one."""
    assert ex.doc == "docs/ha.md"
    if id(world) in _ELECTION_WALKED:
        return
    _ELECTION_WALKED.add(id(world))
    olds = ("2379", "9942", "9943", "9944", "8090", "8091", "8092")
    ports = {old: str(free_port()) for old in olds}
    base = world.workdir / "election"

    adapt = _ha_adapter(ports, {"/tmp/jobq-": f"{base}-", "/tmp/etcd": f"{base}-etcd"})

    steps = [
        e for e in examples() if e.doc == "docs/ha.md" and CHECKS.get(e.key) is walks_the_election
    ]
    (etcd,) = [e for e in steps if e.key.startswith("etcd ")]
    servers = [e for e in steps if e.key.startswith("jobq server")]
    submits = [e for e in steps if e.key.startswith("jobq submit")]
    (shows,) = [e for e in steps if e.key.startswith("curl")]
    assert len(servers) == 3 and len(submits) == 2
    peer = f"http://127.0.0.1:{free_port()}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        etcd_command = (f"{adapt(etcd.text)} --listen-peer-urls {peer} "
                        f"--initial-advertise-peer-urls {peer} --initial-cluster default={peer}")
        procs.append(subprocess.Popen(["bash", "-c", f"exec {etcd_command}"],
                                      cwd=world.workdir, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.STDOUT))
        _wait_listening(int(ports["2379"]), procs[0])
        for step in servers:
            proc = subprocess.Popen(["bash", "-c", f"exec {adapt(step.text)}"],
                                    cwd=world.workdir, env=world.env,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            procs.append(proc)
            words = adapt(step.text).split()
            _wait_listening(int(words[words.index("--http") + 1].split(":")[1]), proc)
        world.run(adapt(submits[0].text))
        https = [int(ports[old]) for old in ("8090", "8091", "8092")]

        def election(http_port: int) -> dict[str, object]:
            output = world.run(adapt(shows.text).replace(ports["8090"], str(http_port)))
            return dict(json.loads(output))

        first = [i for i, port in enumerate(https) if election(port)["leading"]]
        assert len(first) == 1
        old_epoch = election(https[first[0]])["epoch"]
        assert isinstance(old_epoch, int)
        killed = procs[1 + first[0]]
        killed.kill()
        killed.wait()
        world.run(adapt(submits[1].text))  # the client waits for the new primary
        now = [i for i, port in enumerate(https) if i != first[0] and election(port)["leading"]]
        assert len(now) == 1
        epoch = election(https[now[0]])["epoch"]
        assert isinstance(epoch, int) and epoch > old_epoch
    finally:
        for proc in reversed(procs[1:]):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                out, _ = proc.communicate(timeout=30)
                assert proc.returncode == 0, out.decode(errors="replace")
        if procs:
            procs[0].kill()
            procs[0].wait()


#: each example's check, by its words (``Example.key``)
CHECKS: dict[str, Check] = {
    "make run": elsewhere("tests/cli/test_up.py::test_make_run_on_a_fresh_clone", '"run"'),
    "make test": ci_runs_it,
    ".venv/bin/jobq jobs list": runs,
    ".venv/bin/jobq jobs watch": runs_until_interrupted,
    ".venv/bin/jobq schedules list": runs,
    "make soak": make_recipe("bench.soak"),
    ".venv/bin/python -m bench.soak --jobs 30000": elsewhere(
        "tests/load/test_soak_short.py::test_every_job_completes_exactly_once_over_200_connections",
        "JOBS = 30_000", "run_soak(",
    ),
    ".venv/bin/python -m bench.bench_e2e": benchmark_arguments("bench.bench_e2e"),
    ".venv/bin/python -m bench.bench_e2e --only beanstalkd": benchmark_arguments("bench.bench_e2e"),
    ".venv/bin/python -m bench.bench_e2e --only jobq --scenarios A": benchmark_arguments(
        "bench.bench_e2e"
    ),
    ".venv/bin/python -m bench.bench_e2e --rounds 5 --jobs 100000 --duration 10": (
        benchmark_arguments("bench.bench_e2e")
    ),
    "git worktree add /tmp/jobq-before HEAD~10": worktree,
    ".venv/bin/python -m bench.bench_restart --before /tmp/jobq-before/src --rounds 3": (
        benchmark_arguments("bench.bench_restart")
    ),
    ".venv/bin/python -m bench.bench_ab --before /tmp/jobq-before/src --rounds 5": (
        benchmark_arguments("bench.bench_ab")
    ),
    ".venv/bin/python -m bench.bench_client --before /tmp/jobq-before/src --rounds 9": (
        benchmark_arguments("bench.bench_client")
    ),
    ".venv/bin/python -m bench.bench_fairness --before /tmp/jobq-before/src --rounds 3": (
        benchmark_arguments("bench.bench_fairness")
    ),
    ".venv/bin/python -m bench.bench_server --memory-rows --tree before=/tmp/jobq-before/src "
    "--tree after=src --rounds 3": benchmark_arguments("bench.bench_server"),
    ".venv/bin/python -m bench.bench_joblist --jobs 1000000 --rounds 9 --before "
    "/tmp/jobq-before/src": benchmark_arguments("bench.bench_joblist"),
    "eval $(_JOBQ_COMPLETE=bash_source jobq)": completion,
    "eval $(_JOBQ_COMPLETE=zsh_source jobq)": completion,
    "_JOBQ_COMPLETE=fish_source jobq | source": completion,
    "make fault": make_recipe("JOBQ_FAULT_LONG=1", "tests/fault"),
    "JOBQ_FAULT_SEED=123 make fault": make_recipe("JOBQ_FAULT_LONG=1", "tests/fault"),
    "JOBQ_FAULT_ROUNDS=1000 .venv/bin/python -m pytest tests/fault/test_kill_mixed.py": (
        fault_rounds
    ),
    "make fuzz": make_recipe("tests.fuzz.atheris_dispatch", "-max_total_time=120"),
    "FUZZ_SECONDS=600 make fuzz": make_recipe("-max_total_time=600"),
    "curl -s localhost:8080/api/jobs?status=running | jq .jobs[] | {name, fraction_completed}": (
        curl
    ),
    'curl -s --json {"name": "reports.daily", "payload_text": "{\\"day\\": \\"2026-11-21\\"}"} '
    "localhost:8080/api/jobs": curl,
    'curl -s --json {"reason": "disk full"} localhost:8080/api/jobs/3f2a/pause': curl,
    "curl -s localhost:8080/api/schedules/nightly-report?next=3 | jq {description, next_runs}": (
        curl
    ),
    "jobq schedules show nightly-report --next 3": schedule_shown,
    "jobq schedules runs nightly-report --limit 20": schedule_shown,
    "jobq workers list": lists_workers,
    "curl -s localhost:8080/api/workers | jq .workers[] | {id, names, running_count}": (
        lists_workers
    ),
    "curl -s localhost:8080/api/jobs?name_prefix=reports.&status=pending | jq .jobs[].id": curl,
    'curl -s --json {"action": "cancel", "selection": {"name": "reports.*"}, "dry_run": true} '
    "localhost:8080/api/jobs/bulk": curl,
    "jobq jobs list --name-prefix reports. --created-after -1d": runs,
    "jobq jobs cancel --name reports.* --dry-run": runs,
    "curl -s localhost:8080/api/jobs/3f2a/logs | jq {attempt, status, text}": curl,
    "jobq jobs logs 3f2a": runs,
    ".venv/bin/python -m bench.bench_logs --rounds 3": benchmark_arguments("bench.bench_logs"),
    ".venv/bin/python -m bench.bench_spark_warm --rounds 5": benchmark_arguments(
        "bench.bench_spark_warm"
    ),
    "jobq server": serves,
    "jobq server --listen 127.0.0.1:9922 --data-dir /tmp/jobq-primary --http 127.0.0.1:8080": (
        walks_the_standby
    ),
    "jobq server --listen 127.0.0.1:9923 --data-dir /tmp/jobq-standby --http 127.0.0.1:8081 "
    "--replica-of 127.0.0.1:9922": walks_the_standby,
    "jobq submit reports.daily --server 127.0.0.1:9922": walks_the_standby,
    "jobq jobs list --server 127.0.0.1:9923": walks_the_standby,
    "jobq status --server 127.0.0.1:9923": walks_the_standby,
    "jobq submit reports.daily --server 127.0.0.1:9923,127.0.0.1:9922": walks_the_standby,
    "JOBQ_SERVER=127.0.0.1:9923,127.0.0.1:9922 jobq jobs list": walks_the_standby,
    "curl -s localhost:8081/api/server | jq .replication": walks_the_standby,
    "jobq promote --server 127.0.0.1:9923": walks_the_standby,
    "etcd --data-dir /tmp/etcd --listen-client-urls http://127.0.0.1:2379 "
    "--advertise-client-urls http://127.0.0.1:2379": walks_the_election,
    "jobq server --listen 127.0.0.1:9942 --data-dir /tmp/jobq-a --http 127.0.0.1:8090 "
    "--ha-etcd http://127.0.0.1:2379": walks_the_election,
    "jobq server --listen 127.0.0.1:9943 --data-dir /tmp/jobq-b --http 127.0.0.1:8091 "
    "--ha-etcd http://127.0.0.1:2379": walks_the_election,
    "jobq server --listen 127.0.0.1:9944 --data-dir /tmp/jobq-c --http 127.0.0.1:8092 "
    "--ha-etcd http://127.0.0.1:2379": walks_the_election,
    "jobq submit reports.daily --server 127.0.0.1:9942,127.0.0.1:9943,127.0.0.1:9944": (
        walks_the_election
    ),
    "curl -s localhost:8090/api/server | jq .replication.election": walks_the_election,
    "jobq server --listen 127.0.0.1:9932 --data-dir /tmp/jobq-sync-primary --sync-replicas 1": (
        walks_sync_replication
    ),
    "jobq server --listen 127.0.0.1:9933 --data-dir /tmp/jobq-sync-standby "
    "--replica-of 127.0.0.1:9932": walks_sync_replication,
    "jobq status --server 127.0.0.1:9932": walks_sync_replication,
    "jobq log repair --dry-run /var/lib/jobq/cmdlog": repairs_a_log,
    "jobq log repair /var/lib/jobq/cmdlog": repairs_a_log,
    "jobq submit reports.daily --retry-backoff 10s,3,30m": submits_with_backoff,
    'curl -s --json {"name": "reports.daily", "retry_backoff": {"initial_ms": 10000, '
    '"multiplier": 3}} localhost:8080/api/jobs': submits_with_backoff,
    "jobq jobs rerun 7c41": reruns,
    "jobq submit reports.daily --after 3f2a": submits_after,
    'curl -s --json {"name": "reports.weekly", "after": ["3f2a"], "after_any": true} '
    "localhost:8080/api/jobs": submits_after,
    "jobq schedules create nightly-import --cron 30 2 * * * --tz Europe/Berlin --job imports "
    '--payload {"path": "/data/{{ ds }}/sales.csv"} --then reports.daily': creates_a_chain,
    'jobq submit spark.sql --payload {"statements": "SELECT 1 AS one", "spark_conf": '
    '{"spark.sql.shuffle.partitions": 8}}': runs,
    'jobq submit spark.pipeline --payload {"spec": "/pipelines/demo", "dry_run": true}': runs,
    ".venv/bin/python -m bench.bench_pipeline --rounds 3": benchmark_arguments(
        "bench.bench_pipeline"
    ),
    "curl -s -X POST localhost:8080/api/jobs/7c41/rerun": reruns,
    "jobq schedules create nightly-export --cron 0 2 * * * --job exports --max-fails 3 "
    "--retry-backoff 1m,2,1h": runs,
    "jobq jobs list --server jobs.internal:9922 --auth-token-file ~/.jobq-token --tls-ca ca.pem": (
        with_token_and_tls
    ),
    "JOBQ_AUTH_TOKEN_FILE=~/.jobq-token jobq submit reports.daily --server jobs.internal:9922 "
    "--tls": with_token_and_tls,
    "JOBQ_AUTH_TOKEN=$(cat /etc/jobq/token) jobq server --listen 0.0.0.0:9922 --tls-cert "
    "/etc/jobq/cert.pem --tls-key /etc/jobq/key.pem --listen-plain 10.0.0.5:9921": serves_tls,
    "jobq server --listen 0.0.0.0:9922 --data-dir /var/lib/jobq --cmdlog-sync always": serves,
    "jobq server -listen 127.0.0.1:9922 -cmdlog-path /var/lib/workq/cmdlog": serves,
    'jobq submit spark.export --payload {"table": "sales", "format": "json",\n  "path": '
    '"$PWD/.jobq/demo/exports/sales"}': elsewhere(
        "tests/cli/test_up.py::test_make_run_on_a_fresh_clone", "export_the_demo_table("
    ),
}


def test_every_example_has_a_check() -> None:
    keys = {ex.key for ex in examples()}
    assert keys - CHECKS.keys() == set(), "examples with no check"
    assert CHECKS.keys() - keys == set(), "checks of examples no doc has any more"


@pytest.mark.parametrize("key", sorted(CHECKS), ids=lambda key: key[:60])
def test_example(key: str, world: World) -> None:
    for ex in (e for e in examples() if e.key == key):
        CHECKS[key](ex, world)

