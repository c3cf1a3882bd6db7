"""Who replmon's stages are to Kafka, and the least-privilege ACLs each needs: defined once, here.

Three roles, one principal each: the protocol ``collector``, the log-dir ``agent`` and the streaming ``job``.
:data:`GRANTS` lists every ACL a role needs, on which cluster (a watched cluster or the transport cluster that
carries samples and events) and why. docs/security.md's table and kafka-acls.sh commands are generated from it
(:func:`markdown_table`, :func:`kafka_acls_commands`; tests/test_security_docs.py keeps them equal), the secure
local cluster grants exactly these, and :func:`check_access` tells an operator which one is missing, in Kafka's
words, before a stage starts.

Kafka implies DESCRIBE from READ, WRITE, DELETE and ALTER, and DESCRIBE_CONFIGS from ALTER_CONFIGS; an
idempotent producer needs no IDEMPOTENT_WRITE on the cluster once it may WRITE a topic (Kafka 3.0+, KIP-679).
Spark's Kafka source reads with ``assign()`` and commits nothing: it needs no consumer-group ACL.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import kafka.errors as Errors

from replmon.core.config import ReplmonConfig, SecurityConfig, TransportConfig
from replmon.core.errors import ReplmonError

log = logging.getLogger(__name__)


class Role(StrEnum):
    COLLECTOR = "collector"
    AGENT = "agent"
    JOB = "job"


class Where(StrEnum):
    WATCHED = "watched"
    """Every watched cluster (``clusters[*]``)."""
    TRANSPORT = "transport"
    """The cluster that carries samples, events and quarantined records (``transport``)."""


TOPIC_TEMPLATES = {"{samples_topic}": "samples_topic", "{events_topic}": "events_topic",
                   "{quarantine_topic}": "quarantine_topic"}
"""Resource names that stand for a configured topic name (``transport.<field>``)."""


@dataclass(frozen=True)
class Grant:
    role: Role
    where: Where
    resource_type: str
    """Kafka's resource type: TOPIC, GROUP or CLUSTER."""
    resource: str
    """A literal name, ``*`` (every resource of the type) or one of :data:`TOPIC_TEMPLATES`."""
    operation: str
    """Kafka's operation name, as in kafka.admin.ACLOperation and in authorization errors."""
    why: str
    create_only: bool = False
    """Needed only while replmon creates its own topic; an operator who creates it may leave the grant out."""

    def resource_name(self, transport: TransportConfig) -> str:
        """The concrete name: the configured topic for a template."""
        field = TOPIC_TEMPLATES.get(self.resource)
        return self.resource if field is None else str(getattr(transport, field))


GRANTS: tuple[Grant, ...] = (
    Grant(Role.COLLECTOR, Where.WATCHED, "TOPIC", "*", "DESCRIBE",
          "metadata (DescribeTopicPartitions), ListOffsets and OffsetsForLeaderEpoch of the watched topics"),
    Grant(Role.COLLECTOR, Where.WATCHED, "TOPIC", "*", "DESCRIBE_CONFIGS",
          "min.insync.replicas and unclean.leader.election.enable of the watched topics"),
    Grant(Role.COLLECTOR, Where.WATCHED, "CLUSTER", "kafka-cluster", "DESCRIBE",
          "the reassignments in flight (ListPartitionReassignments): the replicas a reassignment adds are not "
          "counted under-replicated while they copy, as Kafka counts them, nor as lagging followers"),
    Grant(Role.COLLECTOR, Where.TRANSPORT, "TOPIC", "{samples_topic}", "WRITE", "publish samples"),
    Grant(Role.COLLECTOR, Where.TRANSPORT, "TOPIC", "{samples_topic}", "CREATE",
          "create the samples topic when it is missing", create_only=True),
    Grant(Role.AGENT, Where.TRANSPORT, "TOPIC", "{samples_topic}", "WRITE", "publish samples"),
    Grant(Role.AGENT, Where.TRANSPORT, "TOPIC", "{samples_topic}", "CREATE",
          "create the samples topic when it is missing", create_only=True),
    Grant(Role.JOB, Where.TRANSPORT, "TOPIC", "{samples_topic}", "READ",
          "Spark's Kafka source reads the samples (assign(), no consumer group)"),
    Grant(Role.JOB, Where.TRANSPORT, "TOPIC", "{events_topic}", "WRITE",
          "publish events (idempotent producers: the driver's and the executors')"),
    Grant(Role.JOB, Where.TRANSPORT, "TOPIC", "{events_topic}", "READ",
          "read back the event ids already written (the newest at start, a micro-batch's own when it or one of its "
          "tasks runs again), so that each event is published once"),
    Grant(Role.JOB, Where.TRANSPORT, "TOPIC", "{quarantine_topic}", "WRITE",
          "publish samples that fail validation, with their reason"),
    Grant(Role.JOB, Where.TRANSPORT, "TOPIC", "{events_topic}", "CREATE",
          "create the events topic when it is missing", create_only=True),
    Grant(Role.JOB, Where.TRANSPORT, "TOPIC", "{quarantine_topic}", "CREATE",
          "create the quarantine topic when it is missing", create_only=True),
)


def grants(role: Role, where: Where | None = None) -> list[Grant]:
    return [g for g in GRANTS if g.role == role and (where is None or g.where == where)]


# ---------------------------------------------------------------------------------------------- documentation
_CAMEL = {"DESCRIBE_CONFIGS": "DescribeConfigs", "IDEMPOTENT_WRITE": "IdempotentWrite",
          "CLUSTER_ACTION": "ClusterAction", "ALTER_CONFIGS": "AlterConfigs"}


def acls_operation(operation: str) -> str:
    """kafka-acls.sh's spelling of an operation (DESCRIBE_CONFIGS -> DescribeConfigs)."""
    return _CAMEL.get(operation, operation.capitalize())


def kafka_acls_command(grant: Grant, principal: str | None = None) -> str:
    """The kafka-acls.sh command that adds ``grant`` (default topic names; ``--command-config`` holds the
    admin's client settings)."""
    user = principal or f"User:{grant.role}"
    name = grant.resource_name(TransportConfig())
    target = {"TOPIC": f"--topic '{name}'", "GROUP": f"--group '{name}'", "CLUSTER": "--cluster"}[grant.resource_type]
    return (f"kafka-acls.sh --bootstrap-server $BOOTSTRAP --command-config admin.properties --add "
            f"--allow-principal {user} --operation {acls_operation(grant.operation)} {target}")


def kafka_acls_commands() -> str:
    """Every grant as a kafka-acls.sh command, by role and cluster (default topic names)."""
    lines = []
    for role in Role:
        for where in Where:
            role_grants = grants(role, where)
            if role_grants:
                on = "each watched cluster" if where == Where.WATCHED else "the transport cluster"
                lines.append(f"# {role}, on {on}")
                lines += [kafka_acls_command(g) for g in role_grants]
    return "\n".join(lines)


def markdown_table() -> str:
    """docs/security.md's table of grants, with the default topic names."""
    transport = TransportConfig()
    rows = ["| role (principal) | cluster | resource | operation | why |", "|---|---|---|---|---|"]
    for g in GRANTS:
        resource = f"{g.resource_type} `{g.resource_name(transport)}`"
        if g.resource in TOPIC_TEMPLATES:
            resource += f" (`transport.{TOPIC_TEMPLATES[g.resource]}`)"
        why = g.why + (" (only while replmon creates the topic)" if g.create_only else "")
        rows.append(f"| {g.role} (`User:{g.role}`) | {g.where} | {resource} | {g.operation} | {why} |")
    return "\n".join(rows)


GENERATED = {"grants-table": markdown_table, "kafka-acls-commands": kafka_acls_commands}
"""docs/security.md's generated blocks: between ``<!-- generated: NAME -->`` and ``<!-- end: NAME -->``."""


def render_doc(text: str) -> str:
    """``text`` with every generated block replaced by a fresh generation."""
    for name, generate in GENERATED.items():
        start, end = f"<!-- generated: {name} -->\n", f"<!-- end: {name} -->"
        head, found, rest = text.partition(start)
        if not found:
            raise ValueError(f"no generated block {name!r}")
        _old, found, tail = rest.partition(end)
        if not found:
            raise ValueError(f"generated block {name!r} has no end")
        body = generate()
        if name == "kafka-acls-commands":
            body = f"```sh\n{body}\n```"
        text = f"{head}{start}{body}\n{end}{tail}"
    return text


# ---------------------------------------------------------------------------------------------- ACLs on a cluster
def acl_objects(role_grants: Iterable[Grant], transport: TransportConfig, principal: str) -> list[Any]:
    """kafka-python ACL objects (ALLOW from any host) for ``role_grants``."""
    from kafka.admin import ACL, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePattern, ResourceType

    out = []
    for g in role_grants:
        name = "kafka-cluster" if g.resource_type == "CLUSTER" else g.resource_name(transport)
        pattern = ResourcePattern(ResourceType[g.resource_type], name, ACLResourcePatternType.LITERAL)
        out.append(ACL(principal, "*", ACLOperation[g.operation], ACLPermissionType.ALLOW, pattern))
    return out


def admin_client(bootstrap_servers: Iterable[str], security: SecurityConfig, client_id: str,
                 bootstrap_timeout_ms: int = 10_000) -> Any:
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=list(bootstrap_servers), client_id=client_id,
                            request_timeout_ms=10_000, bootstrap_timeout_ms=bootstrap_timeout_ms,
                            **security.kafka_python())


def create_acls(admin: Any, acls: list[Any]) -> None:
    result = admin.create_acls(acls)
    if result["failed"]:
        raise ReplmonError(f"creating ACLs failed: {result['failed']}")


def delete_acls(admin: Any, acls: list[Any]) -> None:
    from kafka.admin import ACLFilter
    from kafka.errors import NoError

    filters = [ACLFilter(a.principal, a.host, a.operation, a.permission_type, a.resource_pattern) for a in acls]
    for _filter, _deleted, error in admin.delete_acls(filters):
        if error is not None and error is not NoError:
            raise ReplmonError(f"deleting ACLs failed: {error}")


# ---------------------------------------------------------------------------------------------- checks
def missing_permission(user: str | None, operation: str, resource_type: str, name: str) -> str:
    """The one line an operator reads: Kafka's error name, who, what is missing, on what."""
    who = f"user {user}" if user else "this client"
    code = {"TOPIC": "TOPIC_AUTHORIZATION_FAILED", "GROUP": "GROUP_AUTHORIZATION_FAILED",
            "CLUSTER": "CLUSTER_AUTHORIZATION_FAILED"}[resource_type]
    return f"{code}: {who} lacks {operation} on {resource_type.lower()} {name}"


CHECK_BOOTSTRAP_TIMEOUT_MS = 5_000
"""How long :func:`check_access` tries to reach the samples cluster before it lets the stage start anyway."""
TOPIC_AUTHORIZATION_FAILED: int = Errors.TopicAuthorizationFailedError.errno
CLUSTER_AUTHORIZATION_FAILED: int = Errors.ClusterAuthorizationFailedError.errno
UNKNOWN_TOPIC_OR_PARTITION: int = Errors.UnknownTopicOrPartitionError.errno


def check_topic_grants(admin: Any, user: str | None, topic_grants: list[tuple[str, Grant]]) -> str | None:
    """The first grant of ``topic_grants`` ((topic, grant) pairs) that the broker does not give ``user``,
    as :func:`missing_permission`; None when every one is given. A topic that does not exist yet passes (its
    creation reports a missing CREATE)."""
    topics = sorted({t for t, _ in topic_grants})
    described = {t["name"]: t for t in admin.describe_topics(topics)}
    for topic, grant in topic_grants:
        info = described.get(topic)
        if info is None:
            continue
        code = info.get("error_code", 0)
        if code == UNKNOWN_TOPIC_OR_PARTITION:
            continue
        if grant.create_only:
            continue
        if code == TOPIC_AUTHORIZATION_FAILED:
            return missing_permission(user, grant.operation, "TOPIC", topic)
        allowed = info.get("authorized_operations")
        if allowed is not None and grant.operation not in allowed:
            return missing_permission(user, grant.operation, "TOPIC", topic)
    return None


def check_access(config: ReplmonConfig, role: Role) -> None:
    """Before a stage starts: raise one clear ReplmonError when the transport cluster refuses ``role``'s user
    (authentication, TLS) or withholds one of its grants. An unreachable cluster passes: the stages wait for it
    and say so themselves."""
    topic_grants = [(g.resource_name(config.transport), g) for g in grants(role, Where.TRANSPORT)
                    if g.resource_type == "TOPIC"]
    security = config.samples_security()
    servers = config.samples_bootstrap()
    admin = connect_admin(servers, security, f"replmon-{role}-check", what="samples cluster")
    if admin is None:
        return
    try:
        problem = check_topic_grants(admin, security.username, topic_grants)
    finally:
        admin.close()
    if problem:
        raise ReplmonError(f"samples cluster {','.join(servers)}: {problem} "
                           f"(docs/security.md lists the ACLs of the {role})")


def connect_admin(servers: list[str], security: SecurityConfig, client_id: str, what: str) -> Any | None:
    """An admin client; None when nothing answers; one clear ReplmonError when the cluster refuses us. No bootstrap
    server accepting a connection (a host name that does not resolve, nothing listening) is None at once, not after
    the client's bootstrap timeout."""
    from replmon.core.kafka_diagnose import none_reachable, refusal

    why = none_reachable(servers)
    if why is not None:
        log.debug("%s %s not reachable: %s", what, servers, why)
        return None
    try:
        return admin_client(servers, security, client_id, bootstrap_timeout_ms=CHECK_BOOTSTRAP_TIMEOUT_MS)
    except Exception as exc:
        reason = refusal(servers, security)
        if reason is None:
            log.debug("%s %s not reachable: %s", what, servers, exc)
            return None
        raise ReplmonError(f"{what} {','.join(servers)}: {reason}") from None
