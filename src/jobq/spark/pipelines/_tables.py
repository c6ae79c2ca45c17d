"""What the built-in pipelines share: a table's storage, row checksums, local files."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from dataclasses import dataclass
from typing import Any

from jobq.spark.errors import SparkJobError

__all__ = [
    "TableInfo",
    "atomic_write_json",
    "checksum_of",
    "find_table",
    "local_path",
    "read_json",
    "refresh_table",
    "sha256_file",
    "table_info",
]

log = logging.getLogger(__name__)

#: checksums are sums of 64-bit row hashes, kept modulo this
_MOD = 2**64


@dataclass
class TableInfo:
    """A table's storage: its provider (``parquet``, ``hive`` ...), data location (a URI),
    partition columns and schema."""

    name: str
    provider: str
    location: str | None
    partition_by: list[str]
    schema: Any  # a pyspark StructType

    @property
    def local_location(self) -> str | None:
        """The location as a local path, when it is one."""
        return local_path(self.location) if self.location else None


def local_path(uri: str) -> str | None:
    if uri.startswith("file://"):
        return uri[len("file://") :]
    if uri.startswith("file:"):
        return uri[len("file:") :]
    if uri.startswith("/"):
        return uri
    return None


def table_exists(spark: Any, name: str) -> bool:
    """Whether ``name`` is a table or view (a temporary view too)."""
    found = _catalog_table(spark, name)
    if found is not _UNKNOWN:
        return found is not None
    try:
        return bool(spark.catalog.tableExists(name))
    except Exception:
        return False


def find_table(spark: Any, name: str) -> TableInfo | None:
    """The storage of table ``name``, or None if there is no table or view of that name:
    :func:`table_exists` and :func:`table_info` in one look at the catalog."""
    found = _catalog_table(spark, name)
    if found is None:
        return None
    if found is not _UNKNOWN:
        return _info_of(spark, name, found)
    if not table_exists(spark, name):
        return None
    return _described(spark, name)


def table_info(spark: Any, name: str) -> TableInfo:
    """The storage of table ``name``; SparkJobError if there is no such table."""
    info = find_table(spark, name)
    if info is None:
        raise SparkJobError(f"table not found: {name}")
    return info


def refresh_table(spark: Any, name: str, location: str) -> None:
    """Forget what Spark holds of table ``name`` after its files at ``location`` (a URI)
    changed under it, as Spark's own writes do: every cached plan that reads those files is
    refreshed and cached again (``CacheManager.recacheByPath``, whichever session cached
    it), and this session's entry for the table is dropped; the worker's other sessions
    are each job's own and look the table up afresh. Spark Connect (or a name the session
    catalog does not take): Spark's ``catalog.refreshTable``. ``REFRESH TABLE`` would list
    the table's files again, tens of milliseconds on a warm session, and still leave a
    table another session cached reading files that are gone."""
    jsession = getattr(spark, "_jsparkSession", None)
    if jsession is not None:
        try:
            jsession.sharedState().cacheManager().recacheByPath(jsession, location)
            state = jsession.sessionState()
            state.catalog().refreshTable(state.sqlParser().parseTableIdentifier(name))
            return
        except Exception:  # a name the session catalog does not take: Spark's own way
            log.debug("refreshing %s through the session catalog failed", name, exc_info=True)
    spark.catalog.refreshTable(name)


def _described(spark: Any, name: str) -> TableInfo:
    """A table's storage through ``DESCRIBE TABLE EXTENDED`` (the public, slow way)."""
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {name}").collect()
    details: dict[str, str] = {}
    partition_by: list[str] = []
    section = ""
    for row in rows:
        key = (row[0] or "").strip()
        value = (row[1] or "").strip()
        if key.startswith("#"):
            if key != "# col_name":
                section = key
            continue
        if not key:
            continue
        if section == "# Partition Information":
            partition_by.append(key)
        elif section == "# Detailed Table Information":
            details[key] = value
    provider = details.get("Provider", "").lower()
    if details.get("Type", "").upper() == "VIEW":
        provider = "view"
    return TableInfo(
        name=name,
        provider=provider,
        location=details.get("Location") or None,
        partition_by=partition_by,
        schema=spark.table(name).schema,
    )


#: :func:`_catalog_table`'s answer when only the slow path can tell
_UNKNOWN: Any = object()


def _catalog_table(spark: Any, name: str) -> Any:
    """The session catalog's entry (a JVM ``CatalogTable``) for a table ``name`` of a
    classic session, in a few JVM calls; None if there is no table or view of that name;
    :data:`_UNKNOWN` where only Spark's public API can tell (Spark Connect, a temporary
    view, a view, a name outside the session catalog). ``DESCRIBE TABLE EXTENDED`` and
    ``catalog.tableExists`` each cost tens of milliseconds a call on a warm session."""
    jsession = getattr(spark, "_jsparkSession", None)
    if jsession is None:
        return _UNKNOWN
    try:
        state = jsession.sessionState()
        ident = state.sqlParser().parseTableIdentifier(name)
        catalog = state.catalog()
        if catalog.isTempView(ident):
            return _UNKNOWN
        if not catalog.tableExists(ident):
            return None
        table = catalog.getTableMetadata(ident)
        if table.tableType().name() == "VIEW":
            return _UNKNOWN
        return table
    except Exception:  # a name the parser or session catalog does not take
        return _UNKNOWN


def _info_of(spark: Any, name: str, table: Any) -> TableInfo:
    from pyspark.sql.types import StructType

    jvm = spark._jvm
    location = table.storage().locationUri()
    partitions = table.partitionColumnNames()
    # the schema as a query of the table sees it: CHAR/VARCHAR read as STRING
    schema = jvm.org.apache.spark.sql.catalyst.util.CharVarcharUtils
    schema = schema.replaceCharVarcharWithStringInSchema(table.schema())
    return TableInfo(
        name=name,
        provider=str(table.provider().get()).lower() if table.provider().isDefined() else "",
        location=str(location.get().toString()) if location.isDefined() else None,
        partition_by=[str(partitions.apply(i)) for i in range(partitions.length())],
        schema=StructType.fromJson(json.loads(schema.json())),
    )


def checksum_of(df: Any, columns: list[str] | None = None) -> tuple[int, str]:
    """(rows, checksum) of a DataFrame: the checksum is the sum of the rows' 64-bit hashes
    over ``columns`` (default: all, in order) modulo 2**64, so the order of rows does not
    matter."""
    from pyspark.sql import functions as F

    cols = columns or df.columns
    if not cols:
        return (df.count(), "0")
    row = df.select(
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.xxhash64(*[F.col(f"`{c}`") for c in cols]).cast("decimal(38,0)")).alias("sum"),
    ).collect()[0]
    total = int(row["sum"] or 0) % _MOD
    return (int(row["rows"]), str(total))


def add_checksums(values: list[str]) -> str:
    return str(sum(int(v) for v in values) % _MOD)


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def data_files(directory: str) -> list[str]:
    """The data files under ``directory`` (relative paths, sorted): no hidden files, no
    ``_SUCCESS``, no ``.crc``."""
    found: list[str] = []
    for parent, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
        for name in names:
            if name.startswith(("_", ".")) or name.endswith(".crc"):
                continue
            found.append(os.path.relpath(os.path.join(parent, name), directory))
    return sorted(found)


def atomic_write_json(path: str, value: Any) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: str) -> Any:
    with open(path) as f:
        return json.load(f)


def remove_tree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
