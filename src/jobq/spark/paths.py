"""Roots that the paths of Spark jobs must stay inside: ``..`` and symlinks cannot escape.

A local path (or a ``file:`` URI) is resolved with every symlink followed and must lie under a
root's resolved path. A URI of another scheme (``s3a://``, ``hdfs://``) must start with a root
given as such a URI and may not contain a ``..`` segment. Spark reads a path as a Hadoop glob,
where ``\\..`` and a ``{x/y,..}`` group mean ``..``: neither a ``\\`` nor a ``{...}`` holding
a ``/`` is allowed.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable, Sequence

__all__ = ["PathError", "Roots", "is_hadoop_setting"]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


#: settings (and data source options, which Spark adds to them) of Hadoop and Hive: file
#: systems, their mount tables and credentials, staging directories
HADOOP_PREFIXES = ("fs.", "hadoop.", "dfs.", "hive.", "mapreduce.", "mapred.", "yarn.")


def is_hadoop_setting(key: str) -> bool:
    """True for a Hadoop or Hive setting (``fs.defaultFS``, ``spark.hadoop.fs.s3a.endpoint``):
    one can send a path under a root to another file system or directory."""
    name = key.strip().lower()
    return name.startswith(("spark.hadoop.", *HADOOP_PREFIXES))


class PathError(ValueError):
    """A path outside every root, or that cannot be used; the message is one line."""


def _is_uri(path: str) -> bool:
    return bool(_SCHEME.match(path)) and not path.startswith("file://")


def _local(path: str) -> str:
    if path.startswith("file://"):
        return path[len("file://") :]
    if path.startswith("file:"):
        return path[len("file:") :]
    return path


class Roots:
    """The directories (or URI prefixes) Spark jobs may read and write.

    :param roots: local directories or URI prefixes; relative ones against the current
        directory
    """

    def __init__(self, roots: Iterable[str]) -> None:
        self.local: list[str] = []
        self.uris: list[str] = []
        for root in roots:
            if _is_uri(root):
                self.uris.append(root.rstrip("/") + "/")
            else:
                self.local.append(os.path.realpath(os.path.abspath(_local(root))))
        if not self.local and not self.uris:
            raise ValueError("no roots configured")

    def __repr__(self) -> str:
        return f"Roots({[*self.local, *self.uris]!r})"

    def resolve(self, path: str, what: str = "path") -> str:
        """``path`` resolved (absolute, symlinks followed, or the URI as given); PathError
        if it is outside every root."""
        _check_glob(path, what)
        if _is_uri(path):
            segments = path.split("://", 1)[1].split("/")
            if ".." in segments:
                raise PathError(f"{what}: '..' is not allowed in {path}")
            if not any(path == u.rstrip("/") or path.startswith(u) for u in self.uris):
                raise PathError(f"{what}: {path} is outside the configured roots")
            return path
        local = _local(path)
        if not os.path.isabs(local):
            raise PathError(f"{what}: give an absolute path, not {path}")
        resolved = os.path.realpath(local)
        for root in self.local:
            if resolved == root or resolved.startswith(root.rstrip(os.sep) + os.sep):
                return resolved
        raise PathError(f"{what}: {path} is outside the configured roots")

    def expand(self, patterns: Sequence[str], what: str = "paths") -> list[str]:
        """The files the paths and globs name, resolved and sorted; PathError when one is
        outside the roots, a path does not exist or a glob matches nothing."""
        files: list[str] = []
        for pattern in patterns:
            if _is_uri(pattern):
                files.append(self.resolve(pattern, what))
                continue
            local = _local(pattern)
            if glob.has_magic(local):
                # the fixed part of the glob must already be inside a root
                self.resolve(_fixed_prefix(local), what)
                matches = sorted(m for m in glob.glob(local, recursive=True) if os.path.isfile(m))
                if not matches:
                    raise PathError(f"{what}: no files match {pattern}")
                files.extend(self.resolve(m, what) for m in matches)
            else:
                resolved = self.resolve(local, what)
                if os.path.isdir(resolved):
                    found = sorted(
                        os.path.join(d, f)
                        for d, _, names in os.walk(resolved)
                        for f in names
                        if not f.startswith((".", "_"))
                    )
                    if not found:
                        raise PathError(f"{what}: no files in {pattern}")
                    files.extend(self.resolve(f, what) for f in found)
                elif os.path.isfile(resolved):
                    if not os.access(resolved, os.R_OK):
                        raise PathError(f"{what}: cannot read {pattern}")
                    files.append(resolved)
                else:
                    raise PathError(f"{what}: no such file or directory: {pattern}")
        return list(dict.fromkeys(files))


def _check_glob(path: str, what: str) -> None:
    """PathError for what a Hadoop glob would read as ``..`` and this module as a name."""
    if "\\" in path:
        raise PathError(
            f"{what}: {path}: a '\\' (a glob's escape) is not allowed in a path under the "
            "configured roots"
        )
    depth = 0
    for c in path:
        if c == "{":
            depth += 1
        elif c == "}" and depth:
            depth -= 1
        elif c == "/" and depth:
            raise PathError(
                f"{what}: {path}: a glob's {{...}} may not hold a '/' in a path under the "
                "configured roots"
            )


def _fixed_prefix(pattern: str) -> str:
    parts = pattern.split(os.sep)
    fixed: list[str] = []
    for part in parts:
        if glob.has_magic(part):
            break
        fixed.append(part)
    return os.sep.join(fixed) or os.sep
