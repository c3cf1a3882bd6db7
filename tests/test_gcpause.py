"""replmon.core.gcpause: the cyclic garbage collector off inside the block, as it was after, also on an error; and
the collector's cycle, paused until its samples are published."""

from __future__ import annotations

import gc
import io
import weakref
from collections.abc import Iterable
from typing import cast

import pytest

from collectors.protocol.runner import ClusterLoop
from collectors.protocol.sampler import ClusterSampler, CycleResult
from collectors.publisher import JsonLinesOutput
from replmon.contracts.samples import CycleSample, Sample
from replmon.core.config import ClusterConfig
from replmon.core.gcpause import paused


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


def test_a_collector_cycle_stays_paused_until_its_samples_are_published_and_let_go() -> None:
    """collectors.protocol.runner: the collector comes back on only once the cycle's samples are gone (re-enabled
    while they live, its first pass would walk every object the cycle built)."""
    seen: list[tuple[bool, weakref.ref[Sample]]] = []

    class Sampler:
        cluster = ClusterConfig(name="c", bootstrap_servers=["127.0.0.1:9"])

        def cycle(self) -> CycleResult:
            sample = CycleSample(cluster="c", collector_id="x", cycle=0, sample_time_ms=0, duration_ms=0,
                                 partitions=0, brokers=[])
            return CycleResult([sample], sample)

    class Sink(JsonLinesOutput):
        def publish(self, samples: Iterable[Sample]) -> None:
            samples = list(samples)
            seen.append((gc.isenabled(), weakref.ref(samples[0])))
            super().publish(samples)

    loop = ClusterLoop(cast(ClusterSampler, Sampler()), Sink(io.StringIO()), interval_s=1.0)
    assert gc.isenabled()
    assert loop.run_cycle() is None
    [(enabled_while_publishing, published)] = seen
    assert not enabled_while_publishing
    assert published() is None and gc.isenabled()
