"""The helper that races threads (tests/concurrency.py) must itself be able to fail."""

from __future__ import annotations

import threading
import time

import pytest

from tests.concurrency import or_error, run_together


def test_results_come_back_in_the_order_of_the_indexes() -> None:
    assert run_together(5, lambda i: i * i) == [0, 1, 4, 9, 16]


def test_the_calls_run_at_the_same_time_not_one_after_another() -> None:
    inside = threading.Barrier(4)  # passes only when all four calls are in progress at once

    def meet(i: int) -> int:
        inside.wait(5)
        return i

    assert run_together(4, meet) == [0, 1, 2, 3]


def test_a_thread_that_raises_fails_the_call_with_its_exception() -> None:
    def fail_one(i: int) -> int:
        if i == 2:
            raise ValueError("thread 2 broke")
        return i

    with pytest.raises(ValueError, match="thread 2 broke"):
        run_together(4, fail_one)


def test_a_failed_assertion_in_a_thread_fails_the_call() -> None:
    def check(i: int) -> None:
        assert i < 3, f"thread {i} saw the wrong thing"

    with pytest.raises(AssertionError, match="thread 3 saw the wrong thing"):
        run_together(4, check)


def test_a_thread_still_running_after_the_timeout_is_reported() -> None:
    release = threading.Event()

    def hang(i: int) -> int:
        if i == 1:
            release.wait(30)
        return i

    start = time.monotonic()
    try:
        with pytest.raises(TimeoutError, match=r"1 of 3 threads still running after 0.2 s: together-1"):
            run_together(3, hang, timeout=0.2)
    finally:
        release.set()
    assert time.monotonic() - start < 5


def test_or_error_returns_the_exception_as_that_thread_s_result() -> None:
    def odd_fails(i: int) -> int:
        if i % 2:
            raise LookupError(f"no {i}")
        return i

    results = run_together(4, or_error(odd_fails))
    assert [r if isinstance(r, int) else str(r) for r in results] == [0, "no 1", 2, "no 3"]
