"""Arrows point down (shared/DESIGN.md): a module imports only from its own layer or below.

The layers, lowest first. A module belongs to the layer of its longest matching prefix; a
module that matches none fails the test, so a new package has to be placed on purpose.
Every import counts, also those inside functions (a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "jarvis"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("core: records, events, registries, config, errors",
     ("jarvis.errors", "jarvis._lazy", "jarvis._version", "jarvis.core")),
    ("shared rules below every tool: path policy, isolation, pooled resources, channels",
     ("jarvis.security", "jarvis.resources", "jarvis.sandbox", "jarvis.channels",
      "jarvis.trust")),
    ("stores and engines (know no tool)",
     ("jarvis.memory", "jarvis.engine", "jarvis.runlog", "jarvis.conversations")),
    ("the tool system and its built-in catalog",
     ("jarvis.tools",)),
    ("what uses tools or adds them: agents, scheduler, MCP client, workspace, plugins",
     ("jarvis.agents", "jarvis.scheduler", "jarvis.mcp", "jarvis.workspace", "jarvis.plugins")),
    ("composition: extensions loading, the SDK, the testing kit",
     ("jarvis.extensions", "jarvis.sdk", "jarvis.testing")),
    ("entry points: CLI, servers (the MCP server too), the package's public API",
     ("jarvis.commands", "jarvis.cli", "jarvis.server", "jarvis.mcp.server", "jarvis.inbound",
      "jarvis")),
]

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


def _imports(path: Path) -> list[tuple[str, int]]:
    """(imported jarvis module, line) for every import in `path`, relative ones resolved."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
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
    ("jarvis.mcp.server", "jarvis.server.app", False),
    ("jarvis.agents.base", "jarvis.tools.executor", False),
])
def test_the_layers_judge_known_arrows(source, target, upward):
    # The arrows issue 16 named are upward under these layers (so the test would catch them).
    assert (_layer(target) > _layer(source)) is upward
