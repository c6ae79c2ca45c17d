"""The tokens a server accepts and whom each names: the single ``--auth-token`` (or the token
in ``--auth-token-file``), an admin named ``admin``, and the named tokens of ``--auth-file``,
reloaded on SIGHUP.

A tokens file is TOML (or JSON when its name ends in ``.json``)::

    [tokens]
    alice = { token = "a-long-random-secret", role = "admin" }
    ci    = { token_sha256 = "<hex SHA-256 of the token>", role = "worker" }
    grafana = { token = "another-secret", role = "viewer" }

Roles are :class:`jobq.server.access.Role`'s. A token is looked up by its SHA-256 digest, so
a file may hold digests instead of secrets, and a lookup's time does not depend on how much
of a token matched. A file that does not parse is refused with its file and line
(:class:`TokenFileError`); no message ever holds a token.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import stat
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jobq.auth import encode_token
from jobq.config import BOTH_TOKEN_SOURCES, ConfigError
from jobq.server.access import ROLES, Principal, Role

logger = logging.getLogger("jobq.server")

#: the name of the single ``--auth-token``
ADMIN_NAME = "admin"
#: what a token's name may be: it is the actor in histories and the audit trail
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:+-]{0,63}")
_HEX_DIGEST_RE = re.compile(r"[0-9a-fA-F]{64}")
_TOML_LINE_RE = re.compile(r"\(at line (\d+), column \d+\)")


class TokenFileError(ConfigError):
    """A token file that cannot be used; the message is ``FILE:LINE: why`` (no token)."""


def digest(token: bytes) -> bytes:
    """What a token is looked up by."""
    return hashlib.sha256(token).digest()


def read_token_file(path: str | os.PathLike[str]) -> str:
    """The token in a file of one token (a trailing newline and spaces around it are not
    part of it); :class:`TokenFileError` if it cannot be read or is not a token."""
    try:
        text = Path(path).read_text("ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not ASCII text"
        raise TokenFileError(f"{path}: {reason}") from None
    try:
        encode_token(text)
    except ValueError as exc:
        raise TokenFileError(f"{path}:1: {exc}") from None
    if not text:
        raise TokenFileError(f"{path}:1: the file holds no token")
    return text


def _line_of(text: str, name: str, key: str | None = None) -> int:
    """The line where ``name``'s entry (its ``key`` if given) stands, best effort: TOML and
    JSON parsers say where a syntax error is, not where a value is."""
    lines = text.splitlines()
    word = re.compile(r"(?<![\w@:+-])" + re.escape(name) + r"(?![\w.@:+-])")
    start = next((i for i, line in enumerate(lines) if word.search(line)), None)
    if start is None:
        return 1
    if key is not None:
        key_re = re.compile(r"(?<![\w])" + re.escape(key) + r"(?![\w])")
        for i in range(start, min(len(lines), start + 20)):
            if key_re.search(lines[i]):
                return i + 1
    return start + 1


def _parse(path: Path, text: str) -> Any:
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise TokenFileError(f"{path}:{exc.lineno}: {exc.msg}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = _TOML_LINE_RE.search(message)
        line = match.group(1) if match else "1"
        raise TokenFileError(f"{path}:{line}: {_TOML_LINE_RE.sub('', message).strip()}") from None


def load_auth_file(path: str | os.PathLike[str]) -> dict[bytes, Principal]:
    """The named tokens of a tokens file: digest -> principal."""
    where = Path(path)
    try:
        raw = where.read_bytes()
    except OSError as exc:
        raise TokenFileError(f"{where}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise TokenFileError(f"{where}:{line}: not UTF-8 text") from None
    data = _parse(where, text)

    def refuse(name: str | None, why: str, key: str | None = None) -> TokenFileError:
        line = _line_of(text, name, key) if name else 1
        return TokenFileError(f"{where}:{line}: {why}")

    if not isinstance(data, dict) or set(data) - {"tokens"}:
        extra = sorted(set(data) - {"tokens"}) if isinstance(data, dict) else []
        raise refuse(extra[0] if extra else None,
                     "expected one table, tokens, of NAME = {token, role}")
    entries = data.get("tokens", {})
    if not isinstance(entries, dict):
        raise refuse("tokens", "tokens must be a table of NAME = {token, role}")
    out: dict[bytes, Principal] = {}
    names: dict[bytes, str] = {}
    for name, entry in entries.items():
        if not isinstance(name, str) or NAME_RE.fullmatch(name) is None:
            raise refuse(str(name), f"invalid name {str(name)[:64]!r}: 1-64 letters, digits "
                         "and ._@:+- , starting with a letter or digit")
        if not isinstance(entry, dict):
            raise refuse(name, f"tokens.{name}: expected {{token = ..., role = ...}}")
        unknown = sorted(set(entry) - {"token", "token_sha256", "role"})
        if unknown:
            raise refuse(name, f"tokens.{name}: unknown key {unknown[0]!r}", unknown[0])
        role_text = entry.get("role")
        role = ROLES.get(role_text) if isinstance(role_text, str) else None
        if role is None:
            raise refuse(name, f"tokens.{name}: role must be admin, worker or viewer", "role")
        key = _entry_digest(entry, name, refuse)
        if key in names:
            raise refuse(name, f"tokens.{name}: the same token as tokens.{names[key]}")
        names[key] = name
        out[key] = Principal(name, role)
    return out


def _entry_digest(entry: dict[str, Any], name: str, refuse: Any) -> bytes:
    token, hashed = entry.get("token"), entry.get("token_sha256")
    if (token is None) == (hashed is None):
        raise refuse(name, f"tokens.{name}: give token or token_sha256 (one of them)")
    if token is not None:
        try:
            encoded = encode_token(token) if isinstance(token, str) else None
        except ValueError as exc:
            raise refuse(name, f"tokens.{name}: {exc}", "token") from None
        if encoded is None:
            raise refuse(name, f"tokens.{name}: the token must be a non-empty string", "token")
        return digest(encoded)
    if not isinstance(hashed, str) or _HEX_DIGEST_RE.fullmatch(hashed) is None:
        raise refuse(name, f"tokens.{name}: token_sha256 must be 64 hex digits", "token_sha256")
    return bytes.fromhex(hashed)


def _warn_if_readable(path: Path) -> None:
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if mode & (stat.S_IRGRP | stat.S_IROTH | stat.S_IWGRP | stat.S_IWOTH):
        logger.warning("%s can be read or written by other users (chmod 600 it)", path)


class Access:
    """The tokens one server accepts, shared by its TCP and HTTP front ends.

    Parameters:
        token (str | None): the single ``--auth-token``: an admin named ``admin``.
        token_file (Path | None): a file holding that token instead (``--auth-token-file``).
        auth_file (Path | None): a tokens file (``--auth-file``).

    :meth:`reload` reads the files again (SIGHUP); a file that no longer parses leaves the
    tokens as they were.
    """

    def __init__(
        self,
        *,
        token: str | None = None,
        token_file: str | os.PathLike[str] | None = None,
        auth_file: str | os.PathLike[str] | None = None,
    ) -> None:
        if token and token_file is not None:
            raise TokenFileError(BOTH_TOKEN_SOURCES)
        self.token = token
        self.token_file = Path(token_file) if token_file is not None else None
        self.auth_file = Path(auth_file) if auth_file is not None else None
        #: tokens this process made for its own clients (``jobq up``'s worker); kept on reload
        self._internal: dict[bytes, Principal] = {}
        #: called after a reload that changed the tokens (the TCP gate re-checks its
        #: authenticated connections)
        self.on_change: list[Callable[[], None]] = []
        self._by_digest = self._read()
        for path in (self.token_file, self.auth_file):
            if path is not None:
                _warn_if_readable(path)

    @staticmethod
    def configured(
        token: str | None,
        token_file: str | os.PathLike[str] | None,
        auth_file: str | os.PathLike[str] | None,
    ) -> bool:
        """Whether these settings turn authentication on."""
        return bool(token) or token_file is not None or auth_file is not None

    def _read(self) -> dict[bytes, Principal]:
        tokens: dict[bytes, Principal] = {}
        single = self.token
        if self.token_file is not None:
            single = read_token_file(self.token_file)
        if single:
            encoded = encode_token(single)
            assert encoded is not None
            tokens[digest(encoded)] = Principal(ADMIN_NAME, Role.ADMIN)
        if self.auth_file is not None:
            tokens.update(load_auth_file(self.auth_file))
        return tokens

    def principal(self, token: bytes) -> Principal | None:
        """Whom ``token`` names, or None (a wrong or revoked token)."""
        return self.by_digest(digest(token))

    def by_digest(self, key: bytes) -> Principal | None:
        return self._by_digest.get(key) or self._internal.get(key)

    def __len__(self) -> int:
        return len(self._by_digest) + len(self._internal)

    def reload(self) -> bool:
        """Read the files again; whether the tokens changed. A file that no longer parses
        is logged (one line: file and line) and the tokens stay as they were."""
        if self.token_file is None and self.auth_file is None:
            return False
        try:
            tokens = self._read()
        except TokenFileError as exc:
            logger.error("tokens not reloaded, the old ones stay: %s", exc)
            return False
        changed = tokens != self._by_digest
        self._by_digest = tokens
        logger.info("tokens reloaded: %d%s", len(tokens), "" if changed else " (unchanged)")
        if changed:
            for call in self.on_change:
                call()
        return changed

    def issue(self, name: str, role: Role) -> str:
        """A new random token for ``name`` with ``role``, known to this process only (for
        its own clients; it survives reloads, never a restart)."""
        token = secrets.token_urlsafe(32)
        self._internal[digest(token.encode("ascii"))] = Principal(name, role)
        return token
