"""Stdio MCP servers in the sandbox: what a server's command needs, found before it starts.

A third-party server (`npx -y some-server`, a PyPI package's script) would otherwise run with
the person's full rights, keys and network. `[mcp.servers.NAME] sandbox = true` (the default
for stdio servers) runs it in the code sandbox's namespaces (jarvis/sandbox/command.py) seeing
only its runtime and its own package (read-only), the paths listed in `read_only_paths` and
`writable_paths`, no network, and an environment of only the config's `env`.

The runtime and package are found here, outside the sandbox:
  - a Python script (a venv's console script, or `python script.py`): the interpreter, its
    standard library and shared libraries, its site-packages, and the script;
  - a Node.js script (`node script.js`, a `#!/usr/bin/env node` bin): node and the script's
    `node_modules` (or its package folder);
  - `npx [-y] PACKAGE ARGS`: npx finds or installs the package outside the sandbox (the
    person's npm, as when run unsandboxed), then node runs the package's bin inside;
  - `uvx [OPTIONS] PACKAGE ARGS` (or `--from PACKAGE COMMAND`, or `uv tool run`): uvx makes
    the tool's environment outside the sandbox (its index and cache, as unsandboxed), then
    the environment's console script runs inside, as a Python script;
  - any other program: the program and the shared libraries it loads from its own folders.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from jarvis.errors import JarvisError

RESOLVE_TIMEOUT = 120.0  # npx may download the package the first time


class SandboxResolveError(JarvisError):
    """A sandboxed server's command cannot be resolved (the message names the fix)."""


class CommandNotFound(SandboxResolveError):
    """The command is not there at all (as unsandboxed: 'command not found')."""


def resolve(name: str, command: str, args: list[str], cwd: str | None,
            path: str | None = None, env: dict[str, str] | None = None,
            ) -> tuple[list[str], list[str]]:
    """(argv with an absolute program, the runtime paths it needs read-only). `env`: the
    server's configured environment (uvx's settings, UV_CACHE_DIR, ..., when it prepares a
    tool's environment)."""
    program = shutil.which(command, path=path) if os.sep not in command else command
    if program is None or not os.path.isfile(program):
        raise CommandNotFound(f"command not found: {command}")
    program = os.path.abspath(program)
    if os.path.basename(program) == "npx":
        return _npx(name, program, args, cwd)
    if os.path.basename(program) == "uvx":
        return _uvx(name, [program], args, cwd, path, env)
    if os.path.basename(program) == "uv" and args[:2] == ["tool", "run"]:
        return _uvx(name, [program, "tool", "run"], args[2:], cwd, path, env)
    interpreter = _shebang(program)
    if interpreter is None:
        if _is_python(program):
            script = _absolute(args[0], cwd) if args and os.path.isfile(
                _absolute(args[0], cwd)) else None
            return [program, *args], [*_python_runtime(program),
                                      *([_script_folder(name, script)] if script else [])]
        if os.path.basename(os.path.realpath(program)) == "node" and args:
            script = _absolute(args[0], cwd)
            return [program, *args], [*_binary(program), _node_package(script)]
        return [program, *args], _binary(program)
    if _is_python(interpreter):
        return [interpreter, program, *args], [*_python_runtime(interpreter), program]
    if os.path.basename(os.path.realpath(interpreter)) == "node":
        return [interpreter, program, *args], [*_binary(interpreter), _node_package(program)]
    return [interpreter, program, *args], [*_binary(interpreter), program]


def _absolute(path: str, cwd: str | None) -> str:
    return os.path.realpath(os.path.join(cwd or os.getcwd(), path))


def _shebang(program: str) -> str | None:
    """The interpreter a script names (`#!/usr/bin/env node` resolved on PATH), or None."""
    try:
        with open(program, "rb") as f:
            first = f.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env" and len(words) > 1:
        found = shutil.which(words[-1] if words[1].startswith("-") else words[1])
        return os.path.abspath(found) if found else None
    return words[0]


def _is_python(path: str) -> bool:
    return os.path.basename(os.path.realpath(path)).startswith("python")


def _binary(program: str) -> list[str]:
    from jarvis.sandbox.runtime import shared_libraries

    real = os.path.realpath(program)
    return [real, *shared_libraries([real])]


@functools.lru_cache(maxsize=16)
def _python_runtime(interpreter: str) -> tuple[str, ...]:
    """What `interpreter` needs: itself, its stdlib, the libraries of its prefix, its
    site-packages (a venv's included). Asked of the interpreter itself (-I: no site hooks)."""
    from jarvis.sandbox.runtime import interpreter_libraries

    code = ("import json, site, sys, sysconfig\n"
            "paths = sysconfig.get_paths(vars={'base': sys.base_prefix, "
            "'platbase': sys.base_exec_prefix})\n"
            "print(json.dumps([getattr(sys, '_base_executable', '') or sys.executable, "
            "paths['stdlib'], paths['platstdlib'], site.getsitepackages(), "
            "sysconfig.get_config_var('LIBDIR') or '']))")
    try:
        if os.path.abspath(interpreter) == os.path.abspath(sys.executable):  # jarvis's own
            output = io.StringIO()
            with contextlib.redirect_stdout(output):
                exec(code, {})  # noqa: S102 - our own constant code
            answer = output.getvalue()
        else:
            answer = subprocess.run([interpreter, "-I", "-c", code], capture_output=True,
                                    text=True, timeout=30,
                                    env={"PATH": os.environ.get("PATH", "")}).stdout
        base, stdlib, platstdlib, packages, libdir = json.loads(answer)
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        raise SandboxResolveError(f"cannot ask {interpreter} where its library is: "
                                  f"{exc}") from None
    base = os.path.realpath(base)
    libraries = interpreter_libraries(base, list(dict.fromkeys([stdlib, platstdlib])),
                                      packages, libdir)
    # A venv's interpreter runs as named, beside its pyvenv.cfg (which makes it the venv's).
    venv = [interpreter, cfg] if os.path.isfile(cfg := os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(interpreter))), "pyvenv.cfg")) else []
    return tuple(dict.fromkeys([base, stdlib, platstdlib, *libraries, *venv,
                                *(p for p in packages if os.path.isdir(p))]))


def _script_folder(name: str, script: str) -> str:
    """A Python server script's folder (its sibling modules), never one holding a .env."""
    folder = os.path.dirname(script)
    if os.path.exists(os.path.join(folder, ".env")):
        raise SandboxResolveError(f"MCP server {name!r}: its script's folder {folder} holds a "
                                  f".env file, which the sandbox would show it; move the server "
                                  f"into a folder of its own")
    return folder


def _node_package(script: str) -> str:
    """The folder a node script's code lives in: its `node_modules` (the package and its
    dependencies), else the nearest folder with a package.json, else the script itself."""
    parts = Path(script).parts
    if "node_modules" in parts:
        return str(Path(*parts[:parts.index("node_modules") + 1]))
    for folder in Path(script).parents:
        if (folder / "package.json").is_file():
            return str(folder)
    return script


def _npx(name: str, npx: str, args: list[str], cwd: str | None) -> tuple[list[str], list[str]]:
    """`npx [-y|--yes|--no-install] PACKAGE ARGS` as node running the package's bin."""
    rest = list(args)
    flags = []
    while rest and rest[0].startswith("-"):
        flags.append(rest.pop(0))
    if not rest:
        raise SandboxResolveError(f"MCP server {name!r}: npx names no package")
    package, rest = rest[0], rest[1:]
    yes = ["--yes"] if any(f in ("-y", "--yes") for f in flags) else ["--no-install"]
    try:
        done = subprocess.run(
            [npx, *yes, "--package", package, "--", "node", "-e",
             "process.stdout.write(process.env.PATH)"],
            capture_output=True, text=True, timeout=RESOLVE_TIMEOUT, cwd=cwd)
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxResolveError(f"MCP server {name!r}: npx failed: {exc}") from None
    bins = [p for p in done.stdout.split(os.pathsep) if p.endswith("node_modules/.bin")]
    modules = next((os.path.dirname(p) for p in bins
                    if os.path.isfile(os.path.join(os.path.dirname(p), _bare(package),
                                                   "package.json"))), None)
    if done.returncode != 0 or modules is None:
        detail = (done.stderr.strip().splitlines() or ["no package folder found"])[-1]
        raise SandboxResolveError(f"MCP server {name!r}: npx could not find {package!r}: "
                                  f"{detail}")
    manifest = json.loads(Path(modules, _bare(package), "package.json").read_text())
    bin_field = manifest.get("bin")
    if isinstance(bin_field, dict):
        entry = bin_field.get(manifest.get("name", "").split("/")[-1]) or next(
            iter(bin_field.values()), None)
    else:
        entry = bin_field
    if not entry:
        raise SandboxResolveError(f"MCP server {name!r}: {package!r} names no program (bin)")
    script = os.path.realpath(os.path.join(modules, _bare(package), entry))
    node = shutil.which("node")
    if node is None:
        raise SandboxResolveError(f"MCP server {name!r}: node not found")
    return [os.path.abspath(node), script, *rest], [*_binary(node), os.path.realpath(modules)]


_ENVIRONMENT = "import json, sys; print(json.dumps([sys.prefix, sys.executable]))"


def _uvx(name: str, uvx: list[str], args: list[str], cwd: str | None, path: str | None,
         env: dict[str, str] | None) -> tuple[list[str], list[str]]:
    """`uvx [OPTIONS] PACKAGE[@VERSION] ARGS` / `uvx [OPTIONS] --from SPEC COMMAND ARGS` as the
    tool environment's console script, run by that environment's Python."""
    takes_value = _uvx_value_options(uvx[0])
    options: list[str] = []
    rest = list(args)
    source = None
    while rest and rest[0].startswith("-") and rest[0] != "--":
        arg = rest.pop(0)
        flag, has_value, value = arg.partition("=")
        if flag == "--from":
            source = value if has_value else (rest.pop(0) if rest else "")
            continue
        options.append(arg)
        if not has_value and flag in takes_value and rest:
            options.append(rest.pop(0))
    if rest[:1] == ["--"]:
        rest.pop(0)
    if not rest:
        raise SandboxResolveError(f"MCP server {name!r}: uvx names no package")
    command, rest = rest[0], rest[1:]
    if source is None:  # `uvx mcp-server-time@2026.1`: the package's own command
        source, command = command, re.split(r"[@=<>~!\[; ]", command, maxsplit=1)[0]
    done = None
    try:
        done = subprocess.run(
            [*uvx, *options, "--from", source, "python", "-c", _ENVIRONMENT],
            capture_output=True, text=True, timeout=RESOLVE_TIMEOUT, cwd=cwd,
            env={**os.environ, **({"PATH": path} if path else {}), **(env or {})})
        prefix, _python = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        lines = [line for line in (done.stderr if done is not None else "").splitlines()
                 if line.strip()]
        detail = lines[-1].strip() if lines else "no answer"
        raise SandboxResolveError(
            f"MCP server {name!r}: uvx could not prepare {source!r} outside the sandbox "
            f"({detail}); uvx installs a tool first, with its index and cache as when it runs "
            f"unsandboxed (set them in the server's env, e.g. UV_CACHE_DIR, UV_OFFLINE=1, "
            f"UV_FIND_LINKS), or point `command` at the tool's script in a venv") from None
    program = os.path.join(prefix, "bin", command)
    if not os.path.isfile(program):
        raise SandboxResolveError(f"MCP server {name!r}: {source!r} has no program named "
                                  f"{command!r} (name it with uvx --from {source} COMMAND)")
    # uv's console scripts start as /bin/sh scripts that exec the python beside them (and
    # are Python files past that): the environment's python runs them directly.
    python = os.path.join(prefix, "bin", "python")
    return [python, program, *rest], [*_python_runtime(python), program]


@functools.lru_cache(maxsize=4)
def _uvx_value_options(uvx: str) -> frozenset[str]:
    """The options of this uvx that take a value (`--from <FROM>`, `-p, --python <PYTHON>`),
    read from its --help: they differ between uv versions."""
    try:
        text = subprocess.run([uvx, "--help"], capture_output=True, text=True,
                              timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return frozenset({"--from", "--with", "-w", "--python", "-p", "--index", "--index-url",
                          "-i", "--extra-index-url", "--find-links", "-f", "--cache-dir"})
    found = set()
    for match in re.finditer(r"^\s+(?:(-\w), )?(--[\w-]+) <", text, flags=re.M):
        found.update(flag for flag in match.groups() if flag)
    return frozenset(found)


def _bare(package: str) -> str:
    """A package spec without its version: @scope/name@1.2 -> @scope/name."""
    at = package.rfind("@")
    return package[:at] if at > 0 else package


def sandboxed(name: str, cfg: Any, params: Any, base_dir: Path, section: Any = None,
              on_close: Any = None) -> Any:
    """The StdioServerParameters that run `params` in the sandbox (`section`: the [sandbox]
    table: isolation, uid). With hosts in `cfg.network`, a network proxy is started for the
    server (jarvis/sandbox/netproxy.py) and `on_close(proxy.close)` registers its end with
    the server's connection. Raises ServerSetupError with the reason and the fix."""
    from mcp import StdioServerParameters

    from jarvis.mcp.errors import ServerSetupError
    from jarvis.sandbox.command import CommandPolicy, command_argv
    from jarvis.sandbox.launch import PathProblem
    from jarvis.sandbox.probe import SandboxUnavailable, find_bwrap
    from jarvis.sandbox.probe import resolve as mechanism_of

    fix = f"or set sandbox = false in [mcp.servers.{name}] to run it with your full rights"
    isolation = getattr(section, "isolation", "auto")
    try:
        # "auto" starts no probe sandbox first (a second or two under load, counted against
        # the server's connect_timeout): bubblewrap where installed; one that cannot start
        # fails the server's start loudly, with its reason, like any other failure.
        mechanism = ("bwrap" if isolation == "auto" and find_bwrap() else
                     mechanism_of("namespaces" if isolation == "auto" else isolation))
    except SandboxUnavailable as exc:
        raise ServerSetupError(f"MCP server {name!r} runs in the sandbox: {exc}; {fix}") from None
    if mechanism == "none":
        raise ServerSetupError(f"MCP server {name!r} runs in the sandbox, but [sandbox] isolation"
                               f" is \"none\"; pick a mechanism, {fix}")

    def listed(paths: list[str]) -> tuple[str, ...]:
        return tuple(str((base_dir / os.path.expanduser(p)).resolve()) for p in paths)

    proxy = None
    uid = getattr(section, "uid", 65534)
    try:
        argv, runtime = resolve(name, params.command, list(params.args), params.cwd,
                                path=(params.env or {}).get("PATH"), env=params.env)
        hosts = list(getattr(cfg, "network", None) or [])
        if hosts:
            proxy = _proxy(name, hosts, uid, on_close)
        policy = CommandPolicy(runtime=tuple(runtime),
                               read_only_paths=listed(cfg.read_only_paths),
                               writable_paths=listed(cfg.writable_paths),
                               env=dict(params.env or {}), uid=uid,
                               egress_socket=proxy.socket_path if proxy else None)
        full = command_argv(mechanism, argv, policy, cwd=params.cwd or os.getcwd())
    except CommandNotFound as exc:
        raise ServerSetupError(str(exc)) from None
    except (SandboxResolveError, PathProblem) as exc:
        raise ServerSetupError(f"{exc}; {fix}" if isinstance(exc, SandboxResolveError) else
                               f"MCP server {name!r}: {exc}") from None
    return StdioServerParameters(command=full[0], args=full[1:], env={}, cwd="/")


def _proxy(name: str, hosts: list[str], uid: int, on_close: Any) -> Any:
    """The network proxy of a server with hosts in `network`, its end registered."""
    from jarvis.mcp.errors import ServerSetupError
    from jarvis.sandbox.netproxy import EgressProxy, EntryError

    if on_close is None:
        raise ServerSetupError(f"MCP server {name!r}: no way to end its network proxy")
    try:
        proxy = EgressProxy(name, hosts, owner=(uid, uid) if os.geteuid() == 0 else None)
    except EntryError as exc:
        raise ServerSetupError(f"MCP server {name!r}: {exc}; fix `network` of "
                               f"[mcp.servers.{name}]") from None
    on_close(proxy.close)
    return proxy


def unsandboxed(config: Any) -> list[str]:
    """The enabled stdio servers of a JarvisConfig that run with the person's full rights
    (`sandbox = false`), for `jarvis doctor`."""
    return [name for name, server in config.mcp.servers.items()
            if server.enabled and server.command and not server.sandbox]
