"""What of the interpreter's installation a sandbox needs: the shared libraries it loads.

A sandbox shows the interpreter, its standard library, the allowed site-packages and, from
the interpreter's own prefix, only the shared libraries the interpreter and those extension
modules load from there (found through their ELF RPATH/RUNPATH). Not the whole prefix: in a
conda environment that folder holds conda-meta/ (where `conda env config vars set` keeps
keys) and the activation scripts. Libraries in the system folders come with those mounts.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterable

# System folders the dynamic loader and the interpreter need (merged-/usr symlinks or dirs):
# every sandbox shows them whole.
SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin")
_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NEEDED, _DT_STRTAB, _DT_RPATH, _DT_RUNPATH = 1, 5, 15, 29
# Enough for any real extension tree; a folder past it is scanned no further (its modules
# then find only the libraries found so far, and fail to import loudly in the sandbox).
MAX_SCANNED = 20_000


def elf_dependencies(path: str) -> tuple[list[str], list[str]]:
    """The libraries a 64-bit little-endian ELF file names (DT_NEEDED) and the folders it
    asks the loader to search (RPATH/RUNPATH, $ORIGIN expanded); ([], []) for anything
    else."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _parse(data, os.path.dirname(os.path.realpath(path)))
    except (OSError, ValueError, struct.error, IndexError):
        return [], []


def _parse(data: mmap.mmap, origin: str) -> tuple[list[str], list[str]]:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return [], []
    phoff, = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    loads, dynamic = [], None
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from(
            "<IIQQQQ", data, phoff + i * phentsize)
        if p_type == _PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == _PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return [], []
    entries = []
    for at in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        tag, value = struct.unpack_from("<qQ", data, at)
        if tag == 0:
            break
        entries.append((tag, value))
    strtab = next((v for t, v in entries if t == _DT_STRTAB), None)
    base = next((off + strtab - vaddr for vaddr, off, size in loads
                 if strtab is not None and vaddr <= strtab < vaddr + size), None)
    if base is None:
        return [], []

    def string(offset: int) -> str:
        end = data.find(b"\0", base + offset)
        return data[base + offset:end].decode("utf-8", "surrogateescape")

    needed = [string(v) for t, v in entries if t == _DT_NEEDED]
    folders = []
    for tag, value in entries:
        if tag in (_DT_RPATH, _DT_RUNPATH):
            for folder in string(value).split(":"):
                folder = folder.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)
                if folder:
                    folders.append(os.path.normpath(folder))
    return needed, folders


def shared_libraries(objects: Iterable[str], extra_folders: Iterable[str] = ()) -> list[str]:
    """Every library file the `objects` (and, in turn, those libraries) load from the folders
    their RPATH/RUNPATH (or `extra_folders`) name. System folders are the caller's to drop."""
    search = list(dict.fromkeys(extra_folders))
    found: dict[str, None] = {}
    todo = list(dict.fromkeys(objects))
    seen: set[str] = set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        needed, folders = elf_dependencies(current)
        for folder in folders:
            if folder not in search:
                search.append(folder)
        for name in needed:
            for folder in (*folders, *search):
                candidate = os.path.join(folder, name)
                if os.path.isfile(candidate):
                    if candidate not in found:
                        found[candidate] = None
                        todo.append(candidate)
                    break
    return list(found)


def extension_modules(folders: Iterable[str]) -> list[str]:
    """The compiled modules (*.so) under `folders`, at most MAX_SCANNED files looked at."""
    found, looked = [], 0
    for top in folders:
        for folder, _dirs, files in os.walk(top):
            looked += len(files)
            found += [os.path.join(folder, f) for f in files if ".so" in f]
            if looked > MAX_SCANNED:
                return found
    return found


def interpreter_libraries(executable: str, stdlib: list[str], packages: list[str],
                          libdir: str) -> list[str]:
    """The libraries a Python interpreter loads from its prefix: for itself and its
    lib-dynload modules; for the extension modules of `packages` too (a conda numpy, its
    BLAS) only when the prefix's `libdir` has libraries nothing loaded yet (walking
    site-packages costs ~30 ms here)."""
    search = [libdir] if os.path.isdir(libdir) else []
    objects = [executable, *extension_modules(os.path.join(f, "lib-dynload") for f in stdlib)]
    libraries = shared_libraries(objects, search)
    real = os.path.realpath(libdir)
    system = any(real == d or real.startswith(d + "/") for d in SYSTEM_DIRS)
    if packages and search and not system and _more_libraries(libdir, libraries):
        libraries = shared_libraries([*objects, *extension_modules(packages)], search)
    return libraries


def _more_libraries(folder: str, found: list[str]) -> bool:
    known = {os.path.realpath(p) for p in found}
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    # libpython3.so, the stable ABI's stub, is loaded by nothing here
    return any(".so" in name and not name.startswith("libpython")
               and os.path.realpath(os.path.join(folder, name)) not in known for name in names)
