"""What the election asks of etcd, over its v3 JSON gateway (etcd3gw, synchronous: called
from the elector's threads, never from the server's event loop): leases, a "create if
absent" transaction, reads of a key and of a prefix, puts on a lease.

``EtcdKV`` holds one HTTP client per etcd URL and moves to the next URL when one cannot be
reached, so a cluster of etcd members serves it as long as one of them answers. Every
request has a deadline (``timeout_s``); an etcd that cannot be reached or answers late
raises :class:`EtcdUnavailable`. One ``EtcdKV`` serves one thread (requests' sessions are
not shared between threads): the elector makes one per thread.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from etcd3gw.client import Etcd3Client

# etcd3gw (and requests, urllib3, futurist under it) is imported when an EtcdKV is made,
# not with this module: a server without --ha-etcd would otherwise spend about 0.1 s of its
# start on it


class EtcdUnavailable(Exception):
    """etcd did not answer (no URL reachable, a timeout, or an error reply)."""


@dataclass(frozen=True)
class KeyValue:
    """A key as etcd holds it: its value, the revision that created it (the epoch, for the
    leader key) and the lease it lives on (0: none)."""

    key: str
    value: str
    create_revision: int
    lease_id: int


def parse_endpoints(text: str) -> list[tuple[str, str, int]]:
    """``URL[,URL...]`` (``http://127.0.0.1:2379``; ``host:port`` alone means http) as
    (scheme, host, port) each; :class:`ValueError` says what is wrong."""
    endpoints: list[tuple[str, str, int]] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise ValueError(f"an empty URL in {text!r}")
        url = urlsplit(part if "://" in part else f"http://{part}")
        if url.scheme not in ("http", "https"):
            raise ValueError(f"{part!r} is not an http:// or https:// URL")
        if url.path not in ("", "/") or url.query or url.fragment:
            raise ValueError(f"{part!r}: give etcd's client URL alone (no path)")
        try:
            port = url.port
        except ValueError as exc:
            raise ValueError(f"{part!r}: {exc}") from None
        if not url.hostname or port is None:
            raise ValueError(f"{part!r} needs a host and a port (http://HOST:2379)")
        endpoints.append((url.scheme, url.hostname, port))
    return endpoints


def check_reachable(endpoints: str, timeout_s: float = 2.0) -> None:
    """Raise :class:`EtcdUnavailable` (``cannot reach etcd at URL: why``, one line) unless
    one of the URLs answers."""
    try:
        EtcdKV(endpoints, timeout_s).check()
    except EtcdUnavailable as exc:
        raise EtcdUnavailable(f"cannot reach etcd at {endpoints}: {exc}") from None


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _text(data: str) -> str:
    return base64.b64decode(data).decode()


def _key_value(item: dict[str, Any]) -> KeyValue:
    return KeyValue(
        key=_text(item["key"]),
        value=_text(item.get("value", "")),
        create_revision=int(item.get("create_revision", 0)),
        lease_id=int(item.get("lease", 0)),
    )


def _prefix_end(prefix: str) -> str:
    """The first key after every key that starts with ``prefix`` (etcd's ``range_end``)."""
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return base64.b64encode(bytes(raw)).decode()


class EtcdKV:
    """The requests the elector makes, against the first etcd URL that answers."""

    def __init__(self, endpoints: str, timeout_s: float) -> None:
        from etcd3gw.client import Etcd3Client

        self.endpoints = endpoints
        self._clients: list[Etcd3Client] = [
            Etcd3Client(host=host, port=port, protocol=scheme, timeout=timeout_s, api_path="/v3/")
            for scheme, host, port in parse_endpoints(endpoints)
        ]
        self._current = 0

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        from etcd3gw import exceptions as etcd_exceptions

        errors: list[str] = []
        for _ in range(len(self._clients)):
            client = self._clients[self._current]
            try:
                reply: dict[str, Any] = client.post(client.get_url(path), json=body)
                return reply
            except (etcd_exceptions.ConnectionFailedError,
                    etcd_exceptions.ConnectionTimeoutError) as exc:
                where = f"{client.base_url}: " if len(self._clients) > 1 else ""
                errors.append(where + _reason(exc))
                self._current = (self._current + 1) % len(self._clients)
            except (etcd_exceptions.Etcd3Exception, ValueError) as exc:
                raise EtcdUnavailable(_reason(exc)) from exc
        raise EtcdUnavailable("; ".join(errors))

    def check(self) -> None:
        """Raise :class:`EtcdUnavailable` unless etcd answers (its status)."""
        self._post("/maintenance/status", {})

    def grant(self, ttl_s: int) -> tuple[int, int]:
        """A new lease: its id and the TTL etcd granted (etcd raises one below its minimum)."""
        reply = self._post("/lease/grant", {"TTL": ttl_s, "ID": 0})
        if reply.get("error"):
            raise EtcdUnavailable(f"lease grant refused: {reply['error']}")
        return int(reply["ID"]), int(reply["TTL"])

    def keep_alive(self, lease_id: int) -> int:
        """Renew the lease: the TTL it has again, or 0 if it is gone (expired or revoked)."""
        reply = self._post("/lease/keepalive", {"ID": lease_id})
        result = reply.get("result", {})
        return max(0, int(result.get("TTL", 0)))

    def revoke(self, lease_id: int) -> None:
        """End the lease now (its keys go with it); a lease already gone is no error."""
        try:
            self._post("/kv/lease/revoke", {"ID": lease_id})
        except EtcdUnavailable as exc:
            if "not found" not in str(exc).lower():
                raise

    def put(self, key: str, value: str, lease_id: int) -> None:
        self._post("/kv/put", {"key": _b64(key), "value": _b64(value), "lease": lease_id})

    def create(self, key: str, value: str, lease_id: int) -> tuple[bool, KeyValue | None]:
        """Create ``key`` on the lease if no one holds it, in one transaction: (True, the new
        key) if this call created it, else (False, the key as it is, or None if it went
        meanwhile)."""
        encoded = _b64(key)
        reply = self._post("/kv/txn", {
            "compare": [
                {"key": encoded, "result": "EQUAL", "target": "CREATE", "create_revision": 0}
            ],
            "success": [
                {"request_put": {"key": encoded, "value": _b64(value), "lease": lease_id}}
            ],
            "failure": [{"request_range": {"key": encoded}}],
        })
        if reply.get("succeeded"):
            revision = int(reply["header"]["revision"])
            return True, KeyValue(key, value, revision, lease_id)
        responses = reply.get("responses") or [{}]
        kvs = responses[0].get("response_range", {}).get("kvs") or []
        return False, (_key_value(kvs[0]) if kvs else None)

    def get(self, key: str) -> KeyValue | None:
        reply = self._post("/kv/range", {"key": _b64(key)})
        kvs = reply.get("kvs") or []
        return _key_value(kvs[0]) if kvs else None

    def get_prefix(self, prefix: str) -> list[KeyValue]:
        reply = self._post("/kv/range", {"key": _b64(prefix), "range_end": _prefix_end(prefix)})
        return [_key_value(item) for item in reply.get("kvs") or []]


def _reason(exc: Exception) -> str:
    """What went wrong, in one short line: etcd's own message for an error reply, else the
    gist of requests' (nested) connection error."""
    detail = getattr(exc, "detail_text", None) or ""
    try:
        reply = json.loads(detail)
        detail = str(reply.get("message") or reply.get("error") or detail)
    except (ValueError, AttributeError):
        pass
    text = (detail or str(exc)).strip() or type(exc).__name__
    for gist in ("Connection refused", "Connection reset", "Connection aborted"):
        if gist in text:
            return gist.lower()
    if "timed out" in text.lower():
        return "timed out"
    return text.splitlines()[0][:200]
