"""Where a tool may open a file: one path policy below every tool that opens a given path.

A `PathPolicy` holds the allowed folders (by default the workspace: the folder of config.toml,
or $JARVIS_HOME without one, plus what the user lists) and the secret paths the user allowed
by name. Checking a path resolves it fully (symlinks and `..`), compares whole components
with the allowed folders, refuses devices and pseudo-files (/proc, /sys, /dev) and refuses
secrets below an allowed folder (dotfiles and dot-folders, private keys, credential files:
`SECRET_RULES`) unless the user listed that path in `allowed_secret_paths`.

Opening does not trust the check: between the check and the open a folder on the way can be
swapped for a symlink. So the file is opened *beneath* its allowed folder without following
any symlink (`jarvis.security.beneath`: openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS
where the kernel has it, else an O_NOFOLLOW walk component by component). A swap in between
makes the open fail and the read is refused; it can never reach a file outside. The opened
file is checked again with fstat (a regular file, within the size limit) before a byte is
read.

A secret under an innocent name (`cp ~/.ssh/id_ed25519 notes.txt`, a kubeconfig saved as
`cluster.yaml`) is recognised by what it holds: where the secret rules apply, every byte read
is checked (`jarvis.security.secret_content`: private keys of every kind, AWS, kubeconfig,
service-account and age keys) and a match is refused (SecretContent) before the text is
returned. The user allows such a file by naming it in `allowed_secret_paths`.

Hard links cannot be told apart by path: `ln ~/.ssh/id_rsa notes.txt` inside the workspace is
the key under an innocent name. So where the secret rules apply, a file with more than one
link (st_nlink > 1, from the fstat) is refused unless its path is in `allowed_secret_paths`.
Not covered: bind mounts of outside folders into an allowed one (that takes root), and relative
paths, which resolve against the current folder.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jarvis.security.beneath import NotAFile, PathChanged, open_beneath

MAX_FILE_BYTES = 1_048_576  # 1 MiB, inclusive: a file of exactly this size is read
MAX_PATH_CHARS = 4_096
PSEUDO_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))

# (pattern, what it protects). Patterns match one path component, case-insensitively;
# the dot rule applies to every component below the allowed folder, the others to the file.
DOT_RULE = (".*", "hidden files and folders (.env, .ssh, .git, .aws, .netrc, .npmrc, ...)")
SECRET_RULES: tuple[tuple[str, str], ...] = (
    ("*.pem", "certificates and private keys"),
    ("*.key", "private keys"),
    ("*.p8", "PKCS#8 private keys (Apple's .p8 keys)"),
    ("*.p12", "key stores"),
    ("*.pfx", "key stores"),
    ("*.jks", "key stores"),
    ("*.keystore", "key stores"),
    ("*.ppk", "PuTTY private keys"),
    ("*.kdbx", "password databases"),
    ("id_rsa*", "SSH keys"),
    ("id_dsa*", "SSH keys"),
    ("id_ecdsa*", "SSH keys"),
    ("id_ed25519*", "SSH keys"),
    ("credentials*.json", "credential files"),
    ("client_secret*.json", "OAuth client secrets"),
    ("service-account*.json", "cloud service-account keys"),
    ("_netrc", "login files"),
    ("*.keytab", "Kerberos keys"),
    ("*.tfstate", "Terraform state (holds secrets in clear)"),
    ("*htpasswd", "password files"),
    ("shadow", "system password hashes"),
    ("gshadow", "system password hashes"),
    ("master.passwd", "system password hashes"),
    ("ssh_host_*_key", "SSH host keys"),
    ("*.env", "environment files (KEY=value secrets, e.g. prod.env)"),
    ("*.tfvars", "Terraform variables (often secrets in clear)"),
    ("secrets.*", "secret files (secrets.yaml, secrets.json, ...)"),
    ("token.json", "OAuth tokens"),
    ("*.ovpn", "VPN profiles (they embed private keys)"),
)
# A copy of a secret is a secret: `server.key~`, `id_rsa.bak`, `cert.pem.orig`, `shadow-`.
BACKUP_SUFFIXES = (".bak", ".backup", ".old", ".orig", ".save", ".sav", ".tmp", ".copy",
                   ".prev", ".swp", ".dist")
_TRAILING = " .~-"

class PathDenied(PermissionError):
    """The policy refuses this path; the message is safe to show a model."""


class SecretContent(PathDenied):
    """The file's content is a secret (a private key, credentials), whatever its name."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class FileTooLarge(ValueError):
    """The file is over the size limit."""

    def __init__(self, message: str, size: int) -> None:
        super().__init__(message)
        self.size = size


@dataclass(frozen=True, slots=True)
class OpenedFile:
    """A file read through the policy: its resolved path, bytes and fstat."""

    path: Path
    data: bytes
    info: os.stat_result


def config_file(config: Any = None) -> Path | None:
    """The config file in use: the given config's, else the one the lookup finds."""
    if config is not None:
        source = getattr(config, "source", None)
        return Path(source) if source is not None else None
    from jarvis.core.config import find_config
    from jarvis.errors import ConfigError

    try:
        found = find_config()
    except ConfigError:
        return None
    return found.resolve() if found is not None else None


def workspace_folder(config: Any = None) -> Path:
    """The workspace: the folder of the config file (the given config's, else the one the
    lookup finds), or $JARVIS_HOME when there is none."""
    from jarvis.core.paths import jarvis_home

    found = config_file(config)
    return found.parent if found is not None else jarvis_home()


def jarvis_secret_files(config: Any = None) -> dict[Path, str]:
    """jarvis's own files that hold secrets, refused by name below any allowed folder: the
    config file in use (MCP env and headers) and $JARVIS_HOME/mcp."""
    from jarvis.core.paths import jarvis_home

    files: dict[Path, str] = {}
    found = config_file(config)
    if found is not None:
        files[Path(os.path.realpath(found))] = (
            "the jarvis config file: it can hold MCP tokens and headers")
    # jarvis.mcp.cache keeps its state there (it sits above this module, so the folder is
    # named here): stdio servers' stderr logs and cached tool lists. Without a config.toml
    # the workspace *is* $JARVIS_HOME.
    files[Path(os.path.realpath(jarvis_home() / "mcp"))] = (
        "jarvis's MCP state: server logs can hold tokens")
    return files


def resolve_dirs(dirs: Iterable[str | os.PathLike[str]] | str | os.PathLike[str] | None,
                 ) -> list[Path] | None:
    """Resolve configured folders once (None stays None)."""
    if dirs is None:
        return None
    if isinstance(dirs, (str, os.PathLike)):
        dirs = [dirs]  # `allowed_dirs = "notes"` means one folder, not one per character
    return [Path(os.path.realpath(os.path.expanduser(os.fspath(d)))) for d in dirs]


_SECRET_RES = [(re.compile(fnmatch.translate(pattern)), pattern, why)
               for pattern, why in SECRET_RULES]


def _folded(name: str) -> str:
    """A name as the rules see it: look-alike characters folded (NFKC: a full-width `．ｅｎｖ`
    is `.env`) and case ignored."""
    return unicodedata.normalize("NFKC", name).casefold()


def _names(name: str) -> Iterator[str]:
    """`name` and the names it is a copy of: trailing dots, spaces, `~` and `-` and backup
    suffixes taken off, one after another (`id_rsa.pem.bak~` -> `id_rsa.pem`)."""
    yield name
    while True:
        shorter = name.rstrip(_TRAILING)
        for suffix in BACKUP_SUFFIXES:
            if shorter.endswith(suffix) and len(shorter) > len(suffix):
                shorter = shorter[:-len(suffix)]
                break
        if shorter == name or not shorter:
            return
        name = shorter
        yield name


def secret_rule(parts: Iterable[str]) -> tuple[str, str] | None:
    """The rule (pattern, what it protects) a relative path matches, or None."""
    parts = [_folded(p) for p in parts]
    for part in parts:
        if part.startswith(".") and part not in (".", ".."):
            return DOT_RULE
    if parts:
        for name in _names(parts[-1]):
            for compiled, pattern, why in _SECRET_RES:
                if compiled.match(name):
                    return pattern, why
    return None


def _copy_of(path: Path, secret: Path) -> bool:
    """Whether `path` is a copy of the secret file `secret` by name, in the same folder: an
    editor's `config.toml~`, a `config.toml.bak`, or the name in another case (the same
    secrets, under a name no exact comparison catches)."""
    if path.parent != secret.parent:
        return False
    wanted = _folded(secret.name)
    return any(name == wanted for name in _names(_folded(path.name)))


def _under(path: str, folder: str) -> bool:
    """Whether `path` is `folder` or inside it, comparing whole components (both resolved
    and absolute); a string test, because pathlib's is_relative_to dominated a read."""
    return path == folder or path.startswith(folder if folder.endswith("/") else folder + "/")


class PathPolicy:
    """Which files may be opened, and the safe way to open them.

    Args:
        roots: resolved-or-not folders files must lie in; None: anywhere (for a person's own
            commands, e.g. `jarvis memory index PATH`: no folder or secret rules then, the
            safe open and pseudo-file refusal still apply).
        secret_paths: files or folders where the secret rules do not apply (and that may be
            read even outside `roots`: the user named them).
        setting: the config table named in refusals, e.g. "[tools.file_read]".
        secrets: whether the secret rules apply (False for the workspace loaders, which read
            the user's own tools/ and agents/ folders).
        outside_hint: what a refusal outside `roots` tells the reader to do.
    """

    def __init__(self, roots: Iterable[str | os.PathLike[str]] | None,
                 secret_paths: Iterable[str | os.PathLike[str]] = (), *,
                 setting: str = "[tools.file_read]", secrets: bool = True,
                 outside_hint: str | None = None) -> None:
        self.unrestricted = roots is None
        self.roots: list[Path] = list(dict.fromkeys(resolve_dirs(list(roots or [])) or []))
        self.secret_paths: list[Path] = resolve_dirs(list(secret_paths)) or []
        self.setting = setting
        self.secrets = secrets
        # Files and folders refused by name as secrets, e.g. the config file (MCP env and
        # headers) and jarvis's MCP state.
        self.secret_files: dict[Path, str] = {}
        self.outside_hint = outside_hint or (f"add a folder to allowed_dirs in {setting} to "
                                             f"allow more")

    @classmethod
    def for_tool(cls, allowed_dirs: Any = None, allowed_secret_paths: Any = None,
                 config: Any = None, *, setting: str = "[tools.file_read]") -> PathPolicy:
        """The default policy of a tool: the workspace plus `allowed_dirs`, secrets refused
        except `allowed_secret_paths`."""
        listed = resolve_dirs(allowed_dirs) or []
        found = config_file(config)
        policy = cls([found.parent if found is not None else workspace_folder(config), *listed],
                     resolve_dirs(allowed_secret_paths) or [], setting=setting)
        policy.secret_files.update(jarvis_secret_files(config))
        return policy

    def describe(self) -> str:
        """'Allowed directories: A, B.' for a tool's description ('' when unrestricted)."""
        if self.unrestricted:
            return ""
        return " Allowed directories: " + ", ".join(str(r) for r in self.roots) + "."

    # --- checking ----------------------------------------------------------------------------
    def check(self, raw: Any) -> Path:
        """Resolve a given path and check it; return the resolved path.

        Raises ValueError for a malformed path and PathDenied (a PermissionError) with a
        message that names the rule and the setting that would allow it.
        """
        return self._locate(_valid(raw))[0]

    def _locate(self, raw: str) -> tuple[Path, Path, tuple[str, ...]]:
        """(resolved path, the folder to open beneath, the components below it) or
        PathDenied."""
        try:
            real = os.path.realpath(os.path.expanduser(raw))
        except OSError:  # a link on the way vanished while it was being read
            raise PathChanged(f"{raw} changed while it was being resolved; try again") from None
        resolved = Path(real)
        if any(_under(real, p) for p in _PSEUDO):
            raise PathDenied(f"{raw} is a device or pseudo-file, not a regular file")
        for secret in self.secret_paths:
            if _under(real, str(secret)):
                base = secret if resolved != secret else secret.parent
                return resolved, base, _parts_below(real, str(base))
        if self.unrestricted:
            return resolved, Path("/"), _parts_below(real, "/")
        inside = [r for r in self.roots if _under(real, str(r))]
        if not inside:
            raise PathDenied(f"access denied or file not found: {raw} (only files below "
                             f"{', '.join(str(r) for r in self.roots)} may be read; "
                             f"{self.outside_hint})")
        root = max(inside, key=lambda r: len(str(r)))  # the deepest: fewest components to check
        parts = _parts_below(real, str(root))
        rule = secret_rule(parts) if self.secrets else None
        if rule is None:
            for secret, why in self.secret_files.items():
                if _under(real, str(secret)) or _copy_of(resolved, secret):
                    rule = (secret.name, why)
                    break
        if rule is not None:
            pattern, why = rule
            raise PathDenied(f"{raw} is refused: it matches the secret rule {pattern!r} "
                             f"({why}); to allow it, add its path to allowed_secret_paths "
                             f"in {self.setting}")
        return resolved, root, parts

    # --- opening -----------------------------------------------------------------------------
    def read(self, raw: Any, max_bytes: int = MAX_FILE_BYTES) -> OpenedFile:
        """Check `raw`, open it beneath its allowed folder and read at most `max_bytes`.

        Raises ValueError (bad path), PathDenied, NotAFile, FileTooLarge, PathChanged or
        OSError (FileNotFoundError, ...).
        """
        text = _valid(raw)
        resolved, root, parts = self._locate(text)
        # A stat first gives the clear answer in the common case ("is a directory") and keeps
        # devices from being opened at all; the fstat below is what is trusted.
        info = os.stat(resolved)
        _check_kind(info, text, max_bytes)
        fd = open_beneath(root, parts)
        try:
            opened = os.fstat(fd)
            _check_kind(opened, text, max_bytes)
            if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
                raise PathChanged(f"{text} changed while it was being opened; try again")
            self._check_links(opened, text, resolved)
            chunks, left = [], max_bytes + 1
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
        finally:
            os.close(fd)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise FileTooLarge(f"{text} is larger than {max_bytes} bytes; the limit is "
                               f"{max_bytes}", len(data))
        self._check_content(data, text, resolved)
        return OpenedFile(resolved, data, opened)

    def _check_content(self, data: bytes, raw: str, resolved: Path) -> None:
        """Refuse a file whose content is a secret, where the secret rules apply: all of what
        was read is checked, which is all a caller can return."""
        if self.unrestricted or not self.secrets:
            return
        if any(_under(str(resolved), str(s)) for s in self.secret_paths):
            return
        from jarvis.security.secret_content import secret_in_bytes

        kind = secret_in_bytes(data)
        if kind is not None:
            raise SecretContent(f"{raw} is refused: it looks like {kind}, and secrets are never "
                                f"read, whatever the file's name; if it is yours to share, add "
                                f"its path to allowed_secret_paths in {self.setting}", kind)


    def _check_links(self, info: os.stat_result, raw: str, resolved: Path) -> None:
        """Refuse a file with more than one hard link where the secret rules apply: its other
        name may be a secret outside the allowed folders (`ln ~/.ssh/id_rsa notes.txt`), and
        no path check can tell. The user allows one by naming it in allowed_secret_paths."""
        if self.unrestricted or not self.secrets or info.st_nlink <= 1:
            return
        if any(_under(str(resolved), str(s)) for s in self.secret_paths):
            return
        raise PathDenied(f"{raw} is refused: it has {info.st_nlink} hard links, and another "
                         f"name for the same file may be a secret outside the allowed folders; "
                         f"to allow it, add its path to allowed_secret_paths in {self.setting}")


_PSEUDO = tuple(str(p) for p in PSEUDO_ROOTS)


def _valid(raw: Any) -> str:
    """The path argument as a string, or ValueError (safe to show a model)."""
    if isinstance(raw, os.PathLike):
        raw = os.fspath(raw)
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError("path must be a non-empty string")
    if len(raw) > MAX_PATH_CHARS or "\x00" in raw:
        raise ValueError("path is not a valid file path")
    return raw


def _parts_below(path: str, folder: str) -> tuple[str, ...]:
    rest = path[len(folder):].lstrip("/") if path != folder else ""
    return tuple(p for p in rest.split("/") if p)


def _check_kind(info: os.stat_result, raw: str, max_bytes: int) -> None:
    if not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise NotAFile(f"{raw} is {kind}")
    if info.st_size > max_bytes:
        raise FileTooLarge(f"{raw} is {info.st_size} bytes; the limit is {max_bytes}",
                           info.st_size)
