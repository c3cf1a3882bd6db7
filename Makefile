# The two commands of the README, and the setup both depend on (idempotent: scripts/setup).
PURE = not cluster and not spark and not prometheus and not hdfs

.PHONY: setup run test test-fast lint
setup:
	@bash scripts/setup

run: setup
	.venv/bin/replmon demo

# two workers: the tests of the real tiers in order on one, the pure tests beside them (tests/conftest.py)
test: setup
	.venv/bin/pytest -n 2 --dist loadgroup

# the pure tier: no Kafka cluster, Spark session, Prometheus or HDFS (under a minute)
test-fast: setup
	.venv/bin/pytest -n 2 --dist loadgroup -m "$(PURE)"

lint: setup
	.venv/bin/ruff check . && .venv/bin/mypy
