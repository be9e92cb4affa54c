"""Grading many samples at the judge's throughput: up to ``max_concurrent_calls`` grades in flight,
results in the order asked, each grade recorded as a single one is (agent/judges/_recorder.py).

Why threads: a grade is a blocking exchange with the judge (tokenize, then the chat completion, maybe
asked again), and the client's connection pool is sized to the judge's ``max_concurrent_calls``; a pool
of that many threads keeps that many requests in flight, which is all the judge (and its gateway)
accepts anyway. An async driver awaits the same work without blocking its event loop.

Errors: by default the first failing grade (in the order asked) is raised once every grade already
in flight has ended; grades not yet started are not sent. ``return_exceptions=True`` returns each
grade's JudgeError in its place instead (nothing becomes a zero either way).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

__all__ = ["BatchRunner"]

T = TypeVar("T")
R = TypeVar("R")


class BatchRunner:
    """A pool of ``workers`` threads, made when first used, shut down with :meth:`close`."""

    def __init__(self, workers: int, name: str) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.workers = workers
        self._name = name
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix=self._name)
            return self._pool

    def map(
        self,
        fn: Callable[[T], R],
        items: Iterable[T],
        *,
        errors: type[BaseException],
        return_exceptions: bool = False,
    ) -> list[R | BaseException]:
        """``fn`` over ``items``, ``workers`` at a time; results in order. An exception of type
        ``errors`` is raised (the first in order) or returned in place; any other is raised."""
        work: Sequence[T] = list(items)
        if not work:
            return []
        pool = self._executor()
        futures: list[Future[R]] = [pool.submit(fn, item) for item in work]
        results: list[R | BaseException] = []
        first: BaseException | None = None
        for future in futures:
            if first is not None and not return_exceptions:
                future.cancel()  # not started yet: never sent
                continue
            try:
                results.append(future.result())
            except errors as exc:
                if return_exceptions:
                    results.append(exc)
                else:
                    first = exc
        if first is not None:
            for future in futures:  # the ones in flight end before the error is raised
                if not future.cancelled():
                    future.exception()
            raise first
        return results

    async def amap(
        self,
        fn: Callable[[T], R],
        items: Iterable[T],
        *,
        errors: type[BaseException],
        return_exceptions: bool = False,
    ) -> list[R | BaseException]:
        """:meth:`map` awaited: the event loop runs on while the pool grades."""
        work = list(items)
        return await asyncio.to_thread(self.map, fn, work, errors=errors, return_exceptions=return_exceptions)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
