"""Indexing files and folders into a SQLiteMemory.

Text files (prose, Markdown, source code: anything that is UTF-8 without NUL bytes) are
chunked and stored with their resolved path as the source. A file whose content hash has not
changed since it was last indexed is skipped; a file that changed replaces its old chunks; a
file that vanished from an indexed folder is removed from memory. Binary and oversized files
are skipped and counted. Hidden entries and tool folders (.git, node_modules, .venv, ...)
inside a folder are not walked.

Every file is read through a path policy (`jarvis.security.paths`): checked on its resolved
path, opened beneath its allowed folder without following symlinks, re-checked with fstat.
A person's `jarvis memory index PATH` reads the paths given: a file named is read whatever it
is, a folder's files under the secret rules (what is indexed, a model can find with
memory_search), by name and by content: a private key or credentials file under any name is
skipped and counted (`skipped_secret`); the memory_index tool passes the policy of the
tool (workspace plus allowed folders, secrets refused).

Any backend with the memory protocol (`store`, `retrieve`, ...) can be indexed into: one
without SQLiteMemory's file bookkeeping gets each file through `store(text, source=path)`,
re-stored on every run (it cannot tell unchanged files, nor drop vanished ones).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jarvis.errors import UserError
from jarvis.memory.chunking import chunk_text
from jarvis.memory.sqlite import FileDocument, SQLiteMemory
from jarvis.security.paths import (
    FileTooLarge,
    NotAFile,
    PathChanged,
    PathDenied,
    PathPolicy,
    SecretContent,
    jarvis_secret_files,
)

MAX_FILE_BYTES = 10_000_000
SKIP_DIRS = frozenset({"node_modules", "__pycache__", "venv", "site-packages", "dist-packages"})
# Files are written in batches: short transactions keep other writers waiting briefly,
# big enough ones keep the per-commit cost small.
BATCH_CHUNKS = 2_000
BATCH_FILES = 200
MAX_ERRORS_KEPT = 20
# With a file limit (the memory_index tool) the walk is bounded by folder entries too: a tree
# of empty folders or a folder of a million hidden files holds no file to count, yet costs a
# walk of all of it.
MAX_WALK_ENTRIES = 20_000
# ...and by depth: every file's path is resolved component by component (a symlink on the way
# must be seen), so a file's cost grows with its depth and a chain of 2,000 one-letter folders
# (each with a file) cost 2,000 x 2,000 lstat calls: 167 s for one memory_index call. Deeper
# folders are not walked (and counted).
MAX_WALK_DEPTH = 40

Progress = Callable[[int, int, str], None]


@dataclass(slots=True)
class IndexSummary:
    """What an index job did."""

    files_seen: int = 0
    indexed: int = 0
    unchanged: int = 0
    skipped_binary: int = 0
    skipped_large: int = 0
    skipped_denied: int = 0
    skipped_secret: int = 0
    skipped_deep: int = 0
    removed: int = 0
    chunks_added: int = 0
    bytes_indexed: int = 0
    error_count: int = 0
    errors: list[str] = field(default_factory=list)
    stopped_early: bool = False
    seconds: float = 0.0

    def error(self, message: str) -> None:
        self.error_count += 1
        if len(self.errors) < MAX_ERRORS_KEPT:
            self.errors.append(message)

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}  # type: ignore[attr-defined]

    def describe(self) -> str:
        """One human line: 'Indexed 3 files (12 chunks); 1 unchanged; 2 binary skipped ...'."""
        parts = [f"Indexed {self.indexed} file{'s' if self.indexed != 1 else ''} "
                 f"({self.chunks_added} chunk{'s' if self.chunks_added != 1 else ''})"]
        for count, label in ((self.unchanged, "unchanged"),
                             (self.skipped_binary, "binary or non-UTF-8 skipped"),
                             (self.skipped_large, "too large skipped"),
                             (self.skipped_denied, "refused by the path policy (outside the allowed "
                                                        "folders, secrets, hard links)"),
                             (self.skipped_secret, "skipped because the content looks like a "
                                                   "private key or credentials (secrets are "
                                                   "never indexed; an older copy is dropped)"),
                             (self.skipped_deep, f"folders more than {MAX_WALK_DEPTH} levels "
                                                 f"deep not walked"),
                             (self.removed, "removed (gone from disk, or no longer indexable)"),
                             (self.error_count, "failed")):
            if count:
                parts.append(f"{count} {label}")
        line = "; ".join(parts) + f" in {self.seconds:.1f} s."
        if self.stopped_early:
            line += (" Stopped at the file limit (or the limit on folder entries "
                     "walked); index the rest in another run or a smaller folder.")
        return line


def _walk(root: Path, summary: IndexSummary, max_entries: int | None = None
          ) -> Iterator[Path]:
    """Files under `root`, sorted, folder by folder (top down), without hidden entries or
    tool folders; symlinked folders are not followed (a loop or a link out of the tree cannot
    widen the walk). After `max_entries` folder entries the walk stops (stopped_early), and
    with a limit, folders more than MAX_WALK_DEPTH levels down are not walked (skipped_deep)."""
    seen = 0
    stack = [(str(root), 0)]
    while stack:
        folder, depth = stack.pop()
        entries = []
        try:
            with os.scandir(folder) as listing:
                for entry in listing:
                    seen += 1
                    if max_entries is not None and seen > max_entries:
                        summary.stopped_early = True
                        return
                    entries.append(entry)
        except OSError as exc:  # an unreadable folder is reported, not silently missed
            summary.error(f"{exc.filename or folder}: {exc.strerror or exc}")
            continue
        dirs, files = [], []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                is_dir = entry.is_dir()
                linked = entry.is_symlink()
            except OSError:  # e.g. a symlink loop: reading it reports the error
                is_dir = linked = False
            if not is_dir:
                files.append(entry.path)  # a symlink to a file: the policy checks its target
            elif not linked and entry.name not in SKIP_DIRS:
                if max_entries is not None and depth >= MAX_WALK_DEPTH:
                    summary.skipped_deep += 1
                    continue
                dirs.append(entry.path)
        for name in sorted(files):
            yield Path(name)
        stack.extend((d, depth + 1) for d in sorted(dirs, reverse=True))


def collect(paths: Iterable[str | os.PathLike[str]]) -> list[tuple[Path, bool]]:
    """Resolve the given paths: (resolved path, is_folder). A missing path is a UserError,
    raised before anything is written."""
    roots = []
    for raw in paths:
        text = os.fspath(raw)
        if not text or "\x00" in text:
            raise UserError(f"not a valid path: {text!r}")
        path = Path(os.path.realpath(os.path.expanduser(text)))
        if not path.exists():
            raise UserError(f"path not found: {text}")
        if not (path.is_dir() or path.is_file()):
            raise UserError(f"{text} is not a regular file or a folder")
        roots.append((path, path.is_dir()))
    if not roots:
        raise UserError("give at least one file or folder to index")
    return roots


class _StoreOnly:
    """SQLiteMemory's indexing surface over a backend that has only the memory protocol."""

    def __init__(self, backend: Any) -> None:
        from jarvis.memory.chunking import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE

        self.backend = backend
        self.chunk_size = getattr(backend, "chunk_size", DEFAULT_CHUNK_SIZE)
        self.chunk_overlap = getattr(backend, "chunk_overlap", DEFAULT_CHUNK_OVERLAP)

    def file_hash(self, source: str) -> None:
        return None  # no bookkeeping: every file counts as new

    def replace_files(self, files: list[FileDocument]) -> None:
        for f in files:
            f.doc_id = str(self.backend.store(f.content, source=f.source,
                                              metadata=dict(f.metadata, content_hash=f.content_hash)))

    def remove_missing_files(self, folder: str, keep: set[str]) -> int:
        return 0


def index_paths(memory: SQLiteMemory | Any, paths: Iterable[str | os.PathLike[str]], *,
                chunk_size: int | None = None, chunk_overlap: int | None = None,
                max_file_bytes: int = MAX_FILE_BYTES, allowed_dirs: list[Path] | None = None,
                max_files: int | None = None, progress: Progress | None = None,
                policy: PathPolicy | None = None) -> IndexSummary:
    """Index files and folders into `memory`; return what was done.

    Args:
        chunk_size, chunk_overlap: chunking (default: the store's settings).
        max_file_bytes: larger files are skipped and counted.
        allowed_dirs: folders files must lie in, secrets refused below them; a symlink
            that points outside them is skipped and counted. None: the given paths
            themselves (a person's `jarvis memory index`): files named are read, whatever
            they are; in given folders the secret rules apply (hidden files, keys,
            credential files, hard links) and symlinks out of the folder are skipped, since
            a model can later find whatever is indexed with memory_search.
        policy: the path policy to read through (wins over `allowed_dirs`).
        max_files: stop after this many files (the summary says so).
        progress: called as progress(done, total, path) after each file.
    """
    started = time.perf_counter()
    if not hasattr(memory, "replace_files"):
        if not callable(getattr(memory, "store", None)):
            raise UserError(f"{type(memory).__name__} is not a memory backend (it has no store())")
        memory = _StoreOnly(memory)
    size = memory.chunk_size if chunk_size is None else chunk_size
    overlap = memory.chunk_overlap if chunk_overlap is None else chunk_overlap
    from jarvis.memory.chunking import check_chunking

    check_chunking(size, overlap)
    roots = collect(paths)
    if policy is None and allowed_dirs is not None:
        policy = PathPolicy(allowed_dirs)
        policy.secret_files.update(jarvis_secret_files())
    elif policy is None:
        policy = PathPolicy([r for r, folder in roots if folder],
                            [r for r, folder in roots if not folder], setting="the command line",
                            outside_hint="name it on the command line to index it")
        # A person's `jarvis memory index .` in the workspace indexed config.toml, and a
        # model's memory_search then read its MCP tokens (file_read refuses that file).
        policy.secret_files.update(jarvis_secret_files())
    for root, _ in roots:
        policy.check(str(root))  # PathDenied (a PermissionError) before anything is read
    # Listing first gives the progress bar its total; it is cheap next to reading files.
    # With a file limit the walk stops there too: a model asking to index "/" costs a
    # bounded walk, not a scan of the whole disk.
    summary = IndexSummary()
    entries = None if max_files is None else max(MAX_WALK_ENTRIES, 10 * max_files)
    listed = itertools.chain.from_iterable(_walk(r, summary, entries) if d else [r]
                                           for r, d in roots)
    files = list(listed if max_files is None else itertools.islice(listed, max_files + 1))
    if max_files is not None and len(files) > max_files:
        files = files[:max_files]
        summary.stopped_early = True
    kept: set[str] = set()
    batch: list[FileDocument] = []
    batch_chunks = 0

    def flush() -> None:
        nonlocal batch, batch_chunks
        memory.replace_files(batch)
        batch, batch_chunks = [], 0

    for done, path in enumerate(files, 1):
        summary.files_seen += 1
        try:
            status, doc = _prepare(memory, path, size, overlap, max_file_bytes, policy,
                                   summary)
        except OSError as exc:
            summary.error(f"{path}: {exc.strerror or exc}")
            status, doc = "failed", None
            kept.add(os.path.realpath(path))  # unreadable now is not gone: keep what memory has
        if status == "refused":
            # On disk but refused to this caller (a secret, a hard link, a race): keep what
            # memory has, as for an unreadable file. (A file whose content is a secret is
            # "skipped": what memory has of it goes.)
            kept.add(os.path.realpath(path))
        elif status == "unchanged" and doc is not None:
            kept.add(doc.source)
        elif doc is not None and doc.source not in kept:  # a file reached twice counts once
            kept.add(doc.source)
            batch.append(doc)
            batch_chunks += len(doc.chunks)
            summary.indexed += 1
            summary.chunks_added += len(doc.chunks)
            summary.bytes_indexed += doc.metadata.get("bytes", 0)
            if batch_chunks >= BATCH_CHUNKS or len(batch) >= BATCH_FILES:
                flush()
        if progress is not None:
            progress(done, len(files), str(path))
    flush()
    if not summary.stopped_early:
        for root, is_folder in roots:
            if is_folder:
                summary.removed += memory.remove_missing_files(str(root), kept)
    summary.seconds = time.perf_counter() - started
    return summary


def _prepare(memory: SQLiteMemory, path: Path, size: int, overlap: int, max_bytes: int,
             policy: PathPolicy, summary: IndexSummary
             ) -> tuple[str, FileDocument | None]:
    """Read and chunk one file: ("new", doc), ("unchanged", doc without chunks), or
    ("skipped", None) with the reason counted in `summary`, or ("refused", None): on disk
    but not for this policy (kept in memory)."""
    try:
        opened = policy.read(str(path), max_bytes)
    except SecretContent:
        # Not kept: a copy indexed before (by an older jarvis, or before the key was pasted
        # into the file) leaves memory with the folder's next index.
        summary.skipped_secret += 1
        return "skipped", None
    except PathDenied:
        summary.skipped_denied += 1
        return "refused", None
    except NotAFile:
        return "skipped", None
    except FileTooLarge:
        summary.skipped_large += 1
        return "skipped", None
    except PathChanged as exc:
        summary.error(str(exc))
        return "refused", None
    data, real, info = opened.data, opened.path, opened.info
    if b"\x00" in data:
        summary.skipped_binary += 1
        return "skipped", None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        summary.skipped_binary += 1
        return "skipped", None
    digest = hashlib.sha256(data).hexdigest()
    source = str(real)
    known = memory.file_hash(source)
    if known is not None and known[1] == digest:
        summary.unchanged += 1
        return "unchanged", FileDocument(source, "", [], digest)
    metadata = {"path": source, "suffix": real.suffix.lower(), "mtime": info.st_mtime,
                "bytes": len(data)}
    return "new", FileDocument(source=source, content=text,
                               chunks=chunk_text(text, size, overlap), content_hash=digest,
                               metadata=metadata)
