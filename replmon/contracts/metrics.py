"""Every metric the streaming job exports, defined once: name, type, labels, help.

The exposition code (streaming.exporter), docs/metrics.md, the alert rules' and dashboards' checks all read
this catalogue; a metric that is not here is not exported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricType = Literal["gauge", "counter"]

PARTITION = ("cluster", "topic", "partition")
REPLICA = ("cluster", "topic", "partition", "broker")
CLUSTER = ("cluster",)
BROKER = ("cluster", "broker")
TOPIC = ("cluster", "topic")


@dataclass(frozen=True)
class MetricSpec:
    name: str
    type: MetricType
    labels: tuple[str, ...]
    help: str
    budgeted: bool = False
    """Per-partition or per-replica series, exported only within stream.series_budget (unhealthy first)."""


CATALOG: tuple[MetricSpec, ...] = (
    # --- per partition (budgeted) ---
    MetricSpec("replmon_partition_isr_size", "gauge", PARTITION, "Replicas in the ISR.", True),
    MetricSpec("replmon_partition_replicas", "gauge", PARTITION,
               "Assigned replicas (the replication factor; during a reassignment, old and new replicas together).",
               True),
    MetricSpec("replmon_partition_min_insync_replicas", "gauge", PARTITION,
               "The topic's min.insync.replicas.", True),
    MetricSpec("replmon_partition_under_replicated", "gauge", PARTITION,
               "1 when the ISR is smaller than the replication factor: the replicas, less those a reassignment in "
               "flight is adding (Kafka's UnderReplicatedPartitions).", True),
    MetricSpec("replmon_partition_under_min_isr", "gauge", PARTITION,
               "1 when the ISR is smaller than min.insync.replicas: acks=all writes fail.", True),
    MetricSpec("replmon_partition_at_min_isr", "gauge", PARTITION,
               "1 when the ISR equals min.insync.replicas: one more loss stops acks=all writes.", True),
    MetricSpec("replmon_partition_offline", "gauge", PARTITION, "1 when the partition has no leader.", True),
    MetricSpec("replmon_partition_leader", "gauge", PARTITION, "Broker id of the leader (-1: none).", True),
    MetricSpec("replmon_partition_leader_epoch", "gauge", PARTITION, "Leader epoch.", True),
    MetricSpec("replmon_partition_high_watermark", "gauge", PARTITION, "High watermark (first uncommitted offset).",
               True),
    MetricSpec("replmon_partition_log_end_offset", "gauge", PARTITION, "The leader's log end offset.", True),
    MetricSpec("replmon_partition_hw_lag_messages", "gauge", PARTITION,
               "Leader log end offset minus high watermark, clamped at 0.", True),
    MetricSpec("replmon_partition_reassigning", "gauge", PARTITION,
               "1 while a reassignment of the partition is in flight (replicas being added or removed, as Kafka's "
               "ListPartitionReassignments or its metadata log tells them).", True),
    # --- per replica (budgeted) ---
    MetricSpec("replmon_replica_lag_messages", "gauge", REPLICA,
               "Leader log end offset minus this replica's log end offset (its last one read when it does not "
               "answer: a dead or paused follower's lag keeps growing), clamped at 0. For a replica a reassignment "
               "is adding (replmon_replica_adding), the copy's progress.", True),
    MetricSpec("replmon_replica_lag_seconds", "gauge", REPLICA,
               "How long ago the leader's log ended where this follower's ends now (interpolated between samples of "
               "the leader's log end offset); Kafka drops a follower from the ISR when it has not caught up for "
               "replica.lag.time.max.ms. 0 for the leader and a caught-up follower.", True),
    MetricSpec("replmon_replica_in_isr", "gauge", REPLICA, "1 when the replica is in the ISR.", True),
    MetricSpec("replmon_replica_in_elr", "gauge", REPLICA,
               "1 when the replica is an eligible leader replica (KIP-966: out of the ISR, but holding every committed "
               "message, electable cleanly).", True),
    MetricSpec("replmon_replica_in_last_known_elr", "gauge", REPLICA,
               "1 when the replica is in the last known ELR (KIP-966: last in the ELR before it emptied; a last-resort "
               "election from it may lose data).", True),
    MetricSpec("replmon_replica_adding", "gauge", REPLICA,
               "1 when a reassignment in flight is adding the replica: it copies the log from its start, and its "
               "replmon_replica_lag_messages is the copy's progress, not a follower falling behind.", True),
    # --- aggregates (always exported) ---
    MetricSpec("replmon_cluster_partitions", "gauge", CLUSTER, "Partitions watched."),
    MetricSpec("replmon_cluster_under_replicated_partitions", "gauge", CLUSTER,
               "Partitions with ISR < replication factor (under-replicated)."),
    MetricSpec("replmon_cluster_under_min_isr_partitions", "gauge", CLUSTER,
               "Partitions with ISR < min.insync.replicas."),
    MetricSpec("replmon_cluster_at_min_isr_partitions", "gauge", CLUSTER, "Partitions with ISR = min.insync.replicas."),
    MetricSpec("replmon_cluster_offline_partitions", "gauge", CLUSTER, "Partitions without a leader."),
    MetricSpec("replmon_cluster_hw_stalled_partitions", "gauge", CLUSTER,
               "Partitions whose leader log end offset grows while the high watermark does not."),
    MetricSpec("replmon_cluster_stale_partitions", "gauge", CLUSTER,
               "Partitions with no sample for longer than stream.stale_after_s."),
    MetricSpec("replmon_cluster_last_sample_timestamp_seconds", "gauge", CLUSTER,
               "Sample time of the newest sample seen from the cluster."),
    MetricSpec("replmon_cluster_reassigning_partitions", "gauge", CLUSTER,
               "Partitions with a reassignment in flight (replicas being added or removed)."),
    MetricSpec("replmon_broker_replicas", "gauge", BROKER, "Replicas the broker hosts."),
    MetricSpec("replmon_broker_leaders", "gauge", BROKER, "Partitions the broker leads."),
    MetricSpec("replmon_broker_out_of_isr_replicas", "gauge", BROKER, "Replicas of the broker outside the ISR."),
    MetricSpec("replmon_broker_max_in_sync_replica_lag_seconds", "gauge", BROKER,
               "Largest time lag (replmon_replica_lag_seconds) among the broker's follower replicas still in the ISR: "
               "near replica.lag.time.max.ms, Kafka is about to drop one."),
    MetricSpec("replmon_broker_max_replica_lag_messages", "gauge", BROKER,
               "Largest follower lag among the broker's replicas, counting only followers that are not being "
               "added: a replica a reassignment in flight is adding copies the log from its start "
               "(replmon_replica_adding), and its lag is in replmon_replica_lag_messages alone."),
    MetricSpec("replmon_topic_partitions", "gauge", TOPIC, "Partitions of the topic."),
    MetricSpec("replmon_topic_under_replicated_partitions", "gauge", TOPIC,
               "Partitions of the topic with ISR < replication factor (under-replicated)."),
    MetricSpec("replmon_topic_under_min_isr_partitions", "gauge", TOPIC,
               "Partitions of the topic with ISR < min.insync.replicas."),
    MetricSpec("replmon_topic_offline_partitions", "gauge", TOPIC, "Partitions of the topic without a leader."),
    MetricSpec("replmon_topic_max_hw_lag_messages", "gauge", TOPIC, "Largest HW lag among the topic's partitions."),
    # --- events ---
    MetricSpec("replmon_events_total", "counter", ("cluster", "type"), "Events detected, by type."),
    MetricSpec("replmon_unclean_leader_elections_total", "counter", TOPIC,
               "Leader changes to a replica outside the previous ISR and ELR."),
    MetricSpec("replmon_committed_messages_lost_total", "counter", TOPIC,
               "Committed messages lost: the sum of DATA_LOSS events' committed_lost (a leader change's committed "
               "offsets the new leader's log does not hold), and of HW_REGRESSION's for a partition without leader "
               "epoch lineage (where the regression is all there is)."),
    MetricSpec("replmon_uncommitted_messages_lost_total", "counter", TOPIC,
               "Offsets leader changes discarded above everything committed: old leaders' never-committed tails, "
               "writes acknowledged to acks=0/1 producers or never acknowledged (retried by their producers); the "
               "sum of EPOCH_DIVERGENCE and LOG_TRUNCATION uncommitted_counted, each offset once per leader "
               "change."),
    MetricSpec("replmon_epoch_divergences_total", "counter", TOPIC,
               "Replicas found with a lineage that disagrees with the leader's over committed offsets (critical "
               "EPOCH_DIVERGENCE; a never-committed tail does not count)."),
    MetricSpec("replmon_broker_fencings_total", "counter", BROKER,
               "Brokers the controller fenced because their heartbeats stopped, their process restarted or they "
               "were unregistered (BROKER_FENCED warnings; a controlled shutdown does not count)."),
    # --- the job itself ---
    MetricSpec("replmon_quarantined_samples_total", "counter", ("reason",),
               "Samples that failed parsing or validation, by reason; they go to the quarantine topic."),
    MetricSpec("replmon_job_batches_total", "counter", (), "Micro-batches completed."),
    MetricSpec("replmon_job_batch_duration_seconds", "gauge", (), "Duration of the last micro-batch."),
    MetricSpec("replmon_job_input_rows_per_second", "gauge", (), "Input rate of the last micro-batch."),
    MetricSpec("replmon_job_processed_rows_per_second", "gauge", (), "Processing rate of the last micro-batch."),
    MetricSpec("replmon_job_state_rows", "gauge", (), "Rows in the state store (state buckets)."),
    MetricSpec("replmon_job_sample_to_metric_delay_seconds", "gauge", (),
               "Time from the newest sample of the last batch to its metrics being exported."),
    MetricSpec("replmon_job_last_batch_timestamp_seconds", "gauge", (), "When the last micro-batch completed."),
    MetricSpec("replmon_job_partition_series", "gauge", (), "Partitions exported with per-partition series."),
    MetricSpec("replmon_job_partition_series_dropped", "gauge", (),
               "Partitions beyond stream.series_budget: only in aggregates."),
)

BY_NAME: dict[str, MetricSpec] = {m.name: m for m in CATALOG}


def exposed_names() -> set[str]:
    """Every series name Prometheus can see, counters with their ``_total`` as exposed."""
    return set(BY_NAME)
