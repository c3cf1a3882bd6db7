"""replmon's own topics (samples, events, quarantine) on the samples cluster: created when missing."""

from __future__ import annotations

from kafka.admin import KafkaAdminClient
from kafka.errors import TopicAlreadyExistsError, TopicAuthorizationFailedError

from replmon.core.config import ReplmonConfig
from replmon.core.errors import ReplmonError
from replmon.core.kafka_diagnose import connect_problem, require_reachable
from replmon.core.security import UNKNOWN_TOPIC_OR_PARTITION, connect_admin, missing_permission

TOPIC_COMPRESSION = "zstd"
"""compression.type of replmon's topics: JSON compresses ~10x."""


def ensure_topic(config: ReplmonConfig, topic: str) -> None:
    """Create ``topic`` on the samples cluster unless it exists, with the transport's partitions, retention
    and compression."""
    transport = config.transport
    servers = config.samples_bootstrap()
    require_reachable(servers, "the samples cluster")
    try:
        admin = KafkaAdminClient(bootstrap_servers=servers, client_id="replmon-topics",
                                 request_timeout_ms=10_000, bootstrap_timeout_ms=10_000,
                                 **config.samples_security().kafka_python())
    except Exception as exc:
        raise ReplmonError(f"cannot reach the samples cluster {','.join(servers)}: "
                           f"{connect_problem(servers, exc)}") from exc
    try:
        # no replication factor configured: the cluster's default.replication.factor (-1), never a guess from the
        # brokers that happen to be registered right now
        spec = {"num_partitions": transport.topic_partitions,
                "replication_factor": transport.topic_replication_factor or -1,
                "configs": {"retention.ms": str(transport.retention_ms), "compression.type": TOPIC_COMPRESSION}}
        try:
            result = admin.create_topics({topic: spec}, timeout_ms=10_000, raise_errors=False)
        except TopicAlreadyExistsError:
            return
        for entry in result.get("topics", []):
            code = entry.get("error_code", 0)
            if code == TopicAuthorizationFailedError.errno:
                if _exists(admin, topic):  # created by an operator: CREATE is not needed
                    return
                raise ReplmonError(missing_permission(config.samples_security().username, "CREATE", "TOPIC", topic)
                                   + " (create it beforehand, or grant CREATE: docs/security.md)")
            if code not in (0, TopicAlreadyExistsError.errno):
                raise ReplmonError(f"creating topic {topic} failed: error code {code} "
                                   f"{entry.get('error_message') or ''}".strip())
    finally:
        admin.close()


def _exists(admin: KafkaAdminClient, topic: str) -> bool:
    return any(t.get("error_code", 0) == 0 for t in admin.describe_topics([topic]))


def topic_missing(config: ReplmonConfig, topic: str) -> bool:
    """Whether the samples cluster says ``topic`` does not exist (asked without creating it). False when it exists,
    and when the cluster does not answer: the stage that reads it says so itself."""
    admin = connect_admin(config.samples_bootstrap(), config.samples_security(), "replmon-topics",
                          what="samples cluster")
    if admin is None:
        return False
    try:
        return any(t.get("error_code", 0) == UNKNOWN_TOPIC_OR_PARTITION for t in admin.describe_topics([topic]))
    finally:
        admin.close()
