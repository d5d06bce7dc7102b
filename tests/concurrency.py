"""Threads released at the same instant, for the tests that race callers against each other.

``run_together(n, fn)`` calls ``fn(0)`` ... ``fn(n - 1)``, each in its own thread, all held at a barrier
until the last has started, and returns their results in that order. A thread that raises fails the call
with its exception (the first one raised), and a thread still running after ``timeout`` seconds fails it
with a ``TimeoutError``, so neither can go unnoticed behind a list of results. A race whose exceptions
are results to assert on wraps its function in ``or_error``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def run_together(n: int, fn: Callable[[int], T], timeout: float = 30.0) -> list[T]:
    """``[fn(0), ..., fn(n - 1)]``, computed in ``n`` threads that start at once."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout)
            results[i] = fn(i)
        except BaseException as exc:  # re-raised in the caller's thread below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), name=f"together-{i}", daemon=True) for i in range(n)]
    for thread in threads:
        thread.start()
    end = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, end - time.monotonic()))
    if errors:
        raise errors[0]
    hung = [thread.name for thread in threads if thread.is_alive()]
    if hung:
        raise TimeoutError(f"{len(hung)} of {n} threads still running after {timeout} s: {', '.join(hung)}")
    return results


def or_error(fn: Callable[[int], T]) -> Callable[[int], T | Exception]:
    """``fn``, returning the exception it raises instead of raising it."""

    def call(i: int) -> T | Exception:
        try:
            return fn(i)
        except Exception as exc:
            return exc

    return call
