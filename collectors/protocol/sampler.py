"""One cluster's sampler: one cycle = the offsets questions of the previous cycle's partition layout and the
metadata at once, then the questions the metadata adds (partitions that moved, new ones, lineage walks, topic
configs), then samples. A steady cycle is one round trip to every broker: the brokers answer the offsets while
the metadata is read.

Remembers across cycles: the cycle number, the partition layout (who leads and who hosts what), the leader
lineages and walks in progress, the topic configs, which brokers answered last time (a broker that did not is
asked only after the metadata, with a short grace once the others have answered, so a silent broker does not
hold every cycle to the full request timeout). Every wait of a cycle ends by one deadline, a share of the interval
(``collector.cycle_wait_share``): the first cycle after a broker stops answering is on time too.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import kafka.errors as Errors

from collectors.metrics import CollectorMetrics
from collectors.protocol import requests as rq
from collectors.protocol.assemble import (
    KAFKA_STORAGE_ERROR,
    CycleAnswers,
    SampleAssembler,
    error_name,
)
from collectors.protocol.client import Call, ClusterClient, Outcome, Pending
from collectors.protocol.lineage import LineageBook, TopicPartition, clip_to_log_start
from collectors.protocol.topics import TopicSelector, topic_changes
from replmon.contracts.samples import MAX_REPLICAS, CycleSample, EpochEntry, Sample
from replmon.core.config import ClusterConfig, CollectorConfig
from replmon.core.errors import ReplmonError, describe
from replmon.core.gcpause import paused as gc_paused
from replmon.core.security import CLUSTER_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED, missing_permission

log = logging.getLogger(__name__)

LEADER_LABELS = {"high_watermark": rq.HIGH_WATERMARK, "last_stable_offset": rq.LAST_STABLE_OFFSET,
                 "log_start_offset": rq.LOG_START_OFFSET}
OFFSETS_FOR_LEADER_EPOCH = "OffsetsForLeaderEpoch"
DESCRIBE_CONFIGS = "DescribeConfigs"
DESCRIBE_TOPIC_PARTITIONS = "DescribeTopicPartitions"
LIST_PARTITION_REASSIGNMENTS = "ListPartitionReassignments"
METADATA = "Metadata"
SILENT_BROKER_GRACE_S = 0.5
"""How long a broker that did not answer last cycle is waited for once every other broker has answered."""
MIN_CYCLE_WAIT_S = 1.0
"""The least a cycle waits for answers, whatever the interval: a short interval must not fail healthy brokers."""
METADATA_REFRESH_WAIT_S = 1.0
"""How long a cycle waits for the client's metadata when a partition names a broker the client does not know."""
UNREACHABLE_ERRORS = (Errors.KafkaConnectionError, Errors.RequestTimedOutError, Errors.KafkaTimeoutError,
                      Errors.NodeNotReadyError, Errors.UnknownBrokerIdError, ConnectionError, TimeoutError)


@dataclass
class CycleResult:
    samples: list[Sample]
    cycle: CycleSample
    lineage_updates: int = 0
    warnings: list[str] = field(default_factory=list)


@dataclass
class EarlyOffsets:
    """Offsets questions sent before the metadata, from the previous cycle's layout."""

    leads: rq.Layout
    hosts: rq.Layout
    pending: Pending


class ClusterSampler:
    def __init__(self, cluster: ClusterConfig, collector: CollectorConfig, collector_id: str,
                 metrics: CollectorMetrics | None = None,
                 client_factory: Callable[..., ClusterClient] = ClusterClient) -> None:
        self.cluster = cluster
        self.config = collector
        self.collector_id = collector_id
        self.metrics = metrics
        self.selector = TopicSelector.from_config(cluster.topics, cluster.name)
        self.client = client_factory(cluster, collector.request_timeout_ms, f"replmon-{collector_id}",
                                     on_request=self._count)
        self.cycle_no = 0
        self.lineages = LineageBook()
        self.topic_configs: dict[str, rq.TopicConfig] = {}
        self.silent: set[int] = set()
        self.leads: rq.Layout = {}
        self.hosts: rq.Layout = {}
        self.requests_by_label: dict[str, int] = {}
        self._requests = 0
        self._metadata_broker: int | None = None
        self._metadata_asked_ms = 0
        """When the cycle's metadata that answered was asked for (wall clock, ms): the time of its samples."""
        self._configs_denied: list[str] = []
        self._reassignments_error = 0
        self.cycle_wait_s = min(collector.request_timeout_ms / 1000,
                                max(MIN_CYCLE_WAIT_S, collector.cycle_wait_share * collector.interval_s))
        """How long one cycle waits for answers in all (see ``CollectorConfig.cycle_wait_share``)."""
        self._cycle_deadline = 0.0
        self.watched: dict[str, int] | None = None
        """The topics the last cycle sampled, with their partitions (None before the first cycle)."""
        self._too_wide: set[tuple[str, int]] = set()
        """The partitions reported for more replicas than the samples' contract holds."""

    def _count(self, label: str, broker: int) -> None:
        self._requests += 1
        self.requests_by_label[label] = self.requests_by_label.get(label, 0) + 1
        if self.metrics:
            self.metrics.requests.labels(cluster=self.cluster.name, api=label.split("/")[0],
                                         broker=str(broker)).inc()

    def close(self) -> None:
        self.client.close()

    # ------------------------------------------------------------------ one cycle
    def cycle(self) -> CycleResult:
        """Sample every watched partition once. Raises ReplmonError when the cluster cannot be reached at all
        (bootstrap or metadata); a broker that does not answer only marks its replicas."""
        with gc_paused():  # the cycle builds objects by the hundred thousand: see replmon.core.gcpause
            return self._cycle()

    def _left_s(self) -> float:
        """What is left of this cycle's wait for answers (a little, never nothing: a request needs a deadline)."""
        return max(0.05, self._cycle_deadline - time.monotonic())

    def _cycle(self) -> CycleResult:
        started = time.monotonic()
        self._cycle_deadline = started + self.cycle_wait_s
        cycle_no = self.cycle_no
        requests_before = self._requests
        if not self.client.connected:
            self.client.connect()
        version = self._list_offsets_version()
        early = self._ask_offsets_early(version)
        topics, metas = self._metadata()
        # the samples' time: when the metadata that gives their leader and ISR was asked for. A cycle's start is
        # too early when the first broker asked does not answer (a paused one): the answer of the next comes
        # seconds later, and a shrink it shows would be dated before the controller made it.
        sample_time_ms = self._metadata_asked_ms
        hidden = (f" (or user {self.cluster.security.username} lacks DESCRIBE on the topics it should match)"
                  if self.cluster.security.username else "")
        warnings = [f"cluster {self.cluster.name}: topic include pattern {p!r} matches no topic{hidden}"
                    for p in self.selector.unmatched_includes((t.name, t.internal) for t in topics)]
        for warning in warnings:
            log.warning(warning)
        wanted = {t.name for t in topics if self.selector.wants(t.name, t.internal)}  # per topic, not partition
        selected = [m for m in metas if m.topic in wanted]
        warnings += self._note_topics(selected) + self._note_too_wide(selected)
        leads, hosts = rq.group_by_broker(selected)
        if any(not self.client.knows_broker(broker) for broker in hosts):
            # a broker back from the dead is in the partitions' replicas before it is in the client's
            # metadata: refresh it now, so that this cycle already reads it (a broker still down costs one
            # metadata round trip to a live broker)
            self.client.refresh_metadata(timeout_s=min(METADATA_REFRESH_WAIT_S, self._left_s()))

        calls = [Call(b, req, label) for b, label, req in rq.list_offsets_requests(
            rq.unasked(leads, early.leads), rq.unasked(hosts, early.hosts), version, self.config.request_timeout_ms)]
        leaders = {m.tp: (m.leader, m.leader_epoch) for m in selected if m.leader >= 0}
        walks = self.lineages.plan(leaders, full_refresh=cycle_no % self.config.lineage_refresh_cycles == 0)
        by_leader: dict[int, dict[TopicPartition, Any]] = {}
        for tp, walk in walks.items():
            by_leader.setdefault(walk.leader, {})[tp] = walk
        for leader, questions in sorted(by_leader.items()):
            calls.append(Call(leader, rq.offsets_for_leader_epoch_request(questions), OFFSETS_FOR_LEADER_EPOCH))
        topic_names = sorted({m.topic for m in selected})
        refresh_configs = (cycle_no % self.config.config_refresh_cycles == 0
                           or any(t not in self.topic_configs for t in topic_names))
        if refresh_configs and topic_names:
            calls.append(Call(self._pick_broker(hosts), rq.describe_configs_request(topic_names), DESCRIBE_CONFIGS))
        if selected and self.client.api_versions(rq.LIST_PARTITION_REASSIGNMENTS_KEY) is not None:
            calls.append(Call(self._pick_broker(hosts),
                              rq.list_partition_reassignments_request(self.config.request_timeout_ms),
                              LIST_PARTITION_REASSIGNMENTS))

        outcomes = self._send(calls) + self.client.gather(early.pending)
        answers, lineage_answers, configs = self._collect(
            outcomes, {tp: leader for tp, (leader, _) in leaders.items()}, set(hosts) | {c.broker for c in calls})
        self.leads, self.hosts = leads, hosts
        if configs is not None:
            self.topic_configs = {t: configs.get(t, self.topic_configs.get(t, rq.TopicConfig()))
                                  for t in topic_names}
        lineages = self._lineages(walks, lineage_answers, answers)

        assembler = SampleAssembler(answers, cluster=self.cluster.name, collector_id=self.collector_id,
                                    cycle=cycle_no, sample_time_ms=sample_time_ms, leo_label=rq.LOG_END_OFFSET,
                                    leader_labels=LEADER_LABELS)
        configs_now = self.topic_configs
        samples: list[Sample] = [assembler.sample(m, configs_now.get(m.topic), lineages.get((m.topic, m.partition)))
                                 for m in selected]
        brokers = sorted(set(hosts) | set(self.client.broker_ids()))
        self.silent = set(answers.unreachable)
        duration = time.monotonic() - started
        cycle_sample = CycleSample(
            cluster=self.cluster.name, collector_id=self.collector_id, cycle=cycle_no,
            sample_time_ms=sample_time_ms, duration_ms=int(duration * 1000), partitions=len(selected),
            brokers=brokers, unreachable_brokers=sorted(answers.unreachable),
            requests=self._requests - requests_before)
        samples.append(cycle_sample)
        self.cycle_no += 1
        if self.metrics:
            name = self.cluster.name
            self.metrics.cycle_duration.labels(cluster=name).observe(duration)
            self.metrics.cycles.labels(cluster=name).inc()
            self.metrics.partitions.labels(cluster=name).set(len(selected))
            self.metrics.unreachable_brokers.labels(cluster=name).set(len(answers.unreachable))
        return CycleResult(samples, cycle_sample, lineage_updates=len(lineages), warnings=warnings)

    # ------------------------------------------------------------------ steps
    def _note_too_wide(self, selected: list[rq.PartitionMeta]) -> list[str]:
        """A warning, once per partition, for a partition of more replicas than the samples' contract holds
        (:data:`~replmon.contracts.samples.MAX_REPLICAS`, which Kafka allows): the job quarantines its samples
        (``bad_length:replicas``) rather than widen a whole bucket's replica matrices for it."""
        wide = [m for m in selected if len(m.replicas) > MAX_REPLICAS and (m.topic, m.partition) not in self._too_wide]
        warnings = [f"cluster {self.cluster.name}: partition {m.topic}-{m.partition} has {len(m.replicas)} replicas, "
                    f"more than the {MAX_REPLICAS} a sample holds: the streaming job quarantines its samples "
                    "(bad_length:replicas)" for m in wide]
        for m, warning in zip(wide, warnings, strict=True):
            self._too_wide.add((m.topic, m.partition))
            log.warning(warning)
        return warnings

    def _note_topics(self, selected: list[rq.PartitionMeta]) -> list[str]:
        """Logs the topics the sampler starts or stops sampling; returns the warnings among those lines. A topic
        leaves the selection only by leaving the metadata (the selection is fixed while the collector runs): it was
        deleted, or the collector's user lost DESCRIBE on it. The streaming job forgets its partitions after
        ``stream.forget_after_s`` (PARTITION_FORGOTTEN); this line says why, on the collector's side."""
        now = dict(Counter(m.topic for m in selected))
        before, self.watched = self.watched, now
        name = self.cluster.name
        if before is None:
            log.info("cluster %s: sampling %s, %s", name, _count(len(now), "topic"), _partitions(len(selected)))
            return []
        changes = topic_changes(before, now)
        for topic, partitions in changes.appeared.items():
            log.info("cluster %s: sampling topic %s (%s) from now on", name, topic, _partitions(partitions))
        for topic, (was, count) in changes.resized.items():
            log.info("cluster %s: topic %s has %d partitions, %d before", name, topic, count, was)
        user = self.cluster.security.username
        lost = f", or user {user} lost DESCRIBE on it" if user else ""
        warnings = [f"cluster {name}: topic {topic} ({_partitions(partitions)}) left the cluster's metadata (deleted"
                    f"{lost}): its partitions are no longer sampled, and the streaming job forgets them after "
                    "stream.forget_after_s (PARTITION_FORGOTTEN)" for topic, partitions in changes.left.items()]
        for warning in warnings:
            log.warning(warning)
        return warnings

    def _list_offsets_version(self) -> int:
        versions = self.client.api_versions(rq.LIST_OFFSETS_KEY)
        if versions is None:
            raise ReplmonError(f"cluster {self.cluster.name}: the brokers do not offer ListOffsets")
        return min(versions[1], 11)

    def _ask_offsets_early(self, version: int) -> EarlyOffsets:
        """Send the offsets questions of the previous cycle's layout now, without waiting: the brokers answer
        them while the metadata is read. Brokers silent last cycle are asked after the metadata (with the short
        grace of :meth:`_send`); a partition that moved since is asked again then, of its new leader or host,
        and the answers of its old one are ignored (:meth:`_collect`)."""
        leads = {b: t for b, t in self.leads.items() if b not in self.silent}
        hosts = {b: t for b, t in self.hosts.items() if b not in self.silent}
        calls = [Call(b, req, label) for b, label, req in rq.list_offsets_requests(
            leads, hosts, version, self.config.request_timeout_ms)]
        return EarlyOffsets(leads, hosts, self.client.submit(calls, timeout_s=self._left_s()))

    def _pick_broker(self, hosts: dict[int, Any]) -> int:
        """A broker that answered last cycle, preferring the one asked for metadata."""
        candidates = [b for b in self.client.broker_ids() if b not in self.silent] or self.client.broker_ids()
        if self._metadata_broker in candidates:
            return self._metadata_broker
        ready = [b for b in candidates if self.client.connection_ready(b)]
        return (ready or candidates or sorted(hosts))[0]

    def _metadata(self) -> tuple[list[rq.TopicMeta], list[rq.PartitionMeta]]:
        """Every topic and partition, from one broker (another one if the first does not answer)."""
        use_dtp = self.client.api_versions(rq.DESCRIBE_TOPIC_PARTITIONS_KEY) is not None
        tried: list[str] = []
        for _attempt in range(2):
            broker = self._pick_broker({})
            self._metadata_asked_ms = int(time.time() * 1000)
            try:
                result = self._describe(broker) if use_dtp else self._metadata_from(broker)
                self._metadata_broker = broker
                return result
            except _NoAnswer as exc:
                tried.append(f"broker {broker}: {exc}")
                self.silent.add(broker)
                self._metadata_broker = None
                if self.metrics:
                    self.metrics.errors.labels(cluster=self.cluster.name, kind="metadata").inc()
        raise ReplmonError(f"cluster {self.cluster.name}: no metadata ({'; '.join(tried)})")

    def _describe(self, broker: int) -> tuple[list[rq.TopicMeta], list[rq.PartitionMeta]]:
        topics: list[rq.TopicMeta] = []
        partitions: list[rq.PartitionMeta] = []
        cursor: tuple[str, int] | None = None
        for _page in range(100_000):
            outcome = self._send([Call(broker, rq.describe_topic_partitions_request(cursor),
                                       DESCRIBE_TOPIC_PARTITIONS)])[0]
            if not outcome.ok:
                raise _NoAnswer(_describe_error(outcome.error))
            page: rq.DescribePage = outcome.response
            known = {t.name for t in topics}
            topics.extend(t for t in page.topics if t.name not in known)
            partitions.extend(page.partitions)
            cursor = page.cursor
            if cursor is None:
                break
        return topics, partitions

    def _metadata_from(self, broker: int) -> tuple[list[rq.TopicMeta], list[rq.PartitionMeta]]:
        outcome = self._send([Call(broker, rq.metadata_request(), METADATA)])[0]
        if not outcome.ok:
            raise _NoAnswer(_describe_error(outcome.error))
        return rq.parse_metadata(outcome.response)

    def _send(self, calls: list[Call]) -> list[Outcome]:
        """All calls at once, waited for until the cycle's deadline; brokers silent last cycle get a short grace
        after the others answered."""
        patient = [c for c in calls if c.broker not in self.silent]
        hurried = [c for c in calls if c.broker in self.silent]
        if not hurried:
            return self.client.send_all(calls, timeout_s=self._left_s())
        results = self.client.send_all(patient, timeout_s=self._left_s()) if patient else []
        results += self.client.send_all(hurried, timeout_s=min(SILENT_BROKER_GRACE_S, self._left_s()))
        order = {id(c): i for i, c in enumerate(calls)}
        return sorted(results, key=lambda o: order[id(o.call)])

    def _collect(self, outcomes: list[Outcome], leader_of: dict[TopicPartition, int], brokers: set[int]
                 ) -> tuple[CycleAnswers, dict[TopicPartition, tuple[int, int, int]], dict[str, rq.TopicConfig] | None]:
        """The cycle's answers; a leader question counts only from the partition's leader in this cycle's
        metadata, and a broker is unreachable only if this cycle's metadata still has it in ``brokers`` (an early
        question went to the layout of the previous cycle: a leader since replaced, a broker since removed)."""
        answers = CycleAnswers()
        lineage: dict[TopicPartition, tuple[int, int, int]] = {}
        configs: dict[str, rq.TopicConfig] | None = None
        answered: set[int] = set()
        silent: set[int] = set()
        targets = {rq.HIGH_WATERMARK: answers.high_watermark, rq.LAST_STABLE_OFFSET: answers.last_stable_offset,
                   rq.LOG_START_OFFSET: answers.log_start_offset}
        for outcome in outcomes:
            call = outcome.call
            if not outcome.ok:
                if isinstance(outcome.error, UNREACHABLE_ERRORS):
                    silent.add(call.broker)
                else:
                    answers.failed[(call.broker, call.label)] = _describe_error(outcome.error)
                if self.metrics:
                    self.metrics.errors.labels(cluster=self.cluster.name, kind=call.label.split("/")[0]).inc()
                continue
            answered.add(call.broker)
            if call.label in targets:
                target = targets[call.label]
                for tp, answer in rq.parse_list_offsets(outcome.response).items():
                    if leader_of.get(tp) == call.broker:
                        target[tp] = answer
            elif call.label == rq.LOG_END_OFFSET:
                answers.log_end_offset.setdefault(call.broker, {}).update(rq.parse_list_offsets(outcome.response))
            elif call.label == OFFSETS_FOR_LEADER_EPOCH:
                lineage.update(rq.parse_offsets_for_leader_epoch(outcome.response))
            elif call.label == DESCRIBE_CONFIGS:
                configs = rq.parse_describe_configs(outcome.response)
                self._report_config_errors(rq.describe_configs_errors(outcome.response))
            elif call.label == LIST_PARTITION_REASSIGNMENTS:
                reassignments, code = rq.parse_list_partition_reassignments(outcome.response)
                self._report_reassignments_error(code)
                answers.reassignments = None if code else reassignments
        # A broker that answered some requests and timed out on others is reachable but troubled: its
        # unanswered requests are failures, not an unreachable broker.
        for outcome in outcomes:
            if not outcome.ok and outcome.call.broker in answered and outcome.call.broker in silent:
                answers.failed[(outcome.call.broker, outcome.call.label)] = _describe_error(outcome.error)
        answers.unreachable = (silent - answered) & brokers
        return answers, lineage, configs

    def _report_config_errors(self, errors: dict[str, int]) -> None:
        """Topics whose configs the broker withheld: one line when the set changes (min.insync.replicas and
        unclean.leader.election.enable stay unknown for them)."""
        denied = sorted(t for t, code in errors.items() if code == TOPIC_AUTHORIZATION_FAILED)
        if denied and denied != self._configs_denied:
            shown = ", ".join(denied[:5]) + (f" and {len(denied) - 5} more" if len(denied) > 5 else "")
            log.warning("cluster %s: %s; their min.insync.replicas and unclean.leader.election.enable stay unknown",
                        self.cluster.name,
                        missing_permission(self.cluster.security.username, "DESCRIBE_CONFIGS", "TOPIC", shown))
        self._configs_denied = denied

    def _report_reassignments_error(self, code: int) -> None:
        """A refused ListPartitionReassignments: one line when its error changes (the replicas a reassignment adds
        then count as Kafka's metadata alone shows them: under-replicated while they catch up)."""
        if code and code != self._reassignments_error:
            why = (missing_permission(self.cluster.security.username, "DESCRIBE", "CLUSTER", "kafka-cluster")
                   if code == CLUSTER_AUTHORIZATION_FAILED else error_name(code))
            log.warning("cluster %s: ListPartitionReassignments refused (%s): the replicas a reassignment in flight "
                        "adds count as under-replicated while they catch up", self.cluster.name, why)
        self._reassignments_error = code

    def _lineages(self, walks: dict[TopicPartition, Any], lineage_answers: dict[TopicPartition, tuple[int, int, int]],
                  answers: CycleAnswers) -> dict[TopicPartition, list[EpochEntry]]:
        log_starts = {tp: (off if code == 0 and off >= 0 else None)
                      for tp, (code, off) in answers.log_start_offset.items()}
        done: dict[TopicPartition, list[EpochEntry]] = {}
        for tp in walks:
            found = lineage_answers.get(tp)
            if found is None:
                continue  # leader silent: ask again next cycle
            code, epoch, end_offset = found
            if code:
                if code != KAFKA_STORAGE_ERROR:
                    log.debug("lineage walk of %s: %s", tp, error_name(code))
                self.lineages.abandon(tp)
                continue
            finished = self.lineages.answer(tp, epoch, end_offset, log_starts.get(tp))
            if finished is not None:
                done[tp] = finished
        done.update(self.lineages.settle(log_starts))
        return {tp: clip_to_log_start(lineage, log_starts.get(tp)) for tp, lineage in done.items()}


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _partitions(count: int) -> str:
    return _count(count, "partition")


class _NoAnswer(Exception):
    pass


def _describe_error(error: BaseException | None) -> str:
    return "no answer" if error is None else describe(error)
