"""jobq's layering, read from src/jobq with ``ast`` (nothing is imported):

- ``jobq.cmdlog`` knows nothing of jobs: it never imports ``jobq.engine``, not even through
  another module or for a type.
- ``jobq.engine`` is pure: all it imports, and all that the jobq modules it imports import,
  is in ``ENGINE_MAY_IMPORT`` (no I/O, threads, asyncio or clock), and it calls none of
  datetime's clock readers (it uses datetime for calendar arithmetic).
- the server, the HTTP frontend, the log, the engine and the client never load pyspark.
- no import cycle among jobq's modules, nor among its parts (its subpackages and top-level
  modules: ``jobq.server``, ``jobq.http``, ``jobq.auth``...).

Where an import stands decides what it counts for:

- Under ``if TYPE_CHECKING:`` it never runs; it lets an annotation name a class of a module
  that imports this one. The cycle and pyspark rules skip it; the cmdlog and engine rules,
  about what a layer knows, count it.
- Inside a function it runs when the function is called. That is how jobq imports FastAPI,
  pyspark and the Spark schemas on demand, and how the modules that assemble a process
  (``server/app.py`` starting the HTTP frontend, the commands) reach up into what they
  assemble. It counts for every rule but the cycle among parts, which is about the order
  in which parts load.
- Importing ``jobq.a.b`` first runs ``jobq/a/__init__.py``. The pyspark and engine rules,
  about what a process loads, follow that edge (the package's imports at module level):
  the engine uses the pure ``jobq.cmdlog.gotime`` and ``varint``, and ``jobq.cmdlog``'s
  ``__init__`` loads the log's modules only when one of its names is used. The others
  follow only the modules a module names.
- Imports by a computed name (``importlib.import_module``) are not seen.

``PLANTS`` plants a violation of each rule and checks that the rule finds it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

#: where an import statement stands
MODULE_LEVEL, IN_FUNCTION, TYPE_CHECKING_ONLY = "module level", "in a function", "TYPE_CHECKING"
RUNS = (MODULE_LEVEL, IN_FUNCTION)
ANYWHERE = (MODULE_LEVEL, IN_FUNCTION, TYPE_CHECKING_ONLY)

#: top-level modules the engine (and the jobq modules it uses) may import: what it imports
#: today, and abc, bisect, dataclasses, functools, math and types; not os, io, pathlib,
#: socket, selectors, asyncio, threading, concurrent, subprocess, time, logging...
ENGINE_MAY_IMPORT = frozenset(
    {
        "__future__", "abc", "bisect", "collections", "copy", "dataclasses", "datetime",
        "enum", "functools", "hashlib", "heapq", "itertools", "math", "operator", "re",
        "struct", "types", "typing",
        "importlib",  # a package's names loaded on first use (jobq.cmdlog's __init__)
        "sys",  # sys.getsizeof, to size tables (compaction.py)
        "zoneinfo",  # reads the time zone database, data as fixed as the code (schedules.py)
        "croniter",  # cron arithmetic from a start the engine gives it (schedules.py)
        "msgspec", "sortedcontainers",
    }
)  # fmt: skip
#: datetime's methods that read the wall clock
CLOCK_READERS = frozenset({"now", "utcnow", "today"})
#: the parts that run without pyspark
NO_PYSPARK = ("jobq.server", "jobq.http", "jobq.cmdlog", "jobq.engine", "jobq.client")


class Import(NamedTuple):
    importer: str
    target: str  # a module's dotted name: a jobq module's, or an outside one as written
    where: str
    line: int


class Module(NamedTuple):
    tree: ast.Module
    imports: list[Import]


def read_sources(src: Path) -> dict[str, tuple[str, bool]]:
    """Every module of ``src/jobq`` by dotted name: its text, and whether it is a package
    (its ``__init__.py``)."""
    sources = {}
    for path in sorted((src / "jobq").rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        sources[name] = (path.read_text(encoding="utf-8"), is_package)
    return sources


def parse_modules(
    sources: dict[str, tuple[str, bool]], known: Collection[str] = ()
) -> dict[str, Module]:
    """The modules of ``sources``, their imports resolved among ``sources`` and ``known``."""
    known = {*sources, *known}
    modules = {}
    for name, (text, is_package) in sources.items():
        tree = ast.parse(text, name)
        package = name if is_package else name.rpartition(".")[0]
        imports = [
            Import(name, target, where, node.lineno)
            for node, where in _import_statements(tree, MODULE_LEVEL)
            for target in _targets(node, package, known)
        ]
        modules[name] = Module(tree, imports)
    return modules


def _import_statements(
    node: ast.AST, where: str
) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node, where
        return
    if isinstance(node, ast.If) and _is_type_checking(node.test):
        for statement in node.body:
            yield from _import_statements(statement, TYPE_CHECKING_ONLY)
        for statement in node.orelse:
            yield from _import_statements(statement, where)
        return
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and where == MODULE_LEVEL:
        where = IN_FUNCTION
    for child in ast.iter_child_nodes(node):
        yield from _import_statements(child, where)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(
    node: ast.Import | ast.ImportFrom, package: str, known: Collection[str]
) -> set[str]:
    """The modules an import statement imports: ``from p import m`` imports the module p.m
    when there is one, else (a name defined in p) the module p."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    if node.level:  # relative: level 1 is the importer's package
        base = package.split(".")[: len(package.split(".")) - node.level + 1]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    return {
        f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source
        for alias in node.names
    }


def part(name: str) -> str:
    """The part of jobq a module belongs to: ``jobq.server.tcp`` -> ``jobq.server``."""
    return ".".join(name.split(".")[:2])


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


# ---------------------------------------------------------------------------------- reach


def reach(
    modules: dict[str, Module],
    starts: Iterable[str],
    kinds: tuple[str, ...],
    *,
    packages_run: bool = False,
) -> dict[str, Import | None]:
    """Every module reached from ``starts`` through imports of ``kinds``, each with the import
    that first reached it (None for a start). With ``packages_run``, a reached module's
    parent packages are reached too, through their imports at module level only."""
    via: dict[str, Import | None] = dict.fromkeys(starts)
    following = dict.fromkeys(via, kinds)  # which of a module's imports are followed
    todo = list(via)
    while todo:
        name = todo.pop()
        module = modules.get(name)
        if module is None:  # outside jobq
            continue
        found = [(imp, kinds) for imp in module.imports if imp.where in following[name]]
        parent = name.rpartition(".")[0]
        if packages_run and parent in modules:
            found.append((Import(name, parent, "its package runs first", 0), (MODULE_LEVEL,)))
        for imp, target_kinds in found:
            via.setdefault(imp.target, imp)
            if len(target_kinds) > len(following.get(imp.target, ())):
                following[imp.target] = target_kinds
                todo.append(imp.target)
    return via


def chain(via: dict[str, Import | None], name: str) -> str:
    """How ``name`` was reached: ``a:12 -> b:30 -> name``."""
    steps = []
    imp = via[name]
    while imp is not None:
        line = f":{imp.line}" if imp.line else ""
        steps.append(f"{imp.importer}{line} ({imp.where})")
        imp = via[imp.importer]
    return " -> ".join([*reversed(steps), name])


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected set of nodes (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            members = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.add(member)
                if member == node:
                    break
            if len(members) > 1 or node in edges.get(node, ()):
                found.append(_cycle_through(node, members, edges))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return found


def _cycle_through(start: str, members: set[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest path from ``start`` back to itself inside ``members``."""
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(edges.get(node, set()) & members):
                if target == start:
                    return [*paths[node], start]
                if target not in paths:
                    paths[target] = [*paths[node], target]
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle through {start}")


# ---------------------------------------------------------------------------------- rules


def cmdlog_imports_of_engine(modules: dict[str, Module]) -> list[str]:
    via = reach(modules, [m for m in modules if within(m, "jobq.cmdlog")], ANYWHERE)
    return [chain(via, name) for name in via if within(name, "jobq.engine")]


#: run by ``jobq/__init__.py`` before any engine code, to choose the compiled or pure-Python
#: modules (it reads the environment and stats files): not the engine's I/O
MODULE_CHOOSER = "jobq.build"


def impure_engine_imports(modules: dict[str, Module]) -> list[str]:
    starts = [m for m in modules if within(m, "jobq.engine")]
    via = reach(modules, starts, ANYWHERE, packages_run=True)
    found = [
        chain(via, name)
        for name in via
        if name not in modules and name.partition(".")[0] not in ENGINE_MAY_IMPORT
    ]
    return [text for text in found if f" {MODULE_CHOOSER}:" not in text]


def engine_clock_reads(modules: dict[str, Module]) -> list[str]:
    via = reach(modules, [m for m in modules if within(m, "jobq.engine")], ANYWHERE)
    return [
        f"{name}:{node.lineno} calls .{node.func.attr}()"
        for name in via
        if name in modules
        for node in ast.walk(modules[name].tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in CLOCK_READERS
    ]


def pyspark_loads(modules: dict[str, Module]) -> list[str]:
    starts = [m for m in modules if any(within(m, p) for p in NO_PYSPARK)]
    via = reach(modules, starts, RUNS, packages_run=True)
    return [chain(via, name) for name in via if within(name, "pyspark")]


def module_cycles(modules: dict[str, Module]) -> list[list[str]]:
    return cycles(_edges(modules, RUNS, lambda name: name))


def part_cycles(modules: dict[str, Module]) -> list[list[str]]:
    return cycles(_edges(modules, (MODULE_LEVEL,), part))


def _edges(
    modules: dict[str, Module], kinds: tuple[str, ...], node: Callable[[str], str]
) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for module in modules.values():
        for imp in module.imports:
            if imp.where in kinds and imp.target in modules:
                source, target = node(imp.importer), node(imp.target)
                if source != target:
                    edges.setdefault(source, set()).add(target)
    return edges


# ---------------------------------------------------------------------------------- tests

SOURCES = read_sources(SRC)
MODULES = parse_modules(SOURCES)


def test_the_whole_source_is_read() -> None:
    assert {"jobq", "jobq.engine", "jobq.cmdlog", "jobq.server", "jobq.auth"} <= set(MODULES)
    assert len(MODULES) > 50
    assert any(imp.where == IN_FUNCTION for m in MODULES.values() for imp in m.imports)


def test_the_command_log_knows_nothing_of_the_engine() -> None:
    found = cmdlog_imports_of_engine(MODULES)
    assert not found, "jobq.cmdlog imports jobq.engine:\n" + "\n".join(found)


def test_the_engine_does_no_io_and_reads_no_clock() -> None:
    found = impure_engine_imports(MODULES) + engine_clock_reads(MODULES)
    assert not found, "the engine imports or calls outside ENGINE_MAY_IMPORT:\n" + "\n".join(found)


def test_the_server_http_log_engine_and_client_never_load_pyspark() -> None:
    found = pyspark_loads(MODULES)
    assert not found, "pyspark is loaded by:\n" + "\n".join(found)


def test_no_import_cycle_among_modules() -> None:
    found = module_cycles(MODULES)
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_no_import_cycle_among_parts() -> None:
    found = part_cycles(MODULES)
    assert not found, "import cycles among parts:\n" + "\n".join(" -> ".join(c) for c in found)


#: one planted violation per rule, as modules added to (or replacing ones of) the source
PLANTS: list[tuple[Callable[[dict[str, Module]], list[Any]], dict[str, str]]] = [
    (cmdlog_imports_of_engine, {"jobq.cmdlog.plant": "def f():\n    from .. import engine\n"}),
    (cmdlog_imports_of_engine, {"jobq.cmdlog.plant": "from jobq.server import history\n"}),
    (impure_engine_imports, {"jobq.engine.plant": "if TYPE_CHECKING:\n    import asyncio\n"}),
    (impure_engine_imports, {"jobq.engine.plant": "from jobq.config import ServerConfig\n"}),
    (engine_clock_reads, {"jobq.engine.plant": "def f():\n    return dt.datetime.now()\n"}),
    (pyspark_loads, {"jobq.server.plant": "def f():\n    from jobq.spark import session\n"}),
    (pyspark_loads, {"jobq.spark": "import pyspark\n"}),  # loaded by server/app.py
    (module_cycles, {"jobq.http.plant": "from . import plant2\n",
                     "jobq.http.plant2": "def f():\n    from jobq.http import plant\n"}),
    (part_cycles, {"jobq.plant": "from jobq.server import history\n",
                   "jobq.cmdlog.plant": "from jobq import plant\n"}),
]  # fmt: skip


@pytest.mark.parametrize(("rule", "plant"), PLANTS)
def test_each_rule_finds_a_planted_violation(
    rule: Callable[[dict[str, Module]], list[Any]], plant: dict[str, str]
) -> None:
    assert rule(MODULES) == []
    planted = {name: (text, SOURCES.get(name, ("", False))[1]) for name, text in plant.items()}
    assert rule({**MODULES, **parse_modules(planted, known=SOURCES)}) != []
