"""Split text into overlapping chunks that end at natural breaks where possible."""

from __future__ import annotations

from dataclasses import dataclass

from jarvis.errors import UserError

DEFAULT_CHUNK_SIZE = 1000
DEFAULT_CHUNK_OVERLAP = 100

# Break preferences, best first: a blank line, a line end, a sentence end, any space.
_BREAKS = ("\n\n", "\n", ". ", "? ", "! ", " ")


@dataclass(slots=True, frozen=True)
class Chunk:
    """A piece of a document: its text, position (0-based) and where it sits in the original
    (character offsets `start`..`end`, 1-based lines `line_start`..`line_end`)."""

    text: str
    index: int
    start: int
    end: int
    line_start: int
    line_end: int


def check_chunking(size: int, overlap: int) -> None:
    """Raise UserError for chunk settings that cannot work."""
    if not isinstance(size, int) or size < 50:
        raise UserError(f"chunk size must be an integer of at least 50 characters, got {size!r}")
    if not isinstance(overlap, int) or overlap < 0 or overlap >= size // 2:
        raise UserError(f"chunk overlap must be between 0 and half the chunk size ({size // 2}), "
                        f"got {overlap!r}; set memory.chunk_overlap lower")


def _break_at(text: str, start: int, hard_end: int) -> int:
    """The end of a chunk that starts at `start` and may reach `hard_end`: the last natural
    break in the second half of the window, else `hard_end`."""
    floor = start + (hard_end - start) // 2
    for sep in _BREAKS:
        pos = text.rfind(sep, floor, hard_end)
        if pos != -1:
            return pos + len(sep)
    return hard_end


def chunk_text(text: str, size: int = DEFAULT_CHUNK_SIZE,
               overlap: int = DEFAULT_CHUNK_OVERLAP) -> list[Chunk]:
    """Cut `text` into chunks of at most `size` characters; consecutive chunks share about
    `overlap` characters so a sentence cut at a boundary is still whole in one of them.
    Empty or blank text gives no chunks."""
    check_chunking(size, overlap)
    if not text.strip():
        return []
    chunks: list[Chunk] = []
    n = len(text)
    start = 0
    line = 1  # line number at `start`
    while start < n:
        hard_end = min(start + size, n)
        end = n if hard_end == n else _break_at(text, start, hard_end)
        piece = text[start:end]
        if piece.strip():
            # Trim surrounding blank space but keep offsets and line numbers true.
            lead = len(piece) - len(piece.lstrip())
            body = piece.strip()
            first_line = line + text.count("\n", start, start + lead)
            last_line = first_line + body.count("\n")
            chunks.append(Chunk(body, len(chunks), start + lead, start + lead + len(body),
                                first_line, last_line))
        if end >= n:
            break
        # Step back by the overlap, to the start of a word, but always move forward.
        next_start = max(end - overlap, start + 1)
        if next_start < end:
            space = text.find(" ", next_start, end)
            newline = text.find("\n", next_start, end)
            cuts = [p for p in (space, newline) if p != -1]
            next_start = min(cuts) + 1 if cuts else next_start
        next_start = min(next_start, end)
        line += text.count("\n", start, next_start)
        start = next_start
    return chunks
