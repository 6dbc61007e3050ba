"""Deny by default for files (issue 12): every file jarvis opens goes through the path policy.

`jarvis.security.paths` (PathPolicy, opening beneath an allowed folder) is the one place that
may open a path a model could have chosen. This test reads every module of the package with
`ast` and lists each call that opens, reads, writes, lists or removes a file by path (`open`,
`os.open`, `io.open`, `Path.open/read_text/read_bytes/write_text/write_bytes`, `iterdir`,
`glob`, `os.scandir`, `sqlite3.connect`, `shutil.*`, `unlink`, ...), import aliases
resolved. A call found outside the policy fails the test unless ALLOWED lists it with the
reason it can only reach jarvis's own files (caches, logs, stores, config) or files a person
named. So a new tool that opens a model's path by hand fails here, and has to use
`PathPolicy.read` (or be argued into ALLOWED in review).

Not scanned, with the reason: `jarvis.security` (the policy itself), `jarvis.commands` and
`jarvis.cli` (paths a person types on the command line, never a model's), `jarvis.sandbox`
(isolation machinery: it opens /proc and its own work folder; model-written code runs inside
the sandbox, which Landlock/namespaces confine), `jarvis.testing` (the test kit's fake server
reading its own script file).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "jarvis"

NOT_SCANNED = ("jarvis.security", "jarvis.commands", "jarvis.cli", "jarvis.sandbox",
               "jarvis.testing")

# Module-level functions (dotted, after resolving import aliases) that reach a file by path.
OPENING_FUNCTIONS = frozenset({
    "open", "io.open", "os.open", "codecs.open", "gzip.open", "bz2.open", "lzma.open",
    "tarfile.open", "zipfile.ZipFile", "sqlite3.connect", "sqlite_utils.Database",
    "dbm.open", "shelve.open", "mmap.mmap", "tempfile.NamedTemporaryFile",
    "os.scandir", "os.listdir", "os.walk", "os.remove", "os.unlink", "os.rmdir",
    "os.rename", "os.replace", "os.truncate", "os.link", "os.symlink", "os.chmod", "os.chown",
    "glob.glob", "glob.iglob",
    "shutil.copy", "shutil.copy2", "shutil.copyfile", "shutil.copytree", "shutil.move",
    "shutil.rmtree", "importlib.util.spec_from_file_location", "runpy.run_path",
    # jarvis's own: create or tighten its state files and folders (jarvis.core.paths)
    "jarvis.core.paths.open_private", "jarvis.core.paths.private_file",
    "jarvis.core.paths.private_dir", "jarvis.core.paths.private_database",
    "jarvis.core.paths.tighten",
})
# Methods that reach a file whatever object they are called on (pathlib.Path's, mostly). A
# method of another object with one of these names is listed too: better a line in ALLOWED
# than a path opened unseen.
OPENING_METHODS = frozenset({
    "open", "read_text", "read_bytes", "write_text", "write_bytes", "iterdir", "glob",
    "rglob", "unlink", "rmdir", "touch", "rename", "replace", "symlink_to", "hardlink_to",
    "chmod", "walk",
})
# Path.replace/rename take exactly one positional argument and no keyword; str.replace takes
# two, datetime.replace and dataclasses.replace take keywords: those are not files.
_ONE_ARGUMENT = {"replace", "rename"}


@dataclass(frozen=True, order=True)
class Opening:
    module: str
    function: str  # the enclosing def's qualified name ("<module>" at top level)
    call: str  # what is called: "open", "os.scandir", ".read_text", ...
    line: int

    @property
    def key(self) -> tuple[str, str, str]:
        return self.module, self.function, self.call


# (module, function, call) -> why it cannot open a path a model chose. Keep each reason true:
# a new entry needs one, and an entry whose call is gone fails test_allowed_entries_still_exist.
ALLOWED: dict[tuple[str, str, str], str] = {
    # --- jarvis's state kept private: JARVIS_HOME and the stores' own paths ----------------
    ("jarvis.core.paths", "private_dir", "os.chmod"):
        "a folder jarvis itself just created for its state (JARVIS_HOME, a store's folder)",
    ("jarvis.core.paths", "private_file", "os.open"):
        "creates a store's file (a database path from config or JARVIS_HOME) 0600",
    ("jarvis.core.paths", "open_private", "os.open"):
        "opens jarvis's own log and cache files (JARVIS_HOME/mcp/...) 0600",
    ("jarvis.core.paths", "private_database", "open"):
        "the first 16 bytes of a store's database file (is it SQLite?) before it is tightened",
    ("jarvis.core.paths", "tighten", "os.chmod"):
        "takes group/other bits off jarvis's own state files and folders (no symlink followed)",
    ("jarvis.core.paths", "exposed", ".iterdir"):
        "lists JARVIS_HOME for `jarvis doctor` (symlinks not followed, nothing read)",
    # --- config: chosen by the person running jarvis ----------------------------------------
    ("jarvis.mcp.sandboxing", "_shebang", "open"):
        "the first line of a stdio MCP server's program, named by `command` in config.toml",
    ("jarvis.mcp.sandboxing", "_npx", ".read_text"):
        "the package.json of the package a server's `npx` line names, where npx installed it",
    ("jarvis.core.config", "load_config", ".read_bytes"):
        "config.toml found by the config lookup or named by --config / JARVIS_CONFIG",
    ("jarvis.core.config_cache", "schema_digest", ".read_bytes"):
        "jarvis's own config modules (their source keys the validated-config cache)",
    ("jarvis.core.private_cache", "read", "os.open"):
        "a cache file: JARVIS_HOME/cache/{config,entry-points}/<sha256>.json, O_NOFOLLOW",
    ("jarvis.core.private_cache", "read", "jarvis.core.paths.tighten"):
        "makes that cache file, JARVIS_HOME/cache and its folder private again when left open, "
        "like the rest of JARVIS_HOME",
    ("jarvis.core.private_cache", "write", "jarvis.core.paths.private_dir"):
        "makes JARVIS_HOME/cache/<name> 0700 before a cache file is written",
    ("jarvis.core.private_cache", "write", "os.open"):
        "a new cache file (O_EXCL, O_NOFOLLOW, 0600) in JARVIS_HOME/cache/<name>",
    ("jarvis.core.private_cache", "write", "os.replace"):
        "puts that cache file in place, within JARVIS_HOME/cache/<name>",
    ("jarvis.core.private_cache", "write", ".unlink"):
        "removes that temporary cache file when writing it failed",
    ("jarvis.core.private_cache", "_prune", ".glob"):
        "lists JARVIS_HOME/cache/<name> to keep only the newest cache files",
    ("jarvis.core.private_cache", "_prune", ".unlink"):
        "removes an old cache file found in JARVIS_HOME/cache/<name>",
    ("jarvis.core.entry_points", "_key", "os.scandir"):
        "lists each sys.path folder for its *.dist-info/*.egg-info names (only os.stat of their "
        "metadata files follows; nothing is read): the key of the installed-plugins cache",
    ("jarvis.core.workspace_lookup", "_is_workspace", ".read_text"):
        "a config.toml in a folder above the current one, read by the config lookup to tell a "
        "jarvis workspace from another program's config (never a model's path)",
    # --- stores: SQLite files at paths from config or JARVIS_HOME -----------------------------
    ("jarvis.memory.sqlite", "SQLiteMemory.__init__", "jarvis.core.paths.private_database"):
        "creates the memory database 0600 (its folder 0700) before it is opened",
    ("jarvis.memory.sqlite", "SQLiteMemory._connect", "sqlite3.connect"):
        "the memory database: [memory] db_path / JARVIS_MEMORY_DB, or under JARVIS_HOME",
    ("jarvis.memory.sqlite", "SQLiteMemory._database", "sqlite_utils.Database"):
        "wraps a connection opened by _connect (a connection, not a path)",
    ("jarvis.scheduler.store", "SchedulerStore.__init__", "jarvis.core.paths.private_database"):
        "creates the scheduler database 0600 (its folder 0700) before it is opened",
    ("jarvis.scheduler.store", "SchedulerStore.__init__", "sqlite3.connect"):
        "the scheduler database: [scheduler] db_path in config, or under JARVIS_HOME",
    ("jarvis.scheduler.store", "SchedulerStore.__init__", "sqlite_utils.Database"):
        "wraps the connection opened just before (a connection, not a path)",
    ("jarvis.scheduler.store", "_pid_scope", ".read_text"):
        "/proc/sys/kernel/random/boot_id: which boot a lease was taken in",
    ("jarvis.scheduler.store", "owner_is_dead", ".read_text"):
        "/proc/<pid>/stat of a pid from jarvis's own lease (is the lease holder alive?)",
    ("jarvis.runlog", "RunLog._connect", "jarvis.core.paths.private_database"):
        "creates the run log database 0600 (its folder 0700) before it is opened",
    ("jarvis.runlog", "RunLog._connect", "sqlite3.connect"):
        "the run log database: [runs] db_path / JARVIS_RUNS_DB, or JARVIS_HOME/runs.db",
    ("jarvis.runlog", "RunLog._connect_read_only", "sqlite3.connect"):
        "the run log ([runs] db_path or JARVIS_HOME/runs.db) opened read-only in a read-only "
        "folder",
    ("jarvis.approvals.store", "ApprovalStore.__init__", "jarvis.core.paths.private_database"):
        "creates the approvals database 0600 before it is opened ([approvals] db_path, else "
        "JARVIS_HOME/approvals.db)",
    ("jarvis.approvals.store", "ApprovalStore.__init__", "sqlite3.connect"):
        "the approvals database: [approvals] db_path, or JARVIS_HOME/approvals.db",
    ("jarvis.approvals.notify", "serve_url", ".open"):
        "urllib's opener.open of jarvis serve's own /health URL, not a file",
    ("jarvis.conversations.store", "ConversationStore._connection", "sqlite3.connect"):
        "conversations, beside the run log: [runs] db_path / JARVIS_RUNS_DB, or JARVIS_HOME",
    ("jarvis.inbound.mailread", "_attachments", ".walk"):
        "email.message.Message.walk: the parts of a parsed mail in memory, not a folder",
    # --- MCP client: jarvis's own logs, caches and /proc ------------------------------------
    # Server names are config keys checked by jarvis.core.server_names (letters, digits, '-',
    # '_'): no '/' or '..' can reach these file names.
    ("jarvis.mcp.connection", "ServerConnection.stderr_tail", "open"):
        "the server's stderr log that jarvis itself writes (JARVIS_HOME/mcp/logs/NAME.log)",
    ("jarvis.mcp.connection", "ServerConnection._transport", "open"):
        "opens os.devnull when the stderr log cannot be made",
    ("jarvis.mcp.connection", "ServerConnection._transport", "jarvis.core.paths.private_dir"):
        "makes the folder of the stderr logs, JARVIS_HOME/mcp/logs (0700)",
    ("jarvis.mcp.connection", "ServerConnection._transport", "jarvis.core.paths.open_private"):
        "creates that stderr log (0600) for a configured stdio server",
    ("jarvis.mcp.cache", "read_tools", ".read_text"):
        "the tool-list cache, JARVIS_HOME/mcp/tools-NAME-KEY.json",
    ("jarvis.mcp.cache", "write_tools", "jarvis.core.paths.private_dir"):
        "makes JARVIS_HOME/mcp (0700)",
    ("jarvis.mcp.cache", "write_tools", "jarvis.core.paths.open_private"):
        "writes that cache (a temp file, 0600)",
    ("jarvis.mcp.cache", "write_tools", "os.replace"): "...moved into place atomically",
    ("jarvis.mcp.cache", "_prune", ".glob"): "older tool-list caches of the same server",
    ("jarvis.mcp.cache", "_prune", ".unlink"): "...which are deleted",
    ("jarvis.mcp.cache", "read_failure", ".read_text"):
        "the remembered failure, JARVIS_HOME/mcp/failed-NAME-KEY.json",
    ("jarvis.mcp.cache", "write_failure", "jarvis.core.paths.private_dir"):
        "makes JARVIS_HOME/mcp (0700)",
    ("jarvis.mcp.cache", "write_failure", "jarvis.core.paths.open_private"):
        "writes it (a temp file, 0600)",
    ("jarvis.mcp.cache", "write_failure", "os.replace"): "...moved into place atomically",
    ("jarvis.mcp.cache", "clear_failure", ".unlink"): "...deleted when the server connects",
    ("jarvis.mcp.stdio", "has_controlling_terminal", "os.open"):
        "/dev/tty, opened only to learn whether jarvis has a controlling terminal",
    ("jarvis.mcp.procs", "pids_with_token", ".iterdir"):
        "/proc, to find the stdio servers this process started (their tree is killed)",
    ("jarvis.mcp.procs", "pids_with_token", ".read_bytes"): "/proc/<pid>/environ of each",
    ("jarvis.mcp.procs", "_is_zombie", ".read_text"): "/proc/<pid>/stat of those",
    # --- workspace loaders: folders from config; each file is read through the policy -------
    ("jarvis.workspace.agents", "load_agents", ".glob"):
        "lists the agents folder ([workspace] agents_dir); each file is then read by "
        "_read_text through PathPolicy beneath that folder",
    ("jarvis.workspace.tools", "load_workspace_tools", ".glob"):
        "lists the tools folder ([workspace] tools_dir); each file is then read by "
        "_read_source through PathPolicy beneath that folder",
    ("jarvis.workspace.tools", "_load_tool_file", "importlib.util.spec_from_file_location"):
        "names the module after the file; the code run is the bytes PathPolicy read "
        "(exec of _read_source's result), the loader never opens the file",
    # --- memory_index: the walk lists folders the policy already let through ---------------
    ("jarvis.memory.indexer", "_walk", "os.scandir"):
        "lists folders below a root that index_paths checked with the policy first; every "
        "file listed is read through PathPolicy.read (symlinked folders are not followed)",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


class _Finder(ast.NodeVisitor):
    def __init__(self, module: str) -> None:
        self.module = module
        self.aliases: dict[str, str] = {}  # local name -> dotted origin
        self.modules: set[str] = set()  # local names bound by `import x` (modules)
        self.scope: list[str] = []
        self.found: list[Opening] = []

    # imports, at any depth (lazy imports inside functions are the rule in jarvis)
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname:
                self.aliases[alias.asname] = alias.name
                self.modules.add(alias.asname)
            else:
                top = alias.name.split(".")[0]
                self.aliases[top] = top
                self.modules.add(top)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and not node.level:
            for alias in node.names:
                self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def _scoped(self, node: ast.AST, name: str) -> None:
        self.scope.append(name)
        self.generic_visit(node)
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._scoped(node, node.name)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._scoped(node, node.name)

    def _resolve(self, dotted: str) -> str:
        head, _, rest = dotted.partition(".")
        origin = self.aliases.get(head)
        if origin is None:
            return dotted
        return f"{origin}.{rest}" if rest else origin

    def _add(self, node: ast.AST, call: str) -> None:
        self.found.append(Opening(self.module, ".".join(self.scope) or "<module>", call,
                                  node.lineno))

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        dotted = _dotted(func)
        resolved = self._resolve(dotted) if dotted else None
        if resolved in OPENING_FUNCTIONS:
            self._add(node, resolved)
        if isinstance(func, ast.Attribute) and func.attr in OPENING_METHODS:
            if resolved not in OPENING_FUNCTIONS and not self._module_function(func):
                if func.attr not in _ONE_ARGUMENT or (len(node.args) == 1
                                                      and not node.keywords):
                    self._add(node, "." + func.attr)
        # getattr(path, "read_text")(): the name as a string constant
        if (isinstance(func, ast.Name) and func.id == "getattr" and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in OPENING_METHODS):
            self._add(node, "." + node.args[1].value)
        self.generic_visit(node)

    def _module_function(self, func: ast.Attribute) -> bool:
        """`os.replace(...)`, `dataclasses.replace(...)`: a function of an imported module,
        judged by OPENING_FUNCTIONS above, not a method of a path."""
        base = _dotted(func.value)
        return base is not None and base.split(".")[0] in self.modules


def find_openings(source: str, module: str = "jarvis.tools.example") -> list[Opening]:
    """Every call in `source` that reaches a file by path."""
    finder = _Finder(module)
    finder.visit(ast.parse(source))
    return sorted(finder.found)


def _scanned_modules() -> list[tuple[str, Path]]:
    modules = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        name = _module_name(path)
        if any(name == skip or name.startswith(skip + ".") for skip in NOT_SCANNED):
            continue
        modules.append((name, path))
    return modules


def _all_openings() -> list[Opening]:
    found: list[Opening] = []
    for name, path in _scanned_modules():
        found.extend(find_openings(path.read_text(encoding="utf-8"), name))
    return found


def test_no_file_is_opened_around_the_path_policy():
    unlisted = [o for o in _all_openings() if o.key not in ALLOWED]
    assert unlisted == [], (
        "these calls reach a file by path outside jarvis.security.paths; read a path a model "
        "may have chosen through PathPolicy.read, or (for jarvis's own files only) add the "
        "call to ALLOWED with the reason:\n"
        + "\n".join(f"  {o.module}:{o.line} in {o.function}: {o.call}(...)" for o in unlisted))


def test_allowed_entries_still_exist():
    # An entry that matches no call any more must be deleted, so the list stays an honest map.
    present = {o.key for o in _all_openings()}
    assert set(ALLOWED) - present == set()


def test_the_scan_covers_every_place_a_models_argument_can_reach():
    scanned = {name for name, _ in _scanned_modules()}
    for package in ("jarvis.tools", "jarvis.memory", "jarvis.workspace", "jarvis.mcp",
                    "jarvis.channels", "jarvis.server", "jarvis.scheduler", "jarvis.agents",
                    "jarvis.engine", "jarvis.sdk"):
        assert any(m == package or m.startswith(package + ".") for m in scanned), package
    assert "jarvis.tools.file_read" in scanned and "jarvis.security.paths" not in scanned


# --- the checker itself, on sources written to break the rule ---------------------------------
@pytest.mark.parametrize("source, call", [
    ("def execute(path):\n    return open(path).read()\n", "open"),
    ("import io\ndef execute(path):\n    return io.open(path).read()\n", "io.open"),
    ("import os\ndef execute(path):\n    return os.open(path, os.O_RDONLY)\n", "os.open"),
    ("from os import open as o\ndef execute(path):\n    return o(path, 0)\n", "os.open"),
    ("from pathlib import Path\ndef execute(p):\n    return Path(p).read_text()\n",
     ".read_text"),
    ("from pathlib import Path as P\ndef execute(p):\n    return P(p).read_bytes()\n",
     ".read_bytes"),
    ("def execute(path):\n    path.write_text('x')\n", ".write_text"),
    ("def execute(path):\n    with path.open('rb') as f:\n        return f.read()\n", ".open"),
    ("def execute(path):\n    return getattr(path, 'read_text')()\n", ".read_text"),
    ("import sqlite3 as db\ndef execute(path):\n    return db.connect(path)\n",
     "sqlite3.connect"),
    ("def execute(path):\n    import sqlite3\n    return sqlite3.connect(path)\n",
     "sqlite3.connect"),
    ("def execute(folder):\n    import os\n    return list(os.scandir(folder))\n", "os.scandir"),
    ("import shutil\ndef execute(path):\n    shutil.rmtree(path)\n", "shutil.rmtree"),
    ("def execute(folder):\n    return list(folder.rglob('*'))\n", ".rglob"),
    ("import json\ndef execute(path):\n    return json.load(open(path))\n", "open"),
])
def test_the_checker_catches_a_tool_that_opens_a_path_by_hand(source, call):
    found = find_openings(source)
    assert call in [o.call for o in found], found
    assert all(o.function == "execute" for o in found)
    # ...and such a tool fails the real test: its key is not in ALLOWED.
    assert not any(o.key in ALLOWED for o in found)


@pytest.mark.parametrize("source", [
    # The policy is the way to read: nothing to report.
    "from jarvis.security.paths import PathPolicy\n"
    "def execute(path):\n    return PathPolicy(['.']).read(path).data\n",
    # str.replace shares a name with Path.replace; strings are not files.
    "def execute(text):\n    return text.replace('a', 'b')\n",
    "import os\ndef execute(path):\n    return os.path.basename(path)\n",
])
def test_the_checker_lets_code_that_opens_nothing_pass(source):
    assert find_openings(source) == []


def test_the_checker_names_the_enclosing_function_and_line():
    source = ("class Tool:\n"
              "    def execute(self, path):\n"
              "        return open(path).read()\n")
    assert find_openings(source, "jarvis.tools.new_tool") == [
        Opening("jarvis.tools.new_tool", "Tool.execute", "open", 3)]
