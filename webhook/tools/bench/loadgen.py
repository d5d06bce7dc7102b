"""A keep-alive HTTPS load generator: N concurrent callers, each on its own kept-alive connection.

Like kube-scheduler and kube-apiserver, every caller opens one TLS connection, makes one warm-up call
(the handshake is not measured) and then sends its requests back to back on that connection, so what
is measured is the server's per-request work, not a handshake per request. Callers are threads of
this process, or, with ``procs > 1``, threads spread over forked processes: on two cores the client's
own GIL can become the limit for small payloads, and the client CPU utilisation reported with every
run says whether it did (near 1.0 per process means the client, not the server, set the pace).
"""

from __future__ import annotations

import http.client
import multiprocessing
import multiprocessing.connection
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from webhook.tools.servers import Tls

HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    path: str
    body: bytes
    tls: Tls


@dataclass
class Run:
    latencies: list[float] = field(default_factory=list)  # seconds, one per successful request
    errors: int = 0
    wall: float = 0.0  # seconds from the first caller's start to the last reply
    started: float = 0.0  # time.monotonic() when the first caller began (after the warm-up)
    ended: float = 0.0
    client_cpu: float = 0.0  # CPU seconds the load generator's processes used meanwhile
    reply_bytes: int = 0
    first_error: str = ""

    @property
    def requests(self) -> int:
        return len(self.latencies)

    @property
    def throughput(self) -> float:
        return self.requests / self.wall if self.wall > 0 else 0.0


def _connect(target: Target) -> http.client.HTTPSConnection:
    return http.client.HTTPSConnection(target.host, target.port, context=target.tls.client_context(), timeout=120)


def _call(conn: http.client.HTTPSConnection, target: Target) -> tuple[int, bytes]:
    conn.request("POST", target.path, body=target.body, headers=HEADERS)
    response = conn.getresponse()
    return response.status, response.read()


class LocalCounter:
    """The in-process twin of ``multiprocessing.Value("i")``: the same ``value`` and ``get_lock()``."""

    def __init__(self) -> None:
        self.value = 0
        self._lock = threading.Lock()

    def get_lock(self) -> threading.Lock:
        return self._lock


def _threads(target: Target, threads: int, duration: float, min_requests: int, shared: Any, barrier: Any) -> Run:
    """Run ``threads`` callers in this process. ``shared.value`` counts replies across every process;
    ``barrier`` holds every caller (of every process) until all have a warmed-up connection."""
    run = Run()
    lock = threading.Lock()
    starts: list[float] = []
    ends: list[float] = []

    def caller() -> None:
        conn = _connect(target)
        try:
            _call(conn, target)  # handshake and first-request costs stay out of the figures
            barrier.wait()
            start = time.monotonic()
            starts.append(start)
            stop_at = start + duration
            while time.monotonic() < stop_at or shared.value < min_requests:
                begin = time.perf_counter()
                status, data = _call(conn, target)
                elapsed = time.perf_counter() - begin
                with lock:
                    if status == 200:
                        run.latencies.append(elapsed)
                        run.reply_bytes = len(data)
                    else:
                        run.errors += 1
                        run.first_error = run.first_error or f"HTTP {status}: {data[:200]!r}"
                with shared.get_lock():
                    shared.value += 1
        except (OSError, http.client.HTTPException, threading.BrokenBarrierError) as exc:
            barrier.abort()  # the others must not wait for a caller that will never arrive
            with lock:
                run.errors += 1
                run.first_error = run.first_error or f"{type(exc).__name__}: {exc}"
        finally:
            ends.append(time.monotonic())
            conn.close()

    cpu0 = time.process_time()
    workers = [threading.Thread(target=caller, daemon=True) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    run.client_cpu = time.process_time() - cpu0
    run.started = min(starts, default=0.0)
    run.ended = max(ends, default=0.0)
    run.wall = run.ended - run.started if starts else 0.0
    return run


def _child(target: Target, threads: int, duration: float, min_requests: int, shared: Any, barrier: Any,
           pipe: multiprocessing.connection.Connection) -> None:
    pipe.send(_threads(target, threads, duration, min_requests, shared, barrier))
    pipe.close()


def measure(target: Target, concurrency: int, duration: float, min_requests: int = 1, procs: int = 1,
            label: str = "", progress: bool = True) -> Run:
    """Load ``target`` for ``duration`` seconds (and at least ``min_requests`` replies in all)."""
    progress = progress and sys.stderr.isatty()  # a ticker rewritten in place is noise in a log file
    if procs <= 1:
        done: list[Run] = []
        local = LocalCounter()
        barrier = threading.Barrier(concurrency)
        thread = threading.Thread(
            target=lambda: done.append(_threads(target, concurrency, duration, min_requests, local, barrier)),
            daemon=True)
        thread.start()
        _tick(label, duration, thread.is_alive, lambda: local.value, progress)
        thread.join()
        return done[0]
    ctx = multiprocessing.get_context("fork")
    shared = ctx.Value("i", 0)
    share = [n for n in (concurrency // procs + (1 if i < concurrency % procs else 0) for i in range(procs)) if n]
    proc_barrier = ctx.Barrier(concurrency)
    pipes, children = [], []
    for threads in share:
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(target, threads, duration, min_requests, shared, proc_barrier, child))
        proc.start()
        pipes.append(parent)
        children.append(proc)
    _tick(label, duration, lambda: any(p.is_alive() for p in children), lambda: int(shared.value), progress)
    merged = Run()
    parts: list[Run] = []
    for parent, proc in zip(pipes, children, strict=True):
        parts.append(parent.recv())
        proc.join()
    for part in parts:
        merged.latencies += part.latencies
        merged.errors += part.errors
        merged.client_cpu += part.client_cpu
        merged.reply_bytes = part.reply_bytes or merged.reply_bytes
        merged.first_error = merged.first_error or part.first_error
    started = [p.started for p in parts if p.wall]
    merged.started = min(started, default=0.0)
    merged.ended = max((p.ended for p in parts if p.wall), default=0.0)
    merged.wall = merged.ended - merged.started if started else 0.0
    return merged


def _tick(label: str, duration: float, alive: Callable[[], bool], count: Callable[[], int], show: bool) -> None:
    """Progress on stderr while the callers run (a line rewritten in place)."""
    begin = time.monotonic()
    while alive():
        if not show:
            time.sleep(0.05)
            continue
        left = max(0.0, duration - (time.monotonic() - begin))
        phase = f"{left:4.1f}s left" if left else "finishing"
        sys.stderr.write(f"\r  {label:<48} {phase}  {count():>6} replies ")
        sys.stderr.flush()
        time.sleep(0.25)
    if show:
        sys.stderr.write("\r" + " " * 80 + "\r")
        sys.stderr.flush()
