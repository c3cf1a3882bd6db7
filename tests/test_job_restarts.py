"""The streaming job SIGKILLed and restarted from its checkpoint while brokers fail and producers write: every
event an uninterrupted run computes from the same samples is in the events topic exactly once, with the same
content, and the gauges end where that run ends. The code of bench/reliability.py (20 cycles, its figures in
docs/reliability.md), here for 2 kills on the suite's pipeline: one while the job processes, under broker
faults, one during its start-up. A broker fault, under way at the first kill, heals while the job is down: the
events of what happened meanwhile must come from the samples the job reads after its restart."""

from __future__ import annotations

import random

import pytest

from bench.reliability import FaultLoad, PipelineJob, end_offsets, healthy_sampled, job_events, kill_cycles, verify
from replmon.core.config import load_config
from replmon.testbed.kafka_view import KafkaView, wait_until
from replmon.testbed.localcluster import LocalCluster
from streaming.detect import DetectConfig
from tests.pipeline import JOB_START_DEADLINE_S, TOPIC_PREFIX, Pipeline

pytestmark = [pytest.mark.cluster, pytest.mark.spark]


@pytest.mark.timeout(1200)  # three Spark starts (with the pipeline's): minutes each on a starved 2-core machine
def test_killed_job_loses_duplicates_and_corrupts_nothing(
        pipeline: Pipeline, healthy_cluster: LocalCluster, topic_name: str) -> None:
    view = KafkaView(healthy_cluster.bootstrap_servers)
    topics = {f"{TOPIC_PREFIX}{topic_name}-{b}": b for b in healthy_cluster.broker_ids}
    try:
        for topic, leader in topics.items():
            view.create_topic(topic, assignment={0: [leader, *(b for b in healthy_cluster.broker_ids if b != leader)]})
    finally:
        view.close()
    config = load_config(pipeline.config)
    transport = pipeline.transport.bootstrap_servers
    samples, events = config.transport.samples_topic, config.transport.events_topic
    wait_until(lambda: all(pipeline.metric("replmon_partition_isr_size", topic=t, partition="0") == 3 for t in topics),
               JOB_START_DEADLINE_S, "the job to see the new topics")

    rng = random.Random(6)
    job = PipelineJob(pipeline)
    loaded = job.batches()
    load = FaultLoad(healthy_cluster, topics, rng).start()
    try:
        wait_until(lambda: job.batches() >= loaded + 2, 120, "micro-batches under the load")
        job.kill()  # while processing, under load, its first broker fault under way
        down_at = sum(load.faults.values())
        wait_until(lambda: sum(load.faults.values()) > down_at, 120, "a broker fault while the job is down")
        cycles = kill_cycles(job, 1, rng, job.batches, plan=[True])  # then during start-up; restarted after
    finally:
        load.close()
    wait_until(lambda: healthy_sampled(transport, samples, topics), 120, "samples of the healed, quiet partitions")
    until = end_offsets(transport, samples)

    result, gauges, ref = verify(transport, samples, events, pipeline.metrics_port,
                                 DetectConfig.from_stream_config(config.stream), set(topics), until,
                                 deadline_s=JOB_START_DEADLINE_S, ignore_stale=True)
    assert result.expected > 0 and result.by_type.get("ISR_SHRINK"), result.by_type
    assert result.ok, result.describe(ref, job_events(transport, events, ref, ignore_stale=True))
    assert not gauges, gauges
    assert [c.during_start for c in cycles.records] == [True]
