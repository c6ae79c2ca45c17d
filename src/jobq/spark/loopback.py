"""A Spark Connect endpoint over the worker's own SparkContext, on loopback: the Connect
service (the same one ``start-connect-server.sh`` runs) started in the worker's JVM on a
free port, with a token known only to this process. Declarative pipelines are a Spark
Connect API: through it they run with the worker's master, ``--spark-conf`` and catalog,
and two workers on one host do not collide on a fixed port (``docs/spark.md``,
"spark.pipeline").
"""

from __future__ import annotations

import logging
import secrets
import threading
from typing import Any

from jobq.spark.errors import SparkJobError, one_line

__all__ = ["connect_session", "endpoint", "release_soon", "stop_endpoint"]

log = logging.getLogger("jobq.spark")

#: the Connect service's settings, set on the context's configuration before it starts
_HOST = "localhost"
_lock = threading.Lock()
#: id of the SparkContext (application) -> its endpoint's URL (with the token)
_endpoints: dict[str, str] = {}
#: endpoint URL -> its sessions still open (and the timers that will stop them)
_open: dict[str, dict[Any, threading.Timer | None]] = {}
#: how long a session outlives its use (see release_soon)
RELEASE_DELAY_S = 5.0


def _service(jvm: Any) -> Any:
    """The service's Scala object (its ``localPort`` has no static forwarder)."""
    package = jvm.org.apache.spark.sql.connect.service
    return getattr(getattr(package, "SparkConnectService$"), "MODULE$")


def endpoint(spark: Any) -> str:
    """The ``sc://`` URL (token included: never log it) of the Connect endpoint over the
    context of the classic session ``spark``, started on the first call."""
    context = spark.sparkContext
    key = str(context.applicationId)
    with _lock:
        url = _endpoints.get(key)
        if url is not None:
            return url
        jvm = spark._jvm
        service = _service(jvm)
        conf = context._jsc.sc().conf()  # the live configuration the service reads
        token = conf.get("spark.connect.authenticate.token", "") or secrets.token_urlsafe(24)
        try:
            if not conf.contains("spark.connect.grpc.binding.address"):
                conf.set("spark.connect.grpc.binding.address", "127.0.0.1")
            conf.set("spark.connect.grpc.binding.port", "0")  # a free port
            conf.set("spark.connect.authenticate.token", token)
            service.start(context._jsc.sc())
            port = int(service.localPort())
        except Exception as exc:
            raise SparkJobError(
                f"cannot start the worker's Spark Connect endpoint: {one_line(exc)}"
            ) from None
        log.info("Spark Connect endpoint of the worker on 127.0.0.1:%d", port)
        url = f"sc://{_HOST}:{port}/;token={token}"
        _endpoints[key] = url
        return url


def stop_endpoint(spark: Any) -> None:
    """Stop the endpoint over the context of ``spark``, if one was started (before the
    context stops: a Connect service left running would outlive it in the JVM). Its sessions
    still open are stopped first: a client whose server is gone retries for minutes, at its
    ``stop()`` and again at the process's exit."""
    try:
        key = str(spark.sparkContext.applicationId)
    except Exception:
        return
    with _lock:
        url = _endpoints.pop(key, None)
        if url is None:
            return
        sessions = _open.pop(url, {})
    for session, timer in sessions.items():
        if timer is not None:
            timer.cancel()
        _stop_session(session)
    try:
        none = spark._jvm.scala.Option.empty()
        _service(spark._jvm).stop(none, none)
    except Exception:
        log.debug("stopping the Spark Connect endpoint failed", exc_info=True)


def connect_session(url: str) -> Any:
    """A new Spark Connect session (its own server-side session) at ``url``; hand it to
    :func:`release_soon` when done."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    try:
        session = ConnectSession.builder.remote(url).create()
    except Exception as exc:
        raise SparkJobError(f"cannot open a Spark Connect session: {one_line(exc)}") from None
    with _lock:
        _open.setdefault(url, {})[session] = None
    return session


def release_soon(url: str, session: Any) -> None:
    """Stop a session of :func:`connect_session` a moment from now: the client releases a
    run's results in the background, and the server logs an error for each release that
    finds its session already stopped. :func:`stop_endpoint` stops it at once."""

    def stop() -> None:
        with _lock:
            sessions = _open.get(url)
            if sessions is None or sessions.pop(session, False) is False:
                return  # the endpoint's stop took it
        _stop_session(session)

    timer = threading.Timer(RELEASE_DELAY_S, stop)
    timer.daemon = True
    with _lock:
        sessions = _open.get(url)
        if sessions is None or session not in sessions:
            return
        sessions[session] = timer
    timer.start()


def _stop_session(session: Any) -> None:
    try:
        session.stop()
    except Exception:  # best effort: the server may have gone
        log.debug("stopping a Spark Connect session failed", exc_info=True)
