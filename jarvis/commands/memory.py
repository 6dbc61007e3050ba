"""`jarvis memory`: index files into memory, search it, show stats, forget sources."""

from __future__ import annotations

import os
import sys
import time
from typing import Any, TextIO

import click

from jarvis.commands._common import Group, echo_json, load_cli_config


class ProgressBar:
    """A one-line progress bar on stderr, redrawn at most 10 times a second.

    Shown when stderr is a terminal (or when forced); it appears only once a job has run for
    `delay` seconds, so quick jobs print nothing but their summary.
    """

    def __init__(self, stream: TextIO, enabled: bool, delay: float = 0.5, width: int = 30) -> None:
        self.stream = stream
        self.enabled = enabled
        self.delay = delay
        self.width = width
        self.started = time.monotonic()
        self.last_draw = 0.0
        self.drawn = False

    def __call__(self, done: int, total: int, path: str) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.started < self.delay or (now - self.last_draw < 0.1 and done < total):
            return
        self.last_draw = now
        filled = int(self.width * done / total) if total else self.width
        name = os.path.basename(path)[:30]
        self.stream.write(f"\r[{'#' * filled}{'.' * (self.width - filled)}] {done}/{total} files "
                          f"{now - self.started:5.1f}s {name:<30}")
        self.stream.flush()
        self.drawn = True

    def finish(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _open(ctx: click.Context, create: bool = False) -> Any:
    from jarvis.errors import UserError
    from jarvis.memory import open_memory

    config = load_cli_config()
    db = ctx.obj.get("memory_db") if ctx.obj else None
    if db is not None and not create and not os.path.exists(os.path.expanduser(db)):
        # Reading a database that is not there would create an empty one: a typo'd --db
        # then looks like "memory is empty" instead of the mistake it is.
        raise UserError(f"no memory database at {db}; check the path, or create it with "
                        f"`jarvis memory --db {db} index PATH`")
    return config, open_memory(config, db_path=db)


@click.group(cls=Group)
@click.option("--db", "db_path", type=click.Path(dir_okay=False),
              help="Memory database (default: memory.db_path from config, else "
                   "$JARVIS_HOME/memory.db).")
@click.pass_context
def memory(ctx: click.Context, db_path: str | None) -> None:
    """Index files into memory; search it, show stats, forget sources.

    \b
    Examples:
      jarvis memory index ~/notes README.md
      jarvis memory search "quarterly planning" -k 3
      jarvis memory stats
      jarvis memory forget ~/notes/old.md
    """
    ctx.ensure_object(dict)["memory_db"] = db_path


@memory.command("index")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--chunk-size", type=int, default=None,
              help="Characters per chunk (default: memory.chunk_size, 1000).")
@click.option("--overlap", type=int, default=None,
              help="Characters shared by consecutive chunks (default: memory.chunk_overlap, 100).")
@click.option("--max-file-bytes", type=click.IntRange(1), default=None,
              help="Skip files larger than this (default: memory.max_file_bytes, 10 MB).")
@click.option("--progress/--no-progress", default=None,
              help="Show a progress bar on stderr (default: when stderr is a terminal).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_context
def index_cmd(ctx: click.Context, paths: tuple[str, ...], chunk_size: int | None,
              overlap: int | None, max_file_bytes: int | None, progress: bool | None,
              as_json: bool) -> None:
    """Index files and folders (text, Markdown, source code) into memory.

    Folders are walked recursively, skipping hidden entries and tool folders (.git,
    node_modules, .venv, __pycache__). Binary files are skipped and counted. Files unchanged
    since the last run are skipped (by content hash); changed files replace their old
    chunks; files gone from an indexed folder are removed from memory.
    """
    from jarvis.memory.indexer import collect, index_paths

    collect(paths)  # a missing path fails before the database is even opened
    config, store = _open(ctx, create=True)
    if max_file_bytes is None:
        max_file_bytes = config.memory.max_file_bytes
    bar = ProgressBar(sys.stderr, sys.stderr.isatty() if progress is None else progress,
                      delay=0.5 if progress is None else 0.0)
    try:
        summary = index_paths(store, paths, chunk_size=chunk_size, chunk_overlap=overlap,
                              max_file_bytes=max_file_bytes, progress=bar)
    finally:
        bar.finish()
        store.close()
    if as_json:
        echo_json(summary.to_dict())
        return
    click.echo(summary.describe())
    for message in summary.errors:
        click.echo(f"  failed: {message}", err=True)


@memory.command("search")
@click.argument("query")
@click.option("-n", "--limit", "-k", "--top-k", "top_k", type=click.IntRange(1, 100), default=5,
              show_default=True, help="How many results (-k/--top-k are older names).")
@click.option("--source", default=None, help="Only results from this source (or folder).")
@click.option("--full", is_flag=True, help="Print each hit's whole chunk, not a snippet.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.pass_context
def search_cmd(ctx: click.Context, query: str, top_k: int, source: str | None, full: bool,
               as_json: bool) -> None:
    """Search memory for QUERY (plain text; no search syntax needed or used).

    Each hit is its citation and a snippet around the match, the matched words highlighted on
    a terminal; --full prints whole chunks, --json everything."""
    from jarvis.errors import UserError
    from jarvis.memory.query import query_terms

    if not query_terms(query, strict=False):
        raise UserError("the query has no words to search for; give a few key words")
    _, store = _open(ctx)
    try:
        if source is not None and os.path.exists(source):
            source = os.path.realpath(source)  # files are stored by their resolved path
        results = store.retrieve(query, top_k=top_k, source=source)
        empty = not results and store.is_empty()
    finally:
        store.close()
    if as_json:
        echo_json([r.to_dict() for r in results])
        return
    if not results:
        click.echo("Memory is empty: index files with `jarvis memory index PATH`." if empty
                   else f"No matches for {query!r}.")
        return
    from jarvis.core.terminal import paint, visible
    from jarvis.memory.snippets import highlighted, snippet

    for number, r in enumerate(results, 1):
        # Who wrote it: a model's note shows its label as a label, never as a file.
        click.echo(visible(f"[{number}] {r.citation}  [{r.origin}]  score {r.score:.3g}"))
        if full:
            click.echo("    " + visible(r.content).replace("\n", "\n    "))
            click.echo("")
            continue
        text, spans = snippet(r.content, query)
        # Indexed files may hold escape sequences: shown as escapes, the matches highlighted.
        click.echo("    " + highlighted(text, spans, lambda word: paint(
            visible(word), "bold", "yellow", stream=sys.stdout), plain=visible))


@memory.command("stats")
@click.option("--sources", "show_sources", is_flag=True, help="Also list every source.")
@click.option("--json", "as_json", is_flag=True, help="Print the stats as JSON.")
@click.pass_context
def stats_cmd(ctx: click.Context, show_sources: bool, as_json: bool) -> None:
    """Show what memory holds: documents, files, chunks, sources and size."""
    _, store = _open(ctx)
    try:
        stats = store.stats()
        if show_sources:
            stats["source_list"] = store.sources()
    finally:
        store.close()
    if as_json:
        echo_json(stats)
        return
    click.echo(f"database:  {stats['db_path']} ({stats['db_bytes'] / 1e6:.1f} MB)")
    click.echo(f"documents: {stats['documents']} ({_plural(stats['files'], 'indexed file')})")
    click.echo(f"chunks:    {stats['chunks']}")
    click.echo(f"sources:   {stats['sources']}")
    click.echo(f"text:      {_plural(stats['chars'], 'character')}")
    writers = stats.get("written_by") or {}
    if writers:
        click.echo("written by: " + ", ".join(f"{name} {count}" for name, count in writers.items()))
    for row in stats.get("source_list", []):
        click.echo(f"  {row['chunks']:>7} {'chunk ' if row['chunks'] == 1 else 'chunks'}  "
                   f"{row['source'] or '(no source)'}")


@memory.command("forget")
@click.argument("source")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def forget_cmd(ctx: click.Context, source: str, as_json: bool) -> None:
    """Remove everything stored from SOURCE (a source name, a file, or a folder's files)."""
    from jarvis.errors import UserError

    _, store = _open(ctx)
    try:
        removed = store.delete_source(source)
        resolved = os.path.realpath(os.path.expanduser(source))
        if not removed and resolved != source:
            # Files are stored by resolved path; this also works for files already deleted.
            removed = store.delete_source(resolved)
    finally:
        store.close()
    if not removed:
        raise UserError(f"nothing in memory comes from {source!r}; see `jarvis memory stats "
                        f"--sources` for what is stored")
    if as_json:
        echo_json({"source": source, "removed_documents": removed})
        return
    click.echo(f"Forgot {removed} document{'s' if removed != 1 else ''} from {source}.")
