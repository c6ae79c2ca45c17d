"""What a parsed Spark plan touches, read from Spark's own logical plan (not from the SQL
text): the paths its nodes carry, the data sources it defines relations with, the settings
it changes and the constructs the sandbox refuses (``docs/spark.md``, "Sandbox").

The plan's shape comes from one py4j call (``TreeNode.toJSON``: every node, expressions and
nested plans too); the exact values of the few nodes that carry paths (a ``LOCATION``, an
``INSERT ... DIRECTORY``, ``OPTIONS (path ...)``, ``LOAD DATA``, ``ADD FILE`` ...), which the
JSON renders lossily, are then read from those nodes over py4j.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from jobq.spark.errors import one_line

__all__ = ["PlanFacts", "UncheckablePlan", "plan_facts"]

#: functions that call any Java method: they reach beyond every check
REFLECT_FUNCTIONS = frozenset({"reflect", "java_method", "try_reflect"})
#: node class -> why the sandbox refuses it
REFUSED = {
    "ScriptTransformation": "TRANSFORM ... USING runs a program on the cluster",
    "UnresolvedExecuteImmediate": "EXECUTE IMMEDIATE runs SQL text that cannot be checked",
    "ExecuteImmediateQuery": "EXECUTE IMMEDIATE runs SQL text that cannot be checked",
    "ExecuteImmediateCommands": "EXECUTE IMMEDIATE runs SQL text that cannot be checked",
    "CreateFunction": "CREATE FUNCTION ... AS 'class' loads Java code",
    "CreateFunctionCommand": "CREATE FUNCTION ... AS 'class' loads Java code",
    "AddJarsCommand": "ADD JAR puts Java code on the worker's class path",
}
#: nodes whose names are tables: a name part that is a path reads or writes files
_IDENTIFIERS = {
    "UnresolvedRelation": "multipartIdentifier",
    "UnresolvedTable": "multipartIdentifier",
    "UnresolvedTableOrView": "multipartIdentifier",
    "UnresolvedView": "multipartIdentifier",
    "UnresolvedIdentifier": "nameParts",
}
_TABLE_SPEC = ("CreateTable", "CreateTableAsSelect", "ReplaceTable", "ReplaceTableAsSelect")
#: nodes that carry paths, data sources or settings: read exactly over py4j
_EXACT = {
    *_TABLE_SPEC,
    "InsertIntoDir",
    "CreateTableLike",
    "CreateTempViewUsing",
    "LoadData",
    "AddFilesCommand",
    "AddArchivesCommand",
    "CreateNamespace",
    "SetNamespaceLocation",
    "SetTableLocation",
    "AddPartitions",
    "RefreshResource",
    "SetTableProperties",
    "SetTableSerDeProperties",
    "SetCommand",
    "ResetCommand",
}
#: parts of the nodes above, read with them
_PARTS = frozenset({"UnresolvedTableSpec", "OptionList", "UnresolvedPartitionSpec"})
#: field names that hold a path in a node this module does not know: refused
_PATH_FIELDS = frozenset(
    {"location", "locationUri", "path", "paths", "storage", "fileFormat", "resources", "uri"}
)
#: option keys that name paths (``OPTIONS (path '...')``)
_PATH_KEYS = ("path", "paths")
#: option keys that name a file Spark reads besides the data (XML's rows' XSD)
_FILE_KEYS = ("rowvalidationxsdpath",)
#: functions that take a source's options (XML's, which name files): function -> the
#: position of its options
_OPTION_FUNCTIONS = {"from_xml": 2, "schema_of_xml": 1}
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
#: ``IDENTIFIER(expr)`` nodes: what they stand for is built from the name only at analysis
#: (node class -> its builder's field, the builder's other argument)
_BY_IDENTIFIER = {
    "PlanWithUnresolvedIdentifier": ("planBuilder", "children"),
    "ExpressionWithUnresolvedIdentifier": ("exprBuilder", "otherExprs"),
}


class UncheckablePlan(Exception):
    """The plan could not be read (a node py4j or the JSON cannot show)."""


@dataclass
class PlanFacts:
    """What one statement's plan touches.

    :ivar paths: (path, what names it), e.g. ``("/x", "LOCATION")``
    :ivar path_tables: (table name, its path) of names that are paths (``csv.`/x` ``)
    :ivar providers: (data source, what uses it) of the relations the statement defines
    :ivar settings: (key, value) the statement sets; value None for ``RESET key``
    :ivar resets_all: a bare ``RESET``
    :ivar refused: why a construct the sandbox refuses is there
    :ivar sql_bodies: (SQL text, is a query) of the SQL functions it defines
    :ivar options: (key, what gives it) of the options and properties it gives
    """

    paths: list[tuple[str, str]] = field(default_factory=list)
    path_tables: list[tuple[str, str]] = field(default_factory=list)
    providers: list[tuple[str, str]] = field(default_factory=list)
    settings: list[tuple[str, str | None]] = field(default_factory=list)
    resets_all: bool = False
    refused: list[str] = field(default_factory=list)
    sql_bodies: list[tuple[str, bool]] = field(default_factory=list)
    options: list[tuple[str, str]] = field(default_factory=list)


class _Node:
    """One node of the JSON plan, and how to reach its JVM object from its parent."""

    __slots__ = ("children", "cls", "fields", "jvm", "nested", "parent", "steps")

    def __init__(self, fields: dict[str, Any], parent: _Node | None, steps: list[Any]) -> None:
        self.cls = str(fields.get("class", "")).rsplit(".", 1)[-1]
        self.fields = fields
        self.parent = parent
        self.steps = steps  # ("child", i) | ("field", name) | ("item", i), from the parent
        self.children: list[_Node] = []
        self.nested: list[_Node] = []
        self.jvm: Any = None


def _tree(items: list[Any], parent: _Node | None, steps: list[Any]) -> _Node:
    """The nodes of one JSON tree (its nodes in pre-order, with their numbers of children)."""
    position = 0

    def build(parent: _Node | None, steps: list[Any]) -> _Node:
        nonlocal position
        if position >= len(items) or not isinstance(items[position], dict):
            raise UncheckablePlan("the plan's JSON has an unexpected shape")
        node = _Node(items[position], parent, steps)
        position += 1
        for index in range(int(node.fields.get("num-children", 0))):
            node.children.append(build(node, [("child", index)]))
        for key, value in node.fields.items():
            if key not in ("class", "num-children"):
                node.nested.extend(_nested(value, node, [("field", key)]))
        return node

    return build(parent, steps)


def _nested(value: Any, parent: _Node, steps: list[Any]) -> list[_Node]:
    """The trees inside a field's JSON value (expressions, subquery plans, CTEs)."""
    if isinstance(value, list):
        if value and isinstance(value[0], dict) and "class" in value[0]:
            return [_tree(value, parent, steps)]
        found: list[_Node] = []
        for index, item in enumerate(value):
            found.extend(_nested(item, parent, [*steps, ("item", index)]))
        return found
    if isinstance(value, dict) and "product-class" in value:
        found = []
        for key, item in value.items():
            if key != "product-class":
                found.extend(_nested(item, parent, [*steps, ("field", key)]))
        return found
    return []


def _walk(node: _Node) -> list[_Node]:
    out: list[_Node] = []
    stack = [node]
    while stack:
        current = stack.pop()
        out.append(current)
        stack.extend(reversed(current.nested))
        stack.extend(reversed(current.children))
    return out


# -- py4j -----------------------------------------------------------------------------------


def _unwrap(value: Any) -> Any:
    scalar = value is None or isinstance(value, str | int | float | bool)
    if not scalar and value.getClass().getName() == "scala.Some":
        return value.get()
    return value


def _jvm_of(node: _Node) -> Any:
    """The JVM object of ``node``, reached from its parent's."""
    if node.jvm is None:
        if node.parent is None:
            raise UncheckablePlan("a plan node cannot be reached")
        value = _jvm_of(node.parent)
        for kind, arg in node.steps:
            value = _unwrap(value)
            if kind == "child":
                value = value.children().apply(arg)
            elif kind == "field":
                value = getattr(value, arg)()
            else:
                value = value.apply(arg)
        node.jvm = _unwrap(value)
    return node.jvm


def _option(value: Any) -> Any:
    return value.get() if value.isDefined() else None


def _seq(value: Any) -> list[Any]:
    return [value.apply(i) for i in range(value.length())]


def _map(value: Any) -> list[tuple[str, str]]:
    pairs = _seq(value.toSeq())
    return [(str(p._1()), str(p._2())) for p in pairs]


def _option_paths(pairs: list[tuple[str, str]], what: str) -> list[tuple[str, str]]:
    """The paths in options or properties (``path``; ``paths`` as a JSON list)."""
    found: list[tuple[str, str]] = []
    for key, value in pairs:
        if key.lower() == "path":
            found.append((value, f"{what} option path"))
        elif key.lower() in _FILE_KEYS:
            found.append((value, f"{what} option {key}"))
        elif key.lower() == "paths":
            try:
                listed = json.loads(value)
            except ValueError:
                listed = [value]
            items = listed if isinstance(listed, list) else [listed]
            found.extend((str(item), f"{what} option paths") for item in items)
    return found


def _add_options(facts: PlanFacts, pairs: list[tuple[str, str]], what: str) -> None:
    """The paths and keys of options or properties."""
    facts.paths.extend(_option_paths(pairs, what))
    facts.options.extend((key, f"{what} option") for key, _ in pairs)


def _literal(expression: Any) -> str:
    if expression.getClass().getSimpleName() != "Literal":
        raise UncheckablePlan("an option's value is not a literal")
    return str(expression.value())


def _exact(node: _Node, facts: PlanFacts) -> None:
    """Read the paths, sources and settings of ``node`` from its JVM object."""
    j = _jvm_of(node)
    cls = node.cls
    if cls in _TABLE_SPEC:
        spec = j.tableSpec()
        what = "CREATE TABLE" if cls.startswith("Create") else "REPLACE TABLE"
        location = _option(spec.location())
        if location is not None:
            facts.paths.append((str(location), f"LOCATION of {what}"))
        provider = _option(spec.provider())
        if provider is not None:
            facts.providers.append((str(provider), what))
        _add_options(facts, _map(spec.properties()), what)
        options = [(str(t._1()), _literal(t._2())) for t in _seq(spec.optionExpression().options())]
        _add_options(facts, options, what)
        serde = _option(spec.serde())
        if serde is not None:
            _add_options(facts, _map(serde.serdeProperties()), f"{what} SERDEPROPERTIES")
    elif cls == "InsertIntoDir":
        storage = j.storage()
        location = _option(storage.locationUri())
        if location is not None:
            facts.paths.append((str(location.toString()), "INSERT ... DIRECTORY"))
        _add_options(facts, _map(storage.properties()), "INSERT ... DIRECTORY")
        provider = _option(j.provider())
        if provider is not None:
            facts.providers.append((str(provider), "INSERT ... DIRECTORY"))
    elif cls == "CreateTableLike":
        location = _option(j.location())
        if location is not None:
            facts.paths.append((str(location), "LOCATION of CREATE TABLE LIKE"))
        provider = _option(j.provider())
        if provider is not None:
            facts.providers.append((str(provider), "CREATE TABLE LIKE"))
        _add_options(facts, _map(j.properties()), "CREATE TABLE LIKE")
    elif cls == "CreateTempViewUsing":
        facts.providers.append((str(j.provider()), "CREATE TEMPORARY VIEW ... USING"))
        _add_options(facts, _map(j.options()), "CREATE TEMPORARY VIEW ... USING")
    elif cls == "LoadData":
        facts.paths.append((str(j.path()), "LOAD DATA"))
    elif cls in ("AddFilesCommand", "AddArchivesCommand"):
        what = "ADD FILE" if cls == "AddFilesCommand" else "ADD ARCHIVE"
        facts.paths.extend((str(p), what) for p in _seq(j.paths()))
    elif cls == "CreateNamespace":
        for key, value in _map(j.properties()):
            if key.lower() == "location":
                facts.paths.append((value, "LOCATION of CREATE DATABASE"))
    elif cls in ("SetNamespaceLocation", "SetTableLocation"):
        facts.paths.append((str(j.location()), "SET LOCATION"))
    elif cls == "AddPartitions":
        for spec in _seq(j.parts()):
            location = _option(spec.location()) if hasattr(spec, "location") else None
            if location is not None:
                facts.paths.append((str(location), "LOCATION of ADD PARTITION"))
    elif cls == "RefreshResource":
        facts.paths.append((str(j.path()), "REFRESH"))
    elif cls == "SetTableProperties":
        _add_options(facts, _map(j.properties()), "SET TBLPROPERTIES")
    elif cls == "SetTableSerDeProperties":
        properties = _option(j.serdeProperties())
        if properties is not None:
            _add_options(facts, _map(properties), "SET SERDEPROPERTIES")
    elif cls == "SetCommand":
        kv = _option(j.kv())
        if kv is not None:
            value = _option(kv._2())
            if value is not None:
                facts.settings.append((str(kv._1()), str(value)))
    elif cls == "ResetCommand":
        config = _option(j.config())
        if config is None:
            facts.resets_all = True
        else:
            facts.settings.append((str(config), None))


def _built(node: _Node, parser: Any) -> Any:
    """The plan or expression an ``IDENTIFIER(expr)`` node stands for, built as Spark's
    analyzer builds it from the name (``expr`` evaluated); None when the name is known only
    when the statement runs (a variable, a parameter)."""
    j = _jvm_of(node)
    name = j.identifierExpr()
    if parser is None or not (name.resolved() and name.foldable()):
        return None
    value = name.eval(None)
    if value is None:
        return None
    parts = parser.parseMultipartIdentifier(str(value.toString()))
    builder, others = _BY_IDENTIFIER[node.cls]
    return getattr(j, builder)().apply(parts, getattr(j, others)())


def _identifier_parts(text: Any) -> list[str]:
    """The parts of a name as the JSON renders a Seq of strings (``"[csv, /x]"``)."""
    if not isinstance(text, str) or not (text.startswith("[") and text.endswith("]")):
        return []
    inner = text[1:-1]
    head, sep, rest = inner.partition(", ")
    return [head, rest] if sep else [head]


def _function_options(node: _Node, name: str, facts: PlanFacts) -> None:
    """The paths in the options of a call of an :data:`_OPTION_FUNCTIONS` function: they
    must be ``map('key', 'value', ...)`` of literals."""
    index = _OPTION_FUNCTIONS[name]
    if len(node.children) <= index:
        return
    options = node.children[index]
    parts = _identifier_parts(options.fields.get("nameParts"))
    literal = all(
        c.cls == "Literal" and isinstance(c.fields.get("value"), str) for c in options.children
    )
    values = [str(c.fields.get("value")) for c in options.children]
    if (
        options.cls != "UnresolvedFunction"
        or [p.lower() for p in parts] != ["map"]
        or not literal
        or len(values) % 2
    ):
        facts.refused.append(f"{name}() with options other than map('key', 'value', ...)")
        return
    pairs = list(zip(values[::2], values[1::2], strict=True))
    facts.paths.extend(_option_paths(pairs, f"{name}()"))


def _merge(facts: PlanFacts, more: PlanFacts) -> None:
    facts.paths.extend(more.paths)
    facts.path_tables.extend(more.path_tables)
    facts.providers.extend(more.providers)
    facts.settings.extend(more.settings)
    facts.resets_all = facts.resets_all or more.resets_all
    facts.refused.extend(more.refused)
    facts.sql_bodies.extend(more.sql_bodies)
    facts.options.extend(more.options)


def looks_like_path(part: str) -> bool:
    """A name part that reads as a path or URI (``/x``, ``a/b``, ``file:...``)."""
    return "/" in part or "\\" in part or bool(_SCHEME.match(part))


def plan_facts(plan: Any, parser: Any = None) -> PlanFacts:
    """The facts of a parsed logical plan (a py4j object; ``parser``, the parser that made
    it, builds what ``IDENTIFIER(expr)`` names); :class:`UncheckablePlan` when it cannot be
    read."""
    try:
        items = json.loads(plan.toJSON())
    except Exception as exc:
        raise UncheckablePlan(f"its plan cannot be read ({type(exc).__name__})") from None
    if not isinstance(items, list) or not items:
        raise UncheckablePlan("its plan is empty")
    root = _tree(items, None, [])
    root.jvm = plan
    facts = PlanFacts()
    for node in _walk(root):
        cls = node.cls
        if cls in REFUSED:
            facts.refused.append(REFUSED[cls])
        elif cls == "UnresolvedFunction":
            parts = _identifier_parts(node.fields.get("nameParts"))
            name = (parts[-1] if parts else "").rsplit(", ", 1)[-1].lower()
            if name in REFLECT_FUNCTIONS:
                facts.refused.append(f"{name}() calls Java methods")
            elif name in _OPTION_FUNCTIONS:
                _function_options(node, name, facts)
        elif cls in _IDENTIFIERS:
            parts = _identifier_parts(node.fields.get(_IDENTIFIERS[cls]))
            if len(parts) > 1 and looks_like_path(parts[1]):
                facts.path_tables.append((f"{parts[0]}.`{parts[1]}`", parts[1]))
        elif cls == "CreateUserDefinedFunction":
            language = node.fields.get("language")
            if not (isinstance(language, dict) and language.get("object", "").endswith("SQL$")):
                facts.refused.append("a function in a language other than SQL runs code")
            text = node.fields.get("queryText") or node.fields.get("exprText")
            if isinstance(text, str):
                facts.sql_bodies.append((text, bool(node.fields.get("isTableFunc"))))
        elif cls in _BY_IDENTIFIER:
            try:
                built = _built(node, parser)
            except Exception as exc:
                reason = f"its IDENTIFIER(...) cannot be built ({one_line(exc)})"
                raise UncheckablePlan(reason) from None
            if built is None:
                facts.refused.append(
                    "IDENTIFIER(...) of a value known only when the statement runs"
                )
            else:
                _merge(facts, plan_facts(built, parser))
        elif cls in _EXACT:
            try:
                _exact(node, facts)
            except UncheckablePlan:
                raise
            except Exception as exc:
                raise UncheckablePlan(f"its {cls} node cannot be read ({exc})") from None
        elif cls not in _PARTS and node.fields.keys() & _PATH_FIELDS:
            facts.refused.append(f"{cls} is not checked for paths")
    return facts
