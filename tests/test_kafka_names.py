"""Kafka's rule for a topic name, as the configuration checks the topics replmon writes: every name it refuses is
one a real broker refuses (its CreateTopics answer, validate-only), and every name it takes, the broker takes."""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient

from replmon.core.config import ReplmonConfig
from replmon.core.kafka_names import MAX_TOPIC_LENGTH, topic_problem
from replmon.testbed.localcluster import LocalCluster

INVALID_TOPIC_EXCEPTION = 17
NAMES = ["replmon.samples", "replmon_events-2", "a" * MAX_TOPIC_LENGTH, "a" * (MAX_TOPIC_LENGTH + 1), ".", "..",
         "...", "", "bad topic!", "täst", "x/y", "-", "_"]


@pytest.mark.parametrize(("name", "said"), [
    ("bad topic!", "topic name 'bad topic!' holds ' ', '!': Kafka takes ASCII letters, digits, '.', '_' and '-'"),
    ("..", "a topic name cannot be '..'"),
    ("", "a topic name cannot be empty"),
    ("a" * 250, f"topic name {'a' * 40!r}... is 250 characters, over Kafka's 249"),
])
def test_a_topic_name_kafka_refuses_is_said_with_why(name: str, said: str) -> None:
    assert topic_problem(name) == said


def test_the_transport_s_topics_are_checked_and_kept_apart() -> None:
    with pytest.raises(ValueError, match=r"transport.events_topic\n  Value error, topic name 'replmon events'"):
        ReplmonConfig.model_validate({"transport": {"events_topic": "replmon events"}})
    with pytest.raises(ValueError, match="samples_topic and quarantine_topic are both 'x': each needs a topic of its "
                                         "own"):
        ReplmonConfig.model_validate({"transport": {"samples_topic": "x", "quarantine_topic": "x"}})
    with pytest.raises(ValueError, match="topic_replication_factor"):
        ReplmonConfig.model_validate({"transport": {"topic_replication_factor": 0}})


@pytest.mark.cluster
def test_the_names_refused_are_those_a_broker_refuses(cluster: LocalCluster) -> None:
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, client_id="replmon-test-names")
    try:
        answer = admin.create_topics({name: {"num_partitions": 1, "replication_factor": 1} for name in NAMES},
                                     validate_only=True, raise_errors=False)
    finally:
        admin.close()
    codes = {entry["name"]: entry["error_code"] for entry in answer["topics"]}
    assert set(codes) == set(NAMES)
    assert set(codes.values()) == {0, INVALID_TOPIC_EXCEPTION}  # nothing refused for another reason
    assert {n for n in NAMES if topic_problem(n) is not None} == {n for n, c in codes.items() if c != 0}
