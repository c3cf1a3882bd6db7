"""Kafka's own view of a partition, read with kafka-python's admin client: the oracle the tests compare
replmon against (never replmon's code)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kafka import TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.protocol.consumer.offsets import OffsetSpec

from replmon.core.processes import wait_until

__all__ = ["KafkaView", "PartitionView", "wait_until"]

T = TypeVar("T")


async def _describe_via(admin: KafkaAdminClient, topic: str, node_id: int) -> dict[str, Any]:
    """DescribeTopicPartitions sent to one broker (kafka-python's helper picks any broker)."""
    from kafka.protocol.admin.topics import DescribeTopicPartitionsRequest

    request = DescribeTopicPartitionsRequest(topics=[DescribeTopicPartitionsRequest.TopicRequest(name=topic)],
                                             response_partition_limit=2000, cursor=None)
    response = await admin._manager.send(request, node_id=node_id)
    return {"topics": [{"partitions": [
        {"partition_index": p.partition_index, "leader_id": p.leader_id, "leader_epoch": p.leader_epoch,
         "replica_nodes": list(p.replica_nodes), "isr_nodes": list(p.isr_nodes),
         "eligible_leader_replicas": list(p.eligible_leader_replicas or [])}
        for p in t.partitions]} for t in response.topics]}


@dataclass(frozen=True)
class PartitionView:
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    elr: list[int]


class KafkaView:
    def __init__(self, bootstrap_servers: str) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._admin: KafkaAdminClient | None = None

    @property
    def admin(self) -> KafkaAdminClient:
        if self._admin is None:
            self._admin = KafkaAdminClient(bootstrap_servers=self.bootstrap_servers, request_timeout_ms=3000,
                                           client_id="replmon-test-oracle")
        return self._admin

    def reconnect(self) -> None:
        """Drop the admin client; the next call makes a fresh one (after every broker was down, the old one
        may not find its way back)."""
        admin, self._admin = self._admin, None
        if admin is not None:
            with contextlib.suppress(Exception):
                admin.close()

    def close(self) -> None:
        self.reconnect()

    def call(self, request: Callable[[KafkaAdminClient], T]) -> T:
        """Run ``request`` with the admin client; on a failure again with a fresh client bootstrapped from one
        broker at a time (kafka-python keeps sending to a broker that was killed since, and a bootstrap that
        meets a paused broker waits on it until it gives up)."""
        try:
            return request(self.admin)
        except Exception as exc:
            failure = exc
        for server in self.bootstrap_servers.split(","):
            self.reconnect()
            try:
                self._admin = KafkaAdminClient(bootstrap_servers=server, request_timeout_ms=3000,
                                               client_id="replmon-test-oracle")
                return request(self._admin)
            except Exception as exc:
                failure = exc
        raise failure

    def partition(self, topic: str, partition: int = 0, via: int | None = None) -> PartitionView:
        """Kafka's metadata of one partition; ``via`` names the broker to ask (one known to be alive: a paused
        broker would hold the request until it times out)."""
        if via is None:
            result = self.call(lambda admin: admin.describe_topic_partitions([topic]))
        else:
            result = self.call(lambda admin: admin._manager.run(_describe_via, admin, topic, via))
        for t in result["topics"]:
            for p in t["partitions"]:
                if p["partition_index"] == partition:
                    return PartitionView(
                        leader=p["leader_id"], leader_epoch=p["leader_epoch"],
                        replicas=list(p["replica_nodes"]), isr=list(p["isr_nodes"]),
                        elr=list(p.get("eligible_leader_replicas") or []),
                    )
        raise LookupError(f"{topic}-{partition} not in metadata")

    def under_replicated(self) -> list[str]:
        """Every partition of the cluster without a leader or with a replica outside the ISR (``topic-N``)."""
        topics = self.call(lambda admin: admin.describe_topics())
        return [f"{t['name']}-{p['partition_index']}" for t in topics for p in t["partitions"]
                if p["leader_id"] < 0 or set(p["replica_nodes"]) - set(p["isr_nodes"])]

    def high_watermark(self, topic: str, partition: int = 0) -> int:
        tp = TopicPartition(topic, partition)
        return int(self.call(lambda admin: admin.list_partition_offsets({tp: OffsetSpec.LATEST}))[tp].offset)

    def topic_config(self, topic: str) -> dict[str, str]:
        """Every effective config of ``topic`` (name -> value); none while the broker asked does not know the topic
        yet (it learns of a new topic from the metadata log at its own pace)."""
        from kafka.admin import ConfigResource, ConfigResourceType

        result = self.call(lambda admin: admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all"))
        return {name: entry["value"] for name, entry in result["topic"][topic].items()}

    def set_configs(self, kind: str, name: str, configs: dict[str, str | None]) -> None:
        """Set (a value) or delete (None) dynamic configs of a ``kind`` ('topic' or 'broker') resource, the others
        kept (IncrementalAlterConfigs)."""
        from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType

        ops = {key: (AlterConfigOp.SET, value) if value is not None else (AlterConfigOp.DELETE, None)
               for key, value in configs.items()}
        resource = ConfigResource(ConfigResourceType[kind.upper()], name, configs=ops)
        result = self.call(lambda admin: admin.alter_configs([resource], incremental=True, raise_on_unknown=False))
        for answers in result.values():
            for resource_name, outcome in answers.items():
                if outcome != "OK":  # kafka-python's text of the error
                    raise RuntimeError(f"altering the configs of {kind} {resource_name}: {outcome}")

    def reassignment(self, topic: str, partition: int = 0) -> tuple[list[int], list[int]] | None:
        """The adding and removing replicas of the reassignment of ``topic``-``partition`` in flight (Kafka's
        ListPartitionReassignments, answered by the controller); None when none is."""
        tp = TopicPartition(topic, partition)
        found = self.call(lambda admin: admin.list_partition_reassignments([tp])).get(tp)
        return None if found is None else (list(found["adding_replicas"]), list(found["removing_replicas"]))

    def topics(self) -> set[str]:
        """Every topic the cluster's metadata lists."""
        return set(self.call(lambda admin: admin.list_topics()))

    def partition_count(self, topic: str) -> int:
        """How many partitions ``topic`` has in the cluster's metadata."""
        (described,) = self.call(lambda admin: admin.describe_topics([topic]))
        return len(described["partitions"])

    def delete_topic(self, name: str) -> None:
        """Delete ``name`` and wait until no broker's metadata lists it."""
        self.call(lambda admin: admin.delete_topics([name], timeout_ms=15000))
        wait_until(lambda: name not in self.topics(), 30, f"{name} gone from the metadata")

    def create_topic(self, name: str, assignment: dict[int, list[int]] | None = None, partitions: int = 1,
                     replication_factor: int = 3, configs: dict[str, str] | None = None) -> None:
        spec: dict[str, Any] = {"configs": configs or {}}
        if assignment:
            spec["assignments"] = assignment
        else:
            spec["num_partitions"] = partitions
            spec["replication_factor"] = replication_factor
        self.call(lambda admin: admin.create_topics({name: spec}, timeout_ms=15000))
        count = len(assignment) if assignment else partitions
        wait_until(lambda: all(self.partition(name, p).leader >= 0 for p in range(count)), 30,
                   f"leaders for {name}")
