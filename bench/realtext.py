"""Real text for the retrieval benchmark: documentation that is already on this machine.

In order of preference, until the wanted number of chunks is reached:
1. the docstrings of every Python module of the running interpreter (its standard library and
   site-packages, the virtualenv's too), one document per module: a `#` heading with the
   module's name, then each documented class and function as a `##` heading with its
   docstring (what `pydoc` shows);
2. the `.rst`, `.md` and `.txt` files in those trees (package documentation, READMEs);
3. the text in /usr/share/doc (Debian READMEs, changelogs, also gzip-compressed).

Identical documents are kept once (licences are copied into many packages). Each source is
shuffled with the seed, so a smaller corpus is a random sample, not the first modules of the
alphabet. Everything is chunked as `jarvis memory index` does (1000 characters, 100 shared).
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import os
import random
import re
import site
import sys
import sysconfig
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

TEXT_SUFFIXES = (".rst", ".md", ".txt")
SKIP_DIRS = {"__pycache__", "node_modules", ".git"}
MAX_FILE_BYTES = 2_000_000


@dataclass(slots=True)
class Document:
    source: str
    text: str
    kind: str  # "docstrings", "python docs" or "usr/share/doc"


def python_trees() -> list[Path]:
    """The standard library and every site-packages folder of this interpreter."""
    paths = [sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
             sysconfig.get_paths()["platlib"], *site.getsitepackages()]
    base = getattr(sys, "base_prefix", sys.prefix)
    paths.append(sysconfig.get_paths(vars={"base": base, "platbase": base})["purelib"])
    seen: list[Path] = []
    for p in paths:
        path = Path(p).resolve()
        if path.is_dir() and not any(path == s or path.is_relative_to(s) for s in seen):
            seen = [s for s in seen if not s.is_relative_to(path)] + [path]
    return sorted(seen)


def _walk(root: Path) -> Iterator[Path]:
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(files):
            path = Path(dirpath, name)
            if not path.is_symlink():
                yield path


def module_docstrings(path: Path, root: Path) -> str:
    """The docstrings of one Python file as Markdown-like text, '' if it has none."""
    try:
        data = path.read_bytes()
        if len(data) > MAX_FILE_BYTES:
            return ""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(data.decode("utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError):
        return ""
    parts_of = path.relative_to(root).with_suffix("").parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts_of:
            parts_of = parts_of[len(parts_of) - parts_of[::-1].index(marker):]
    module = ".".join(p for p in parts_of if p != "__init__") or path.stem
    parts: list[str] = []
    doc = ast.get_docstring(tree)
    if doc:
        parts.append(doc)

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                text = ast.get_docstring(child)
                if text:
                    parts.append(f"## {name}\n\n{text}")
                if isinstance(child, ast.ClassDef):
                    visit(child, name + ".")

    visit(tree, "")
    if not parts:
        return ""
    return f"# {module}\n\n" + "\n\n".join(parts) + "\n"


def _read_text(path: Path) -> str:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return ""
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)[:MAX_FILE_BYTES]
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
        return ""
    return "" if "\x00" in text else text


def python_documents(trees: list[Path]) -> Iterator[Document]:
    for root in trees:
        for path in _walk(root):
            if path.suffix == ".py":
                text = module_docstrings(path, root)
                if text:
                    yield Document(str(path), text, "docstrings")
            elif path.suffix.lower() in TEXT_SUFFIXES and ".dist-info" not in str(path):
                text = _read_text(path)
                if text.strip():
                    yield Document(str(path), text, "python docs")


def share_doc_documents(root: Path = Path("/usr/share/doc")) -> Iterator[Document]:
    if not root.is_dir():
        return
    for path in _walk(root):
        name = path.name.lower()
        if name == "copyright" or not (name.endswith(TEXT_SUFFIXES) or name.endswith(".gz")
                                       or "readme" in name or "changelog" in name):
            continue
        text = _read_text(path)
        if text.strip():
            yield Document(str(path), text, "usr/share/doc")


def collect(chunks: int, seed: int, chunk_size: int = 1000, overlap: int = 100
            ) -> tuple[list[Document], dict[str, tuple[int, int]]]:
    """Documents holding about `chunks` chunks, and per kind (documents, characters)."""
    from jarvis.memory.chunking import chunk_text

    rng = random.Random(seed)
    hashes: set[bytes] = set()
    out: list[Document] = []
    kinds: dict[str, tuple[int, int]] = {}
    total = 0
    for group in (lambda: python_documents(python_trees()), share_doc_documents):
        docs = list(group())
        rng.shuffle(docs)
        for doc in docs:
            digest = hashlib.sha256(doc.text.encode("utf-8", "surrogatepass")).digest()
            if digest in hashes:
                continue
            hashes.add(digest)
            n = len(chunk_text(doc.text, chunk_size, overlap))
            if not n:
                continue
            out.append(doc)
            total += n
            count, chars = kinds.get(doc.kind, (0, 0))
            kinds[doc.kind] = (count + 1, chars + len(doc.text))
            if total >= chunks:
                return out, kinds
    return out, kinds


# --- queries drawn from the corpus -------------------------------------------------------
_HEADING_MD = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_HEADING_RST = re.compile(r"^([^\n]{3,80})\n([=\-~^\"'`#*+])\2{2,}\s*$", re.MULTILINE)
_SENTENCE = re.compile(r"(?:^|(?<=[.!?]\s))([A-Z][^.!?\n]{15,160}[.!?])", re.MULTILINE)
_WORD = re.compile(r"[^\W_]+")


def headings(text: str) -> list[str]:
    found = [m.group(1) for m in _HEADING_MD.finditer(text)]
    found += [m.group(1) for m in _HEADING_RST.finditer(text)
              if len(m.group(0).splitlines()[1].strip()) >= len(m.group(1).strip()) - 2]
    return [h.strip() for h in found if len(_WORD.findall(h)) >= 1]


def sentences(text: str) -> list[str]:
    return [m.group(1) for m in _SENTENCE.finditer(text)
            if 4 <= len(_WORD.findall(m.group(1))) <= 30]
