"""replmon.gcpause: the cyclic garbage collector off inside the block, as it was after, also on an error."""

from __future__ import annotations

import gc

import pytest

from replmon.gcpause import paused


def test_the_collector_is_off_inside_and_back_after_even_on_an_error() -> None:
    assert gc.isenabled()
    with paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), paused():
        assert not gc.isenabled()
        raise ValueError("boom")
    assert gc.isenabled()


def test_a_collector_already_off_stays_off() -> None:
    gc.disable()
    try:
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
