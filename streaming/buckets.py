"""Which state bucket a partition's samples go to, and which of the state query's tasks holds each bucket.

A partition's bucket is ``pmod(xxhash64("cluster/topic/partition"), state_buckets)``; the bucket's *id*, the
state key, is ``bucket_ids[bucket]``. Spark sends each id to one of the state query's
``spark.sql.shuffle.partitions`` tasks by Murmur3 hash, and the ids 0..31 split 12 / 20 between 2 tasks: the
state stage of every micro-batch waits for the task with 20 (docs/benchmarks.md, "Streaming job"). A new
checkpoint gets ids chosen so that each task holds as many buckets as the others.

A new checkpoint gets ``stream.state_buckets`` buckets, or, unset, :func:`default_buckets` of the state query's
tasks: few buckets per task, because every bucket a micro-batch reaches costs a fixed share of it whatever its size
(its state value loaded and saved, its round trips between the Python worker and the JVM, the steps' fixed cost),
and more than one per task, so that the state can move to more tasks later (a bucket is never split).

The bucket count is fixed for the life of a checkpoint: a partition hashed into another bucket would start from
an empty state there (its history gone) while the old bucket kept reporting it, STALE. The layout is written next
to the checkpoint (:data:`LAYOUT_FILE`, on the checkpoint's filesystem) and a configuration that no longer
matches it is refused. The state query's tasks can change (``stream.state_parallelism``): the state moves to a
new query with ids balanced over the new count (streaming.reshard), recorded as the layout's next generation
(``replmon-buckets-<n>.json``: the highest one is the checkpoint's layout).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence

import mmh3
from pydantic import BaseModel, ValidationError
from pyspark.sql import SparkSession

from replmon.core import locations
from replmon.core.config import MAX_STATE_BUCKETS
from replmon.core.errors import ReplmonError
from streaming.reshard import QueryLog
from streaming.storage import HadoopDirectory

LAYOUT_FILE = "replmon-buckets.json"
_GENERATION = re.compile(r"^replmon-buckets(?:-(\d+))?\.json$")


def layout_file(generation: int) -> str:
    return LAYOUT_FILE if generation == 0 else f"replmon-buckets-{generation}.json"


class Resharding(BaseModel):
    """Where a query with a new state parallelism takes its initial state and its first offsets from."""

    query: str
    """The old query's directory under the checkpoint."""
    batch: int
    """The old query's last committed micro-batch."""
    bucket_ids: list[int]
    """The old layout's ids: bucket ``i`` moves from ``bucket_ids[i]`` to the new layout's ``bucket_ids[i]``."""


class BucketLayout(BaseModel):
    state_buckets: int
    shuffle_partitions: int | None
    """The state query's tasks the ids are balanced over; None for a checkpoint written before layouts were
    recorded (ids 0..state_buckets-1, as then)."""
    bucket_ids: list[int]
    query: str = "state"
    """The state query's directory under the checkpoint."""
    resharded_from: Resharding | None = None
    """The query this one replaced (its state seeds this one's first micro-batch); None for the first."""


BUCKETS_PER_TASK = 8
"""A new checkpoint's buckets per state task, unless ``stream.state_buckets`` says otherwise: on this project's
2-core bench, 16 buckets processed 5-31% more samples per second than 32 (three pairs back to back;
docs/benchmarks.md, "Streaming job"), and 8 per task leave room for the state to move to 8 times the tasks."""
MIN_BUCKETS = 8
LEGACY_BUCKETS = 32
"""The bucket count of every checkpoint written before layouts were recorded (the default then)."""


def state_tasks(spark: SparkSession) -> int:
    """The tasks a new state query gets (``spark.sql.shuffle.partitions``, which streaming.session sets)."""
    return int(spark.conf.get("spark.sql.shuffle.partitions") or "200")


def default_buckets(tasks: int) -> int:
    """A new checkpoint's bucket count for a state query of ``tasks`` tasks (:data:`BUCKETS_PER_TASK`)."""
    return min(MAX_STATE_BUCKETS, max(MIN_BUCKETS, BUCKETS_PER_TASK * tasks))


def balanced_ids(task_of: Sequence[int], buckets: int, tasks: int) -> list[int]:
    """``buckets`` ids, round robin over the ``tasks`` tasks: the k-th bucket gets the smallest unused id whose
    task (``task_of[id]``) is ``k % tasks``. ``task_of`` must hold enough ids of each task."""
    by_task: list[list[int]] = [[] for _ in range(tasks)]
    for bucket_id, task in enumerate(task_of):
        by_task[task].append(bucket_id)
    wanted = [len(range(t, buckets, tasks)) for t in range(tasks)]
    short = [t for t in range(tasks) if len(by_task[t]) < wanted[t]]
    if short:
        raise ValueError(f"{len(task_of)} ids are too few for {buckets} buckets on task {short[0]}")
    return [by_task[k % tasks][k // tasks] for k in range(buckets)]


SPARK_HASH_SEED = 42
"""The seed of Spark's ``hash`` (Murmur3Hash), which its hash partitioning uses."""


def task_of_ids(count: int, tasks: int) -> list[int]:
    """The state query's task of each id 0..count-1: Spark's hash partitioning of the int grouping key,
    ``pmod(hash(id), tasks)``, where Spark's ``hash`` of an int is Murmur3 x86_32 of its four little-endian bytes
    with seed 42 (tested against Spark's). Computed here: as a Spark job it would be the JVM's first job, ~3 s of a
    new checkpoint's start (docs/benchmarks.md, "Job start-up")."""
    return [mmh3.hash(struct.pack("<i", i), SPARK_HASH_SEED) % tasks for i in range(count)]


def _recorded(checkpoint: HadoopDirectory) -> tuple[int, str] | None:
    """The newest layout's generation and file name; None when none was recorded."""
    found = [(int(m.group(1) or 0), name) for name in checkpoint.list() if (m := _GENERATION.match(name))]
    return max(found, default=None)


def resolve_layout(spark: SparkSession, checkpoint: HadoopDirectory, state_buckets: int | None,
                   parallelism: int | None = None) -> BucketLayout:
    """The checkpoint's bucket layout: the recorded one (refused when ``state_buckets`` is set and differs), or,
    recorded now, that of a checkpoint written before layouts were (ids 0..n-1, n the configured count, or
    :data:`LEGACY_BUCKETS` unset: the count it was written with) or a new balanced one for a new checkpoint
    (``state_buckets``, or :func:`default_buckets` of the state query's tasks). ``parallelism`` (the configured
    ``stream.state_parallelism``) other than the tasks the state query last committed with: the next generation,
    a new query seeded from that commit (streaming.reshard)."""
    found = _recorded(checkpoint)
    if found is not None:
        generation, name = found
        path = locations.join(checkpoint.location, name)
        try:
            layout = BucketLayout.model_validate_json(checkpoint.read_bytes(name) or b"")
        except ValidationError as exc:
            raise ReplmonError(f"cannot read the state bucket layout {path}: {exc}") from exc
        if len(set(layout.bucket_ids)) != layout.state_buckets:
            raise ReplmonError(f"the state bucket layout {path} is damaged: {len(set(layout.bucket_ids))} distinct "
                               f"bucket ids for {layout.state_buckets} buckets")
        if state_buckets is not None and layout.state_buckets != state_buckets:
            raise ReplmonError(
                f"stream.state_buckets is {state_buckets}, but the checkpoint {checkpoint.location} holds its "
                f"partitions in {layout.state_buckets} buckets: rehashing them would lose their state. Set "
                f"state_buckets back to {layout.state_buckets} (or leave it unset: the checkpoint's count), or give "
                "the job a new checkpoint_dir (it starts afresh there).")
        return layout if parallelism is None else _resharded(spark, checkpoint, generation, layout, parallelism)
    if checkpoint.is_dir("state/offsets"):  # a checkpoint of a replmon that did not record its layout
        count = state_buckets if state_buckets is not None else LEGACY_BUCKETS
        layout = BucketLayout(state_buckets=count, shuffle_partitions=None, bucket_ids=list(range(count)))
    else:
        tasks = state_tasks(spark)
        count = state_buckets if state_buckets is not None else default_buckets(tasks)
        layout = BucketLayout(state_buckets=count, shuffle_partitions=tasks,
                              bucket_ids=new_bucket_ids(count, tasks))
    checkpoint.create(LAYOUT_FILE, layout.model_dump_json().encode())
    return layout if parallelism is None else _resharded(spark, checkpoint, 0, layout, parallelism)


def _resharded(spark: SparkSession, checkpoint: HadoopDirectory, generation: int, layout: BucketLayout,
               parallelism: int) -> BucketLayout:
    """``layout``, or its next generation when the state query last committed with other than ``parallelism``
    tasks. A query that has not committed yet (a new checkpoint, or a move under way) keeps its layout."""
    log = QueryLog(checkpoint, layout.query)
    last = log.last_committed()
    if last is None or log.tasks(last) in (None, parallelism):
        return layout
    new = BucketLayout(state_buckets=layout.state_buckets, shuffle_partitions=parallelism,
                       bucket_ids=new_bucket_ids(layout.state_buckets, parallelism),
                       query=f"state-{generation + 1}",
                       resharded_from=Resharding(query=layout.query, batch=last, bucket_ids=layout.bucket_ids))
    checkpoint.create(layout_file(generation + 1), new.model_dump_json().encode())
    return new


def new_bucket_ids(buckets: int, tasks: int) -> list[int]:
    """:func:`balanced_ids` over the first ids, as many as it takes (:func:`task_of_ids`)."""
    count = 2 * max(buckets, tasks) + 64
    while True:  # Murmur3 spreads the ids evenly over the tasks: rarely more than one round
        try:
            return balanced_ids(task_of_ids(count, tasks), buckets, tasks)
        except ValueError:
            count *= 2
