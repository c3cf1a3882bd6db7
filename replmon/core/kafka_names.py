"""Kafka's rule for a topic name (``org.apache.kafka.common.internals.Topic.validate``): 1 to 249 ASCII
alphanumerics, '.', '_' and '-', and neither "." nor "..". Pure: the configuration checks the topics replmon writes
with it, and the log-dir agent reads a partition's directory name by it."""

from __future__ import annotations

import re

MAX_TOPIC_LENGTH = 249
"""Topic.MAX_NAME_LENGTH: a partition's directory name, topic-N, must fit the 255 bytes of a file name."""
TOPIC_CHARACTER = "[A-Za-z0-9._-]"
TOPIC_NAME = rf"{TOPIC_CHARACTER}{{1,{MAX_TOPIC_LENGTH}}}"
"""A topic name as a regular expression (without "." and "..", which only :func:`topic_problem` refuses)."""


def topic_problem(name: str) -> str | None:
    """Why Kafka refuses ``name`` as a topic's name (its CreateTopics answers INVALID_TOPIC_EXCEPTION); None when it
    takes it."""
    if not name:
        return "a topic name cannot be empty"
    if name in (".", ".."):
        return f"a topic name cannot be {name!r}"
    if len(name) > MAX_TOPIC_LENGTH:
        return f"topic name {name[:40]!r}... is {len(name)} characters, over Kafka's {MAX_TOPIC_LENGTH}"
    if not re.fullmatch(TOPIC_NAME, name):
        bad = sorted({c for c in name if not re.fullmatch(TOPIC_CHARACTER, c)})
        return (f"topic name {name!r} holds {', '.join(map(repr, bad))}: Kafka takes ASCII letters, digits, '.', '_' "
                f"and '-'")
    return None
