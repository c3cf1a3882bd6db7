"""Secrets are masked in log records (kafka-python logs its configuration, password included, at DEBUG)."""

from __future__ import annotations

import logging

from replmon.core.config import ReplmonConfig
from replmon.core.redact import MASK, SecretFilter, redact, secrets_of

CONFIG = ReplmonConfig(
    clusters=[{"name": "prod", "bootstrap_servers": ["k1:9093"],
               "security": {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "username": "collector",
                            "password": "s3cret-watched"}}],
    transport={"bootstrap_servers": ["t1:9093"],
               "security": {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "username": "collector",
                            "password": "s3cret-transport"}},
    grafana={"token": "glsa_token_value"},
)


def test_every_secret_of_the_configuration_is_found() -> None:
    assert sorted(secrets_of(CONFIG)) == ["glsa_token_value", "s3cret-transport", "s3cret-watched"]


def test_values_and_password_like_keys_are_masked() -> None:
    kafka_python = ("Starting KafkaAdminClient with configuration: {'sasl_plain_username': 'collector', "
                    "'sasl_plain_password': 'anything-at-all', 'ssl_check_hostname': True}")
    assert redact(kafka_python) == kafka_python.replace("anything-at-all", MASK)
    jaas = 'ScramLoginModule required username="job" password="p@ss";'
    assert redact(jaas) == jaas.replace("p@ss", MASK)
    assert redact("connected with s3cret-watched in the middle", secrets_of(CONFIG)) == \
        f"connected with {MASK} in the middle"
    plain = "authentication failed; check security.username, password and sasl_mechanism"
    assert redact(plain, secrets_of(CONFIG)) == plain


def test_the_filter_rewrites_formatted_records() -> None:
    record = logging.LogRecord("kafka.admin", logging.DEBUG, __file__, 1, "config: %s", ({"pw": "s3cret-watched"},),
                               None)
    assert SecretFilter(secrets_of(CONFIG)).filter(record)
    assert "s3cret-watched" not in record.getMessage() and MASK in record.getMessage()
