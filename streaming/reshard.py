"""Changing the state parallelism of a checkpoint (``stream.state_parallelism``, docs/deploy.md).

Spark fixes a stateful query's tasks (``spark.sql.shuffle.partitions``) at its first micro-batch: every later run
of the query on that checkpoint uses the recorded count, whatever the session says. A new count takes a new query:
the job starts one in a new directory beside the old (``state-<n>``), seeded with the old query's last committed
state (Spark's state data source reads it, each bucket re-keyed to the id that balances it over the new tasks, and
the processor's ``handleInitialState`` stores it) and reading the samples topic from where the old query's last
committed micro-batch ended. The new layout (streaming.buckets) names the query and where it came from until its
first commit, so a job stopped in between starts the move again; the old query's directory stays as it was.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from replmon.core import locations
from replmon.core.errors import ReplmonError
from streaming.storage import HadoopDirectory

STATE_VARIABLE = "partitions"
"""The processor's one state variable (streaming.processor.BucketTable): the bucket's packed table."""


@dataclass(frozen=True)
class QueryLog:
    """A streaming query's offsets and commits logs in its checkpoint directory (Spark's format: ``offsets/<batch>``
    holds ``v1``, the batch's metadata as JSON, then one line per source; ``commits/<batch>`` marks it done)."""

    checkpoint: HadoopDirectory
    query: str
    """The query's directory under the checkpoint."""

    def last_committed(self) -> int | None:
        """The newest micro-batch the query committed; None before its first commit."""
        batches = [int(name) for name in self.checkpoint.list(f"{self.query}/commits") if name.isdigit()]
        return max(batches, default=None)

    def _offsets(self, batch: int) -> list[str]:
        data = self.checkpoint.read_bytes(f"{self.query}/offsets/{batch}")
        if data is None:
            raise ReplmonError(f"{locations.join(self.checkpoint.location, self.query, 'offsets', str(batch))} is "
                               "missing: the checkpoint's offsets log does not hold its last committed micro-batch")
        return data.decode().splitlines()

    def tasks(self, batch: int) -> int | None:
        """The stateful tasks the query ran micro-batch ``batch`` with (its recorded spark.sql.shuffle.partitions)."""
        conf: dict[str, Any] = json.loads(self._offsets(batch)[1]).get("conf", {})
        value = conf.get("spark.sql.shuffle.partitions")
        return None if value is None else int(value)

    def source_offsets(self, batch: int) -> str:
        """Where micro-batch ``batch`` ended in the samples topic, as the Kafka source's ``startingOffsets`` takes
        it (``{"topic": {"partition": offset}}``)."""
        sources = self._offsets(batch)[2:]
        if len(sources) != 1:
            raise ReplmonError(f"{self.query}: {len(sources)} sources in the offsets log, the job has one")
        return sources[0]


def seed_state(spark: SparkSession, checkpoint: str, query: str, batch: int, new_ids: dict[int, int]) -> DataFrame:
    """The old query's state at ``batch`` (its last commit) as the new query's initial state: ``bucket`` (the
    bucket's id in the new layout, from ``new_ids``: old id -> new id) and ``partitions`` (the packed table, as
    stored)."""
    state = (spark.read.format("statestore").option("stateVarName", STATE_VARIABLE).option("batchId", batch)
             .load(locations.spark_uri(locations.join(checkpoint, query))))
    mapping = F.create_map(*[F.lit(x) for pair in sorted(new_ids.items()) for x in pair])
    return state.select(mapping[F.col("key.bucket")].cast("int").alias("bucket"),
                        F.col("list_element.partitions").alias("partitions"))
