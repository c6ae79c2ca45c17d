"""Accounting for every segment at open: the directory checked against the manifest.

:func:`check_directory` compares the segment files with the manifest (``manifest.py``)
and says what to do, changing nothing: ``CommandLog.open`` acts on it (a missing segment
refuses the start unless a gap is accepted), and ``jobq log verify`` reports it.
:func:`describe_gap` says what a missing segment may have held.
"""

from __future__ import annotations

import logging
import os
from typing import NamedTuple

from jobq.cmdlog.errors import CmdlogError, ManifestMismatchError, MissingSegmentError
from jobq.cmdlog.gotime import format_rfc3339_ns
from jobq.cmdlog.manifest import Loaded, Plan, manifest_path, read_manifest, reconcile
from jobq.cmdlog.record import decode_payloads
from jobq.cmdlog.segment import check_header, read_segment, segment_name

logger = logging.getLogger(__name__)


class Checked(NamedTuple):
    """The manifest as read (None: the directory has none) and how the files compare."""

    loaded: Loaded | None
    plan: Plan | None


def check_directory(
    directory: str, segments: list[tuple[int, str]], *, accept_gap: bool = False
) -> Checked:
    """Read the manifest of ``directory`` and compare it with ``segments`` (those present).

    Raises :class:`~jobq.cmdlog.errors.ManifestError` for a manifest that cannot be read,
    :class:`~jobq.cmdlog.errors.ManifestMismatchError` for a file it cannot explain, and
    :class:`~jobq.cmdlog.errors.MissingSegmentError` for segments it holds that are gone
    (unless ``accept_gap``: then it logs what may be lost). Changes nothing."""
    loaded = read_manifest(directory)
    if loaded is None:
        return Checked(None, None)
    sizes = {}
    for number, name in segments:
        try:
            sizes[number] = os.path.getsize(os.path.join(directory, name))
        except FileNotFoundError:
            pass
    plan = reconcile(loaded.state, segments, sizes)
    if plan.refusal is not None:
        raise ManifestMismatchError(manifest_path(directory), plan.refusal)
    if plan.missing:
        if not accept_gap:
            raise MissingSegmentError(directory, [segment_name(n) for n in plan.missing])
        logger.warning(
            "%s: accepting a gap in the log (--accept-log-gap): %s",
            directory,
            describe_gap(directory, segments, plan.missing),
        )
    return Checked(loaded, plan)


def describe_gap(
    directory: str, segments: list[tuple[int, str]], missing: list[int]
) -> str:
    """What the ``missing`` segments may have held: for each run of them, their names and
    the times of the records around the gap (the last before it, the first after it)."""
    present = [number for number, _ in segments]
    runs: list[list[int]] = []
    for number in missing:
        if runs and runs[-1][-1] == number - 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    parts = []
    for run in runs:
        names = segment_name(run[0]) if len(run) == 1 else (
            f"{segment_name(run[0])} to {segment_name(run[-1])}"
        )
        before = [n for n in present if n < run[0]]
        after = [n for n in present if n > run[-1]]
        since = (
            f"after {_record_time(directory, before[-1], last=True)} (the last record of "
            f"{segment_name(before[-1])})"
            if before
            else "from the log's beginning"
        )
        until = (
            f"before {_record_time(directory, after[0], last=False)} (the first record of "
            f"{segment_name(after[0])})"
            if after
            else "up to the log's end"
        )
        parts.append(f"{names} missing: the records logged {since} and {until} are lost")
    return "; ".join(parts)


def _record_time(directory: str, number: int, *, last: bool) -> str:
    """The time of the first (or last) record of segment ``number``, as RFC 3339 text."""
    path = os.path.join(directory, segment_name(number))
    found: int | None = None
    try:
        data = read_segment(path)
        version = check_header(data, path, newest=True)
        if version is not None:
            for time_ns, _ in decode_payloads(data, path):
                found = time_ns
                if not last:
                    break
    except (OSError, CmdlogError):
        pass
    if found is None:
        return "an unknown time (the segment holds no readable record)"
    return format_rfc3339_ns(found)
