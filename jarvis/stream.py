"""AnswerStream: what `Jarvis.ask_stream` returns, an iterator for `for` and `async for`.

jarvis's `ask_stream` has always been a plain iterator (`for piece in j.ask_stream(q)`), while
OpenJarvis's is an async generator (`async for piece in j.ask_stream(q)`). One object serves
both, so code written either way runs unchanged: the first loop decides which way the run is
driven (a sync loop reads it on this thread; an async loop through a worker thread, leaving
the event loop free, as `aask_stream` does). Driving one stream both ways is a UserError.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from jarvis.errors import UserError


class AnswerStream:
    """The pieces of one answer, for `for` or `async for` (see the module docstring).

    Leaving either loop early (or `close()` / `await aclose()`) cancels the run, as
    `ask_full(cancel=...)` describes.
    """

    __slots__ = ("_make_sync", "_make_async", "_sync", "_async")

    def __init__(self, make_sync: Callable[[], Iterator[str]],
                 make_async: Callable[[], AsyncIterator[str]]) -> None:
        self._make_sync = make_sync
        self._make_async = make_async
        self._sync: Any = None
        self._async: Any = None

    # --- for ---------------------------------------------------------------------------
    def __iter__(self) -> AnswerStream:
        return self

    def __next__(self) -> str:
        if self._sync is None:
            if self._async is not None:
                raise UserError("this ask_stream is already read with `async for`; read one "
                                "stream one way")
            self._sync = self._make_sync()
        return next(self._sync)

    def close(self) -> None:
        """Stop reading: the run is cancelled at its next boundary."""
        if self._sync is not None:
            self._sync.close()

    # --- async for -----------------------------------------------------------------------
    def __aiter__(self) -> AnswerStream:
        return self

    async def __anext__(self) -> str:
        if self._async is None:
            if self._sync is not None:
                raise UserError("this ask_stream is already read with `for`; read one stream "
                                "one way")
            self._async = self._make_async()
        return await self._async.__anext__()

    async def aclose(self) -> None:
        """Stop reading (async form of `close`)."""
        if self._async is not None:
            await self._async.aclose()
        else:
            self.close()
