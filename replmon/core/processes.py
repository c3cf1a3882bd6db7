"""Stopping the processes replmon (and its tests) start, and waiting on a condition with a deadline."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from types import FrameType
from typing import Any, Literal, TypeVar

T = TypeVar("T")

NotYet = Literal[False, 0, ""] | None
"""A probe's 'not yet' (:func:`wait_until`, :func:`wait_told`): the falsy values typing can name (an empty list,
falsy too, it cannot). So a probe ``lambda: ready() and value`` is typed as waiting for ``value``, the truthy answer
the wait returns."""


def stop_processes(procs: Iterable[subprocess.Popen[Any] | None], grace_s: float = 15.0) -> None:
    """SIGTERM to every process still running, then wait up to ``grace_s`` for each and SIGKILL it if it
    did not exit by then."""
    running = [p for p in procs if p is not None and p.poll() is None]
    for proc in running:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
    for proc in running:
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextlib.contextmanager
def interrupt_on_sigterm(sigint: bool = False) -> Iterator[None]:
    """Inside the block SIGTERM raises KeyboardInterrupt, as Ctrl-C does, so that the ``finally`` clauses that stop
    what was started run: Python's default SIGTERM ends the process without them (a benchmark stopped so would
    leave its producer JVM running). With ``sigint``, SIGINT does too even where the process inherited it ignored
    (a child started in the background by a shell)."""
    def handler(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signums = (signal.SIGTERM, signal.SIGINT) if sigint else (signal.SIGTERM,)
    previous = {s: signal.signal(s, handler) for s in signums}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def stop_signalled() -> Iterator[threading.Event]:
    """Inside the block SIGTERM and SIGINT set the event it yields and raise nothing: for a loop that checks it
    between steps, where an exception raised at an arbitrary point would interrupt a call in the middle (a Py4J
    call logs an ERROR with a traceback when a KeyboardInterrupt cuts it). Only the main thread may use it."""
    stop = threading.Event()

    def handler(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


TOPIC_POLL_S = 2.0
"""How often a stage asks again for a topic another stage creates (:func:`wait_told`)."""


def wait_told(probe: Callable[[], T | NotYet], told: str | Callable[[], str], stop: threading.Event,
              interval_s: float = TOPIC_POLL_S) -> T | None:
    """``probe``'s first truthy value, asked every ``interval_s`` for as long as it takes; None when ``stop`` is set
    first. ``told`` is said once (:func:`replmon.core.console.say`) when the first answer is not yet: a stage that
    waits for another (a topic it creates) says what it waits for, once; a callable, asked then, says what the
    probe found (why not yet)."""
    from replmon.core.console import say

    said = False
    while not stop.is_set():
        value = probe()
        if value:
            return value
        if not said:
            say(told if isinstance(told, str) else told())
            said = True
        stop.wait(interval_s)
    return None


def wait_until(probe: Callable[[], T | NotYet], timeout_s: float, what: str,
               interval_s: float = 0.25, fatal: tuple[type[BaseException], ...] = ()) -> T:
    """Call ``probe`` until it returns something truthy; fail with ``what`` and the last value after the
    deadline. Exceptions of the probe count as 'not yet' (the cluster may be electing), but those of ``fatal``,
    which end the wait at once (a process waited on that exited)."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            value = probe()
            if value:
                return value
            last = value
        except fatal:
            raise
        except Exception as exc:  # not yet: leaders move, brokers restart
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}; last: {last!r}")
        time.sleep(interval_s)
