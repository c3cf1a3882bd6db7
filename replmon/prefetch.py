"""Download and cache every artifact replmon runs from Maven Central (Kafka for the local cluster, and Spark's
Kafka connector once the job exists), so that later starts need no network: ``python -m replmon.prefetch``."""

from __future__ import annotations

import sys

from replmon.errors import ReplmonError
from replmon.localcluster import artifacts


def main() -> int:
    try:
        libs = artifacts.kafka_libs()
        print(f"kafka {artifacts.KAFKA_VERSION}: {libs}")
    except ReplmonError as exc:
        print(f"replmon: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
