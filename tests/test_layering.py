"""The shape of the package (shared/DESIGN.md), from an AST walk over jarvis/:

- arrows point down: a module imports only from its own layer or below. The layers, lowest
  first; a module belongs to the layer of its longest matching prefix, and a module that
  matches none fails the test, so a new package has to be placed on purpose;
- no import cycle between packages (jarvis.X: a sub-package, or a top-level module such as
  jarvis.sdk) and none between modules;
- no module over MAX_LINES lines;
- serving over MCP is an entry point (beside the HTTP server); the MCP client sits below the SDK.
Every import counts, also those inside functions (a lazy import is still a dependency); the
cycle checks leave out only imports under `if TYPE_CHECKING:`, which never run.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterable
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "jarvis"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("core: records, events, registries, config, errors",
     ("jarvis.errors", "jarvis._lazy", "jarvis._version", "jarvis.core")),
    ("shared rules below every tool: path policy, provenance and egress (trust), isolation, "
     "pooled resources, channels",
     ("jarvis.security", "jarvis.trust", "jarvis.resources", "jarvis.sandbox", "jarvis.channels")),
    ("stores and engines (know no tool): memory, approvals, run log, conversations",
     ("jarvis.memory", "jarvis.engine", "jarvis.runlog", "jarvis.approvals",
      "jarvis.conversations")),
    ("the tool system and its built-in catalog",
     ("jarvis.tools",)),
    ("what uses tools or adds them: agents, scheduler, MCP client, workspace, plugins",
     ("jarvis.agents", "jarvis.scheduler", "jarvis.mcp", "jarvis.workspace", "jarvis.plugins")),
    ("composition: extensions loading, the SDK, the testing kit, OpenEnv environments",
     ("jarvis.extensions", "jarvis.sdk", "jarvis.stream", "jarvis.testing", "jarvis.env")),
    ("entry points: CLI, servers (HTTP and MCP: jarvis.server), inbound listeners, the "
     "package's public API",
     ("jarvis.commands", "jarvis.cli", "jarvis.server", "jarvis.inbound", "jarvis")),
]
# Prefixes may name rooms that do not exist yet (trust, approvals, conversations, inbound,
# env): they are placed before they land.
MAX_LINES = 700

# (importer, imported) arrows allowed to point up for now. Keep this empty. (The last one,
# jarvis.memory.indexer -> jarvis.tools.file_read, went with the path policy of issue 12.)
ALLOWED_UPWARD: set[tuple[str, str]] = set()


def _layer(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), rank)
    return None if best is None else best[1]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, *, type_checking: bool = True) -> list[tuple[str, int]]:
    """(imported jarvis module, line) for every import in `path`, relative ones resolved;
    without `type_checking`, those under `if TYPE_CHECKING:` are left out."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, int]] = []
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    skipped = set() if type_checking else {id(n) for n in _type_checking_only(tree)}
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from jarvis.x import y` may import the submodule jarvis.x.y
            names = [f"{target}.{alias.name}" for alias in node.names]
            found.extend((name if _is_module(name) else target, node.lineno) for name in names)
    return [(name, line) for name, line in found if name == "jarvis" or name.startswith("jarvis.")]


def _type_checking_only(tree: ast.AST) -> Iterable[ast.AST]:
    """The nodes inside `if TYPE_CHECKING:` (or `typing.TYPE_CHECKING`) blocks."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (
                (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
                or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")):
            for child in node.body:
                yield from ast.walk(child)


def _is_module(name: str) -> bool:
    relative = Path(*name.split("."))
    return ((PACKAGE.parent / relative).with_suffix(".py").exists()
            or (PACKAGE.parent / relative / "__init__.py").exists())


def _all_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_module_has_a_layer():
    unplaced = [_module_name(p) for p in _all_modules() if _layer(_module_name(p)) is None]
    assert unplaced == [], f"place these in LAYERS: {unplaced}"


def test_no_import_points_up():
    upward = []
    for path in _all_modules():
        source = _module_name(path)
        for target, line in _imports(path):
            own, theirs = _layer(source), _layer(target)
            if theirs is not None and own is not None and theirs > own:
                if (source, target) not in ALLOWED_UPWARD:
                    upward.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {source} "
                                  f"({LAYERS[own][0].split(':')[0]}) imports {target} "
                                  f"({LAYERS[theirs][0].split(':')[0]})")
    assert upward == [], "upward imports:\n" + "\n".join(upward)


def test_allowed_exceptions_still_exist():
    # An exception that no longer matches a real import must be deleted from the list.
    arrows = {(_module_name(p), target) for p in _all_modules() for target, _ in _imports(p)}
    assert ALLOWED_UPWARD <= arrows, ALLOWED_UPWARD - arrows


@pytest.mark.parametrize("source, target, upward", [
    ("jarvis.core.registry", "jarvis.tools", True),
    ("jarvis.memory.indexer", "jarvis.tools.file_read", True),
    ("jarvis.scheduler.runner", "jarvis.sdk", True),
    ("jarvis.core.config", "jarvis.mcp.naming", True),
    ("jarvis.server.mcp_serve", "jarvis.server.app", False),
    ("jarvis.agents.base", "jarvis.tools.executor", False),
    # issue 28: the MCP client may not reach up to serving, the extensions or the SDK
    ("jarvis.mcp.manager", "jarvis.server.mcp_serve", True),
    ("jarvis.mcp.adapter", "jarvis.extensions", True),
    ("jarvis.mcp.capabilities", "jarvis.sdk", True),
    # the rooms of this round, placed before they land
    ("jarvis.tools.executor", "jarvis.trust.egress", False),
    ("jarvis.trust.egress", "jarvis.tools.executor", True),
    ("jarvis.approvals.store", "jarvis.agents.base", True),
    ("jarvis.conversations", "jarvis.runlog", False),
    ("jarvis.inbound.telegram", "jarvis.sdk", False),
    ("jarvis.sdk", "jarvis.inbound", True),
    ("jarvis.env", "jarvis.tools.executor", False),
    ("jarvis.env", "jarvis.server", True),
])
def test_the_layers_judge_known_arrows(source, target, upward):
    # The arrows issues 16 and 28 named are upward under these layers (so the test would
    # catch them).
    assert (_layer(target) > _layer(source)) is upward


# --- cycles ------------------------------------------------------------------------------------
def _module_graph() -> dict[str, dict[str, str]]:
    """importer -> {imported module: "file:line"}, over every module of jarvis/.

    Imports inside functions count: a lazy import that points back is still a circle (it only
    moves the failure to run time). Imports under `if TYPE_CHECKING:` do not: they never run,
    and a type named in an annotation creates no dependency between the modules."""
    modules = {_module_name(p): p for p in _all_modules()}
    graph: dict[str, dict[str, str]] = {name: {} for name in modules}
    for name, path in modules.items():
        for target, line in _imports(path, type_checking=False):
            while target not in modules and "." in target:  # a name imported from a module
                target = target.rpartition(".")[0]
            if target in modules and target != name:
                graph[name].setdefault(target, f"{path.relative_to(PACKAGE.parent)}:{line}")
    return graph


def _package(module: str) -> str:
    """The room a module is in: jarvis.X (a sub-package, or a top-level module)."""
    return ".".join(module.split(".")[:2])


def _package_graph() -> dict[str, dict[str, str]]:
    graph: dict[str, dict[str, str]] = {}
    for source, targets in _module_graph().items():
        graph.setdefault(_package(source), {})
        for target, where in targets.items():
            if _package(target) != _package(source):
                graph[_package(source)].setdefault(_package(target),
                                                    f"{where} ({source} imports {target})")
    return graph


def _cycles(graph: dict[str, dict[str, str]]) -> list[tuple[list[str], list[str]]]:
    """(one cycle a -> b -> ... -> a, the whole group) for each group of nodes that reach
    each other (Tarjan's strongly connected components, then a shortest way back to the group's
    first node)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:  # recursion depth: the longest import chain, a few dozen
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    cycles = []
    for group in groups:
        start, members = group[0], set(group)
        came_from: dict[str, str] = {}
        frontier = [start]
        while start not in came_from:  # breadth first, back to start, inside the group
            following = []
            for node in frontier:
                for nxt in sorted(graph.get(node, {})):
                    if nxt in members and nxt not in came_from:
                        came_from[nxt] = node
                        following.append(nxt)
            frontier = following
        path = [start]
        while True:
            path.append(came_from[path[-1]])
            if path[-1] == start:
                break
        cycles.append((path[::-1], group))
    return cycles


def _describe(found: tuple[list[str], list[str]], graph: dict[str, dict[str, str]]) -> str:
    cycle, group = found
    knot = "" if len(group) == len(cycle) - 1 else f" (one of the cycles among {', '.join(group)})"
    arrows = "\n".join(f"    {a} -> {b}: {graph[a][b]}" for a, b in itertools.pairwise(cycle))
    return " -> ".join(cycle) + knot + "\n" + arrows


def test_no_import_cycle_between_packages():
    graph = _package_graph()
    cycles = _cycles(graph)
    assert cycles == [], "import cycles between packages (move the shared piece down, or " \
        "move the module that reaches up into the layer it belongs to):\n" + "\n".join(
            _describe(c, graph) for c in cycles)


def test_no_import_cycle_between_modules():
    graph = _module_graph()
    cycles = _cycles(graph)
    assert cycles == [], "import cycles between modules (move the shared piece down into a " \
        "module of its own, or pass the lower one what it needs):\n" + "\n".join(
            _describe(c, graph) for c in cycles)


def test_the_cycle_finder_finds_cycles():
    # On a made-up graph, so the two tests above cannot pass by finding nothing ever.
    graph = {"a": {"b": "x"}, "b": {"c": "x"}, "c": {"a": "x", "d": "x"}, "d": {},
             "e": {"f": "x"}, "f": {"e": "x"}}
    assert sorted(c for c, _ in _cycles(graph)) == [["a", "b", "c", "a"], ["e", "f", "e"]]
    knot = {"a": {"b": "x", "c": "x"}, "b": {"a": "x"}, "c": {"a": "x"}}
    ((cycle, group),) = _cycles(knot)
    assert cycle in (["a", "b", "a"], ["a", "c", "a"]) and group == ["a", "b", "c"]
    assert "one of the cycles among a, b, c" in _describe((cycle, group), knot)
    assert _cycles({"a": {"b": "x"}, "b": {}}) == []
    assert _package("jarvis.mcp.manager") == "jarvis.mcp" and _package("jarvis.sdk") == "jarvis.sdk"


def test_lazy_and_type_checking_imports():
    # A lazy import is an arrow; an import only for type checkers is not one for cycles.
    graph = _module_graph()
    assert "jarvis.scheduler.store" in graph["jarvis.scheduler.ledger"]  # inside open_store
    public_api = PACKAGE / "__init__.py"  # imports jarvis.sdk under TYPE_CHECKING only
    assert "jarvis.sdk" in {t for t, _ in _imports(public_api)}
    assert "jarvis.sdk" not in {t for t, _ in _imports(public_api, type_checking=False)}
    assert "jarvis.sdk" not in graph["jarvis"]


# --- size ----------------------------------------------------------------------------------------
def test_no_module_is_too_long():
    # Split a module along its natural seam (the things it holds) before it passes MAX_LINES.
    long = [f"{p.relative_to(PACKAGE.parent)}: {n} lines" for p in _all_modules()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES]
    assert long == [], f"modules over {MAX_LINES} lines (split them):\n" + "\n".join(long)


# --- MCP: the client below the SDK, the server with the entry points -----------------------------
def test_mcp_serving_is_an_entry_point_and_the_client_sits_below_the_sdk():
    entry_points = len(LAYERS) - 1
    serving = [m for m in map(_module_name, _all_modules()) if m.startswith("jarvis.server.mcp")]
    assert {"jarvis.server.mcp_serve", "jarvis.server.mcp_served"} <= set(serving)
    assert all(_layer(m) == entry_points for m in serving)
    client = [m for m in map(_module_name, _all_modules())
              if m == "jarvis.mcp" or m.startswith("jarvis.mcp.")]
    assert "jarvis.mcp.manager" in client
    assert all(_layer(m) < _layer("jarvis.sdk") for m in client), client
    # The client room holds no server: nothing under jarvis/mcp uses the SDK's server side.
    serving_here = [f"{p.relative_to(PACKAGE.parent)}:{node.lineno}"
                    for p in _all_modules() if _module_name(p) in client
                    for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
                    if (isinstance(node, ast.ImportFrom) and not node.level
                        and (node.module or "").split(".")[:2] == ["mcp", "server"])
                    or (isinstance(node, ast.Import)
                        and any(a.name.split(".")[:2] == ["mcp", "server"] for a in node.names))]
    assert serving_here == [], f"MCP serving code in the client room (move it to " \
        f"jarvis/server/): {serving_here}"
