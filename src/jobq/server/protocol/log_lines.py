"""The lines of an attempt log (``logappend``, docs/extensions.md): how long one may be, and
how a longer one is cut and marked. The worker cuts its lines before it ships them and the
server cuts again what reaches it, with the same rule."""

from __future__ import annotations

__all__ = ["MAX_LOG_LINE_BYTES", "cut_line"]

#: longest line of an attempt log, in bytes of UTF-8 (a longer one is cut and marked)
MAX_LOG_LINE_BYTES = 64 * 1024
#: a line of at most this many characters is at most MAX_LOG_LINE_BYTES in UTF-8
_SURELY_SHORT_CHARS = MAX_LOG_LINE_BYTES // 4


def cut_line(line: str, more_bytes: int = 0) -> str:
    """``line`` if it fits in :data:`MAX_LOG_LINE_BYTES`, else its head (whole characters)
    followed by ``… [line cut: N bytes dropped]``, the whole within the limit.

    ``more_bytes``: the line went on for that many bytes more, already dropped (a worker
    holds at most :data:`MAX_LOG_LINE_BYTES` characters of an unfinished line); the result
    is the same as for the whole line."""
    if not more_bytes and len(line) <= _SURELY_SHORT_CHARS:
        return line
    data = line.encode("utf-8", "replace")
    total = len(data) + more_bytes
    if total <= MAX_LOG_LINE_BYTES:
        return line
    # the marker's own length depends on the count it shows: give it room for any count
    room = MAX_LOG_LINE_BYTES - len(_marker(total).encode())
    head = data[:room].decode("utf-8", "ignore")
    dropped = total - len(head.encode("utf-8"))
    return head + _marker(dropped)


def _marker(dropped: int) -> str:
    return f" … [line cut: {dropped} bytes dropped]"
