"""replmon.core.processes: SIGTERM turned into the same clean stop as Ctrl-C."""

from __future__ import annotations

import signal

import pytest

from replmon.core.processes import interrupt_on_sigterm


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
