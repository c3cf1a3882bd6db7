"""Shared plumbing every stage uses: the configuration model, errors, paths, security settings and their checks,
redaction of secrets in logs, Kafka topic helpers, process and garbage-collector helpers.

The lowest floor: it imports nothing else of replmon."""
