"""replmon.core.processes: SIGTERM turned into the same clean stop as Ctrl-C."""

from __future__ import annotations

import signal

import pytest

from replmon.core.processes import interrupt_on_sigterm, wait_until


def test_sigterm_in_the_block_runs_the_finally_clauses_and_the_old_handler_comes_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    stopped: list[str] = []
    with pytest.raises(KeyboardInterrupt), interrupt_on_sigterm():
        try:
            signal.raise_signal(signal.SIGTERM)
            stopped.append("not reached")
        finally:
            stopped.append("stopped what it started")
    assert stopped == ["stopped what it started"]
    assert signal.getsignal(signal.SIGTERM) == before


def test_with_sigint_an_inherited_ignore_is_overridden_too() -> None:
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a child started in the background by a shell
    try:
        with pytest.raises(KeyboardInterrupt), interrupt_on_sigterm(sigint=True):
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_wait_until_retries_through_errors_but_ends_at_once_on_a_fatal_one() -> None:
    calls: list[int] = []

    def electing() -> int | None:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("not yet")
        return len(calls)

    assert wait_until(electing, 60, "a leader", interval_s=0.01) == 3

    class Exited(Exception):
        pass

    def dead() -> None:
        calls.append(1)
        raise Exited("the process exited")

    calls.clear()
    with pytest.raises(Exited):
        wait_until(dead, 60, "a micro-batch", interval_s=0.01, fatal=(Exited,))
    assert len(calls) == 1  # not retried until the deadline
