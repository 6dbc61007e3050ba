"""Lazy package attributes: names resolved from their module on first access (PEP 562).

Packages use this to keep `import jarvis...` cheap while exposing a full public API.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Callable
from typing import Any


def lazy_getattr(package: str, exports: dict[str, str],
                 namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module `__getattr__` that imports `exports[name]` on first use and caches the value
    in `namespace` (the package's globals()), so later lookups skip it."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__


# One re-entrant lock for first imports of heavy packages (see load_module).
_IMPORTS = threading.RLock()


def load_module(name: str) -> Any:
    """`importlib.import_module(name)` for a heavy third-party package imported on first use
    (httpx, openai, ddgs, trafilatura, lxml, apprise) from code that may run on worker threads.

    Two threads importing different packages that share modules can each hold the import
    lock of a module the other needs; Python breaks that deadlock by handing one of them a
    partially initialised module (`partially initialized module 'httpx' has no attribute
    'Timeout'`: two scheduled runs starting together, one engine importing openai while a
    web tool imported httpx). Every such first import goes through one process-wide lock
    here, so they happen one at a time; a module already imported is returned at once.
    """
    module = sys.modules.get(name)
    if module is not None and not getattr(getattr(module, "__spec__", None), "_initializing",
                                          False):
        return module
    with _IMPORTS:
        return importlib.import_module(name)
