"""A local package index for uv, made from what the test extra already installed: no network.

`uvx some-server` installs the server and its dependencies into an environment of uv's own;
the tests must not download them. `wheels_of("mcp-server-time", folder)` writes a wheel for
each distribution of that package's dependency tree as installed in this interpreter (its
files, listed in the distribution's RECORD, packed again with its .dist-info), so uv can run
it offline with `--offline --no-index --find-links folder`.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata as metadata
import io
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def dependency_tree(name: str) -> dict[str, metadata.Distribution]:
    """The installed distributions `name` needs (itself included, extras followed), by
    canonical name."""
    found: dict[str, metadata.Distribution] = {}
    done: set[tuple[str, str]] = set()
    todo = [(name, "")]
    while todo:
        current, extra = todo.pop()
        current = canonicalize_name(current)
        if (current, extra) in done:
            continue
        done.add((current, extra))
        dist = found.setdefault(current, metadata.distribution(current))
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": extra}):
                todo += [(requirement.name, x) for x in ("", *requirement.extras)]
    return found


def _tag(dist: metadata.Distribution) -> str:
    """The wheel's compressed tag set (`py2.py3-none-any`) from its WHEEL file's Tag lines."""
    tags = [line.split(":", 1)[1].strip().split("-")
            for line in (dist.read_text("WHEEL") or "").splitlines() if line.startswith("Tag:")]
    if not tags:
        return "py3-none-any"
    return "-".join(".".join(sorted({tag[i] for tag in tags})) for i in range(3))


def repack(dist: metadata.Distribution, folder: Path) -> Path:
    """One installed distribution as a wheel in `folder` (its files, a fresh RECORD)."""
    name = canonicalize_name(dist.metadata["Name"]).replace("-", "_")
    wheel = folder / f"{name}-{dist.version}-{_tag(dist)}.whl"
    base = Path(dist.locate_file(""))
    info = next(str(f).split("/")[0] for f in dist.files or [] if ".dist-info/" in str(f))
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for entry in dist.files or []:
            path = str(entry)
            if path.startswith("..") or "__pycache__" in path or path == f"{info}/RECORD":
                continue  # console scripts (uv writes its own), bytecode, the old RECORD
            data = (base / path).read_bytes()
            archive.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            writer.writerow([path, f"sha256={digest.decode()}", len(data)])
        writer.writerow([f"{info}/RECORD", "", ""])
        archive.writestr(f"{info}/RECORD", record.getvalue())
    return wheel


def wheels_of(name: str, folder: Path) -> list[Path]:
    """Wheels of `name` and everything it needs, as installed here, written to `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    return [repack(dist, folder) for dist in dependency_tree(name).values()]
