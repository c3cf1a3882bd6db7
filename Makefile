# The two commands of the README, and the setup both depend on (idempotent: scripts/setup).
.PHONY: setup run test lint
setup:
	@bash scripts/setup

run: setup
	.venv/bin/replmon demo

test: setup
	.venv/bin/pytest

lint: setup
	.venv/bin/ruff check . && .venv/bin/mypy
