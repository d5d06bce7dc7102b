"""Counts what the fuzz tests sent, by test and by status, for the terminal summary (and the report)."""

from __future__ import annotations

from collections import Counter
from typing import Any


class Run:
    def __init__(self) -> None:
        self.examples: Counter[str] = Counter()
        self.statuses: Counter[int] = Counter()

    def count(self, test: str, status: int) -> None:
        self.examples[test] += 1
        self.statuses[status] += 1


RUN = Run()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if RUN.examples:
        total = sum(RUN.examples.values())
        by_status = ", ".join(f"{code}: {n}" for code, n in sorted(RUN.statuses.items()))
        terminalreporter.write_line(f"fuzz: {total} requests ({dict(sorted(RUN.examples.items()))}); "
                                    f"replies by status: {by_status}")
