"""A topic deleted on the real cluster while producers write to another: the job forgets exactly the deleted
topic's partitions (one PARTITION_FORGOTTEN each, after stream.forget_after_s without a sample) and they leave
its metrics, so a deleted topic does not stay stale for good; the other topic is untouched. The expected
partitions and counts come from Kafka's own metadata (replmon.testbed.kafka_view), the silence from the samples
topic, never from the job."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from replmon.testbed.harness import read_topic
from replmon.testbed.kafka_view import KafkaView, wait_until
from replmon.testbed.localcluster import LocalCluster
from replmon.testbed.workload import SequencedProducer
from streaming.batches import bucket_of
from tests.pipeline import DEADLINE_S, Pipeline, running_pipeline

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

PREFIX = "churn-"
STALE_AFTER_S = 6.0
FORGET_AFTER_S = 12.0
CLUSTER = "local"
STATE_BUCKETS = 8
KEPT_PARTITIONS, DELETED_PARTITIONS = 2, 3


def _deleted_topic(kept: str, prefix: str) -> str:
    """A name for the topic to delete such that a state bucket holds some of its partitions and none of the kept
    topic's: that bucket gets no sample of the cluster once the topic is gone, and must learn from the read stage
    that the cluster is still sampled (streaming.batches.HEARD)."""
    def bucket(topic: str, partition: int) -> int:
        return bucket_of(f"{CLUSTER}/{topic}/{partition}", range(STATE_BUCKETS))

    kept_buckets = {bucket(kept, p) for p in range(KEPT_PARTITIONS)}
    return next(name for n in range(100) if any(
        bucket(name := f"{prefix}-{n}", p) not in kept_buckets for p in range(DELETED_PARTITIONS)))


def _forgotten(pipeline: Pipeline) -> list[dict[str, Any]]:
    return [e for e in pipeline.events() if e["type"] == "PARTITION_FORGOTTEN"]


def _series_of(pipeline: Pipeline, topic: str) -> list[str]:
    """The job's series that carry ``topic`` as their topic label."""
    return [name for name, samples in pipeline.scrape().items() for labels, _ in samples
            if labels.get("topic") == topic]


def test_a_deleted_topic_s_partitions_are_forgotten_and_leave_the_metrics(
    cluster: LocalCluster, kafka_view: KafkaView, tmp_path_factory: pytest.TempPathFactory,
    producer_factory: Callable[..., SequencedProducer], topic_name: str,
) -> None:
    kept = f"{PREFIX}{topic_name}-kept"
    deleted = _deleted_topic(kept, f"{PREFIX}{topic_name}-deleted")
    kafka_view.create_topic(kept, partitions=KEPT_PARTITIONS)
    kafka_view.create_topic(deleted, partitions=DELETED_PARTITIONS)
    producer_factory(kept, partition=None)  # writes to every partition of the kept topic throughout
    doomed = producer_factory(deleted, partition=None)
    doomed.wait_acknowledged(30)
    counts = {topic: kafka_view.partition_count(topic) for topic in (kept, deleted)}
    overrides = {"stream": {"stale_after_s": STALE_AFTER_S, "forget_after_s": FORGET_AFTER_S,
                            "state_buckets": STATE_BUCKETS}}
    with running_pipeline(cluster, tmp_path_factory, PREFIX, overrides) as pipeline:
        wait_until(lambda: all(pipeline.metric("replmon_topic_partitions", cluster=CLUSTER, topic=topic) == count
                               for topic, count in counts.items()), DEADLINE_S, "both topics tracked")
        doomed.close()  # a producer would create the deleted topic again (auto.create.topics.enable)
        requested_ms = time.time() * 1000
        kafka_view.delete_topic(deleted)
        gone_ms = time.time() * 1000

        events = wait_until(lambda: len(found := _forgotten(pipeline)) >= counts[deleted] and found, DEADLINE_S,
                            f"PARTITION_FORGOTTEN for the {counts[deleted]} partitions of {deleted}")
        watched = {topic for topic in kafka_view.topics() if topic.startswith(PREFIX)}
        assert watched == {kept}
        # the collector says why on its side, once, before the job forgets: the topic left the metadata
        collector_log = pipeline.log("collect").read_text()
        assert collector_log.count(f"topic {deleted} ({counts[deleted]} partitions) left the cluster's metadata") == 1
        assert f"topic {kept} (" not in collector_log
        # the metrics follow Kafka's metadata: the kept topic's partitions, none stale, none of the deleted topic;
        # the counter counts the events the micro-batch wrote once it has written them all (and their history)
        wait_until(lambda: pipeline.metric("replmon_cluster_partitions", cluster=CLUSTER) == counts[kept]
                   and pipeline.metric("replmon_cluster_stale_partitions", cluster=CLUSTER) == 0
                   and not _series_of(pipeline, deleted)
                   and pipeline.metric("replmon_events_total", cluster=CLUSTER, type="PARTITION_FORGOTTEN")
                   == counts[deleted], DEADLINE_S, f"the cluster's metrics without {deleted}, the events counted")
        assert pipeline.metric("replmon_topic_partitions", cluster=CLUSTER, topic=kept) == counts[kept]
        samples = read_topic(pipeline.transport.bootstrap_servers, pipeline.samples_topic)
        events = _forgotten(pipeline)

    assert Counter((e["topic"], e["partition"]) for e in events) == Counter(
        (deleted, partition) for partition in range(counts[deleted]))  # each once, the kept topic's none
    newest = {p: max(s["sample_time_ms"] for s in samples if s.get("topic") == deleted and s["partition"] == p)
              for p in range(counts[deleted])}
    for e in events:
        assert e["severity"] == "info" and e["source"] == "job" and e["cluster"] == CLUSTER
        # the collector sampled the partition until Kafka's metadata dropped it (a cycle in flight at most), and
        # the job forgot it after forget_after_s without a sample
        last = newest[e["partition"]]
        assert requested_ms - 60_000 < last < gone_ms + 5_000, (last, requested_ms, gone_ms)
        assert e["event_time_ms"] - last > FORGET_AFTER_S * 1000, (e, last)
    assert max(s["sample_time_ms"] for s in samples if s.get("topic") == kept) > max(newest.values())
