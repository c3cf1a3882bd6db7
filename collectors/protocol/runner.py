"""The collector: one sampler per watched cluster, each on its own schedule (a slow or unreachable cluster never
delays the others), samples handed to a sink (the samples topic or stdout).

A cycle that overruns its interval is logged and the cycles it overlapped are skipped, never piled up. A
cluster that cannot be reached yields one clear error line (repeated only when the reason changes) and a cycle
sample carrying the error; its sampler keeps trying every interval.
"""

from __future__ import annotations

import logging
import math
import socket
import threading
import time
from collections.abc import Callable

from collectors.metrics import CollectorMetrics
from collectors.protocol.sampler import ClusterSampler
from collectors.publisher import SampleSink
from replmon.contracts.samples import CycleSample
from replmon.core.config import ClusterConfig, ReplmonConfig
from replmon.core.errors import ReplmonError, describe
from replmon.core.gcpause import paused as gc_paused

log = logging.getLogger("replmon.collector")


def collector_id(config: ReplmonConfig) -> str:
    return config.collector.collector_id or socket.gethostname() or "replmon"


class ClusterLoop:
    """Runs one cluster's cycles every ``interval_s`` until stopped."""

    def __init__(self, sampler: ClusterSampler, sink: SampleSink, interval_s: float,
                 metrics: CollectorMetrics | None = None) -> None:
        self.sampler = sampler
        self.sink = sink
        self.interval_s = interval_s
        self.metrics = metrics
        self.last_error: str | None = None
        self.skipped = 0

    @property
    def name(self) -> str:
        return self.sampler.cluster.name

    def run_cycle(self) -> str | None:
        """One cycle, published; the error message when the cluster could not be sampled.

        The cyclic garbage collector stays paused until the samples are published and let go (see
        replmon.core.gcpause): re-enabled while they live, its first pass walks every object the cycle built, for
        nothing (they form no reference cycles), and the next passes walk them again while they are published."""
        with gc_paused():
            try:
                result = self.sampler.cycle()
            except ReplmonError as exc:
                return self._failed(str(exc))
            except Exception as exc:  # a bug or an unexpected answer must not end the collector
                log.debug("cycle of %s failed", self.name, exc_info=True)
                return self._failed(f"cluster {self.name}: sampling failed: {describe(exc)}")
            if self.last_error is not None:
                log.warning("cluster %s: sampling again", self.name)
            self.last_error = None
            self.sink.publish(result.samples)
            del result
        return None

    def _failed(self, message: str) -> str:
        if message != self.last_error:
            log.error("%s", message)
        self.last_error = message
        if self.metrics:
            self.metrics.errors.labels(cluster=self.name, kind="cycle").inc()
        self.sampler.close()  # reconnect from scratch next time
        self.sink.publish([CycleSample(
            cluster=self.name, collector_id=self.sampler.collector_id, cycle=self.sampler.cycle_no,
            sample_time_ms=int(time.time() * 1000), duration_ms=0, partitions=0, brokers=[], error=message)])
        self.sampler.cycle_no += 1
        return message

    def run(self, stop: threading.Event) -> None:
        start = time.monotonic()
        slot = 0
        while not stop.is_set():
            began = time.monotonic()
            self.run_cycle()
            took = time.monotonic() - began
            next_slot = slot + 1
            due = start + next_slot * self.interval_s
            now = time.monotonic()
            if now > due:
                missed = math.ceil((now - due) / self.interval_s)
                self.skipped += missed
                log.warning("cluster %s: cycle took %.1f s, longer than the interval %.1f s: skipping %d cycle(s)",
                            self.name, took, self.interval_s, missed)
                if self.metrics:
                    self.metrics.cycles_skipped.labels(cluster=self.name).inc(missed)
                next_slot += missed
                due = start + next_slot * self.interval_s
            slot = next_slot
            stop.wait(max(0.0, due - time.monotonic()))
        self.sampler.close()


class Collector:
    def __init__(self, config: ReplmonConfig, sink: SampleSink, metrics: CollectorMetrics | None = None,
                 sampler_factory: Callable[..., ClusterSampler] = ClusterSampler) -> None:
        self.config = config
        self.sink = sink
        self.metrics = metrics
        cid = collector_id(config)
        self.loops = [ClusterLoop(sampler_factory(cluster, config.collector, cid, metrics), sink,
                                  config.collector.interval_s, metrics)
                      for cluster in config.clusters]

    @property
    def clusters(self) -> list[ClusterConfig]:
        return self.config.clusters

    def run_once(self) -> dict[str, str]:
        """One cycle of every cluster, concurrently; cluster name -> error, for the clusters that failed."""
        errors: dict[str, str] = {}

        def one(loop: ClusterLoop) -> None:
            error = loop.run_cycle()
            loop.sampler.close()
            if error is not None:
                errors[loop.name] = error

        threads = [threading.Thread(target=one, args=(loop,), name=f"collect-{loop.name}") for loop in self.loops]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return errors

    def run(self, stop: threading.Event) -> None:
        threads = [threading.Thread(target=loop.run, args=(stop,), name=f"collect-{loop.name}", daemon=True)
                   for loop in self.loops]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(timeout=0.5)
