"""The job's side of ``partition_batch/v1`` records (:mod:`replmon.contracts.batches`): read, checked entry by entry
against the pydantic model, and split by state bucket, in the Python workers before the state stage.

A record that is not a readable IPC stream of the batch schema is quarantined whole with its reason; within a
readable one, each entry that fails a check of the model (the checks of :mod:`streaming.schema`, on Arrow arrays)
is quarantined alone, and the valid entries go on, grouped by the state bucket their partition hashes to
(``pmod(xxhash64("cluster/topic/partition"), buckets)``, as Spark hashes a JSON record's key:
:mod:`streaming.buckets`). Each group travels to the processor as one IPC stream (:func:`split_batch`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, get_args, get_origin

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash
from pydantic import BaseModel

from replmon.contracts.batches import (
    ARROW_SCHEMA,
    COMPRESSED,
    ENTRY_MODEL,
    SCHEMA_KEY,
    SKIPPED,
    StreamTooLarge,
    read_stream,
    write_stream,
)
from replmon.contracts.fields import annotated, json_name, unwrap
from replmon.contracts.samples import PARTITION_SCHEMA
from streaming.json_chars import json_chars
from streaming.schema import (
    BAD_LENGTH,
    MISSING_FIELD,
    OUT_OF_RANGE,
    QUARANTINE_VALUE_MAX_CHARS,
    UNKNOWN_FIELD,
    UNKNOWN_SCHEMA,
    WRONG_TYPE,
)
from streaming.steady import (
    MEMBERSHIP,
    NULL,
    SAMPLE_VALUES,
    Lists,
    SampleColumns,
    SteadyColumns,
    fingerprints,
    lineage_fingerprints,
)

MALFORMED_BATCH = "malformed_batch"
OVERSIZED_BATCH = "oversized_batch"
BATCH_REASONS = (MALFORMED_BATCH, OVERSIZED_BATCH)
MAX_BATCH_ENTRIES = 200_000
"""More entries than this in one record is not a collector's batch (it publishes a few thousand per record)."""
SEED = 42
"""Spark's seed for xxhash64."""

Masks = list[tuple[np.ndarray, str]]


ADDED_FIELDS = ("adding_replicas", "removing_replicas")
"""Entry fields added to ``partition_batch/v1`` after its first collectors: a batch may lack them (one of an older
collector), read with each null in all its entries (each defaults to None in the model: not known). Any other field
missing is the batch's quarantine reason."""
assert all(ENTRY_MODEL.model_fields[name].default is None for name in ADDED_FIELDS)


class BatchError(ValueError):
    """A record that is not a batch this job reads: its quarantine reason."""


def read_batch(value: bytes) -> pa.Table:
    """The batch's entries; :class:`BatchError` with the quarantine reason when the value is not an IPC stream
    of the batch schema (a damaged stream, whose buffers do not hold what it declares, is not one:
    :func:`~replmon.contracts.batches.read_stream` validates it), or declares more than :data:`MAX_BATCH_ENTRIES`
    entries or more than :data:`~replmon.contracts.batches.MAX_STREAM_BYTES` decompressed (refused before any of its
    buffers is decompressed: a record of LZ4 frames may expand ~255 times)."""
    try:
        table = read_stream(value, max_rows=MAX_BATCH_ENTRIES)
    except StreamTooLarge as exc:  # found before its buffers were decompressed
        raise BatchError(OVERSIZED_BATCH) from exc
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, ValueError) as exc:
        raise BatchError(MALFORMED_BATCH) from exc
    schema = table.schema
    if (schema.metadata or {}).get(SCHEMA_KEY) != ARROW_SCHEMA.metadata[SCHEMA_KEY]:
        raise BatchError(UNKNOWN_SCHEMA)
    for field in ARROW_SCHEMA:
        index = schema.get_field_index(field.name)
        if index < 0 and field.name in ADDED_FIELDS:  # a batch of a collector older than the field
            table = table.append_column(field, pa.nulls(table.num_rows, field.type))
            schema = table.schema
            continue
        if index < 0:
            raise BatchError(f"{MISSING_FIELD}:{field.name}")
        if schema.field(index).type != field.type:
            raise BatchError(f"{WRONG_TYPE}:{field.name}")
    for field in schema:
        if ARROW_SCHEMA.get_field_index(field.name) < 0:
            raise BatchError(f"{UNKNOWN_FIELD}:{field.name}")
    # the contract's schema itself: a writer may have marked a field non-nullable, and records of two such
    # schemas would not concatenate
    return table.select(ARROW_SCHEMA.names).cast(ARROW_SCHEMA).combine_chunks()


def _numpy(array: pa.Array, fill: Any) -> np.ndarray:
    return np.asarray((pc.fill_null(array, fill) if array.null_count else array).to_numpy(zero_copy_only=False))


class _Plan(NamedTuple):
    """The checks of one field (read off the model once, as pydantic applies them to a JSON record): its own, its
    list items', its struct fields'."""

    where: str
    required: bool
    ge: int | None
    le: int | None
    min_len: int | None
    max_len: int | None
    is_list: bool
    items: _Plan | None
    fields: tuple[tuple[str, _Plan], ...]


def _plan(annotation: Any, required: bool, where: str) -> _Plan:
    base, optional, bounds = unwrap(annotation)
    is_int = isinstance(base, type) and issubclass(base, int) and not issubclass(base, bool)
    items = fields = None
    if get_origin(base) is list:
        (item,) = get_args(base)
        items = _plan(item, not unwrap(item)[1], f"{where}[]")
    elif isinstance(base, type) and issubclass(base, BaseModel):
        fields = tuple((json_name(n, f), _plan(annotated(f), f.is_required(), f"{where}.{json_name(n, f)}"))
                       for n, f in base.model_fields.items())
    return _Plan(where, required and not optional, bounds.ge if is_int else None, bounds.le if is_int else None,
                 bounds.min_len, bounds.max_len, get_origin(base) is list, items, fields or ())


PLANS = tuple((json_name(n, f), _plan(annotated(f), f.is_required(), json_name(n, f)))
              for n, f in ENTRY_MODEL.model_fields.items() if json_name(n, f) not in SKIPPED)


def _checks(array: pa.Array, plan: _Plan) -> Masks:
    """(bad entries, reason) for every check of the field's plan on one column."""
    present = ~np.asarray(array.is_null().to_numpy(zero_copy_only=False), bool)
    where = plan.where
    out: Masks = []
    if plan.required:
        out.append((~present, f"{MISSING_FIELD}:{where}"))
    if plan.ge is not None or plan.le is not None:
        values = _numpy(array, 0)
        if plan.ge is not None:
            out.append((present & (values < plan.ge), f"{OUT_OF_RANGE}:{where}"))
        if plan.le is not None:
            out.append((present & (values > plan.le), f"{OUT_OF_RANGE}:{where}"))
    if plan.min_len is not None or plan.max_len is not None:
        lengths = _numpy(pc.list_value_length(array) if plan.is_list else pc.utf8_length(array), 0)
        if plan.min_len is not None:
            out.append((present & (lengths < plan.min_len), f"{BAD_LENGTH}:{where}"))
        if plan.max_len is not None:
            out.append((present & (lengths > plan.max_len), f"{BAD_LENGTH}:{where}"))
    if plan.items is not None:
        items = pc.list_flatten(array)
        if len(items):
            parents = np.asarray(pc.list_parent_indices(array).to_numpy(zero_copy_only=False), np.int64)
            for bad, reason in _checks(items, plan.items):
                if bad.any():
                    entries = np.zeros(len(array), bool)
                    entries[parents[bad]] = True
                    out.append((entries, reason))
    for key, field in plan.fields:
        out += [(present & bad, reason) for bad, reason in _checks(array.field(key), field)]
    return out


def entry_reasons(table: pa.Table) -> list[str | None]:
    """Each entry's first failed check of the entry model (``None`` when valid)."""
    return list(_reasons(table).tolist())


def _reasons(table: pa.Table) -> np.ndarray:
    """:func:`entry_reasons` as an object array."""
    reasons: np.ndarray = np.full(table.num_rows, None, object)
    failed = np.zeros(table.num_rows, bool)
    for key, plan in PLANS:
        for bad, reason in _checks(table.column(key).combine_chunks(), plan):
            if bad.any():
                reasons[bad & ~failed] = reason
                failed |= bad
    return reasons


def _strings(array: pa.Array | pa.ChunkedArray) -> list[Any]:
    return list(array.to_numpy(zero_copy_only=False).tolist())


def bucket_of(key: str, bucket_ids: Sequence[int]) -> int:
    """The bucket id of a state key (a JSON record's): Spark's ``pmod(xxhash64(key), buckets)`` picks it, as
    :func:`buckets_of` for a batch's entries."""
    digest = xxhash.xxh64_intdigest(key.encode(), SEED)
    return bucket_ids[(digest - 2**64 if digest >= 2**63 else digest) % len(bucket_ids)]


def _key_hashes(keys: Sequence[str]) -> np.ndarray:
    """Spark's ``xxhash64`` of each key (its UTF-8 bytes), as signed 64-bit integers."""
    return np.fromiter((xxhash.xxh64_intdigest(key.encode(), SEED) for key in keys), np.uint64,
                       len(keys)).view(np.int64)


class KeyHashes:
    """The hashes of partition keys (``cluster/topic/partition``) per topic, by partition number, made once in a
    worker's life: a collector samples the same partitions every cycle, and hashing each entry's key in Python was
    ~40% of a read task's split (the same partitions' keys formatted, encoded and hashed every micro-batch). A
    topic's array covers its partitions up to the highest seen; the cache starts again past MAX_CACHED_KEYS keys
    (32 MB of hashes, a fleet of 1,000,000 partitions with room to grow)."""

    MAX_CACHED_PARTITION = 1 << 16
    """A partition number at or past this is hashed as its key is written, each time (a hostile one would
    otherwise make its topic's array that long)."""
    MAX_CACHED_KEYS = 1 << 22

    def __init__(self) -> None:
        self.by_topic: dict[str, np.ndarray] = {}
        self.keys = 0

    def of(self, prefix: str, partitions: np.ndarray) -> np.ndarray:
        """The hashes of ``prefix/partition`` for ``partitions`` (each ``>= 0``, below MAX_CACHED_PARTITION)."""
        known = self.by_topic.get(prefix)
        upto = int(partitions.max()) + 1
        if known is None or len(known) < upto:
            have = 0 if known is None else len(known)
            upto = max(upto, 2 * have)  # a growing topic is hashed again a few times, not every micro-batch
            if self.keys + upto - have > self.MAX_CACHED_KEYS:
                self.by_topic.clear()
                self.keys = have = 0
                known = None
            more = _key_hashes([f"{prefix}/{p}" for p in range(have, upto)])
            known = more if known is None else np.concatenate([known, more])
            self.by_topic[prefix] = known
            self.keys += len(more)
        return known[partitions]


KEY_HASHES = KeyHashes()
"""The worker's hashes of the partition keys it has split (:func:`buckets_of`)."""


def buckets_of(table: pa.Table, buckets: int, hashes: KeyHashes = KEY_HASHES) -> np.ndarray:
    """The state bucket (0..buckets-1) of each entry: Spark's ``pmod(xxhash64(key), buckets)`` of its key
    ``cluster/topic/partition``. The hashes of a topic's usual partition numbers come from ``hashes``; any other
    key (a partition number past its bound, none) is hashed as it is written."""
    n = table.num_rows
    partition = table.column("partition")
    numbers = _numpy(partition, -1)
    cached = (numbers >= 0) & (numbers < hashes.MAX_CACHED_PARTITION)
    out = np.empty(n, np.int64)
    prefixes = pc.binary_join_element_wise(table.column("cluster"), table.column("topic"), "/").combine_chunks()
    encoded = prefixes.dictionary_encode()
    codes = _numpy(encoded.indices, -1)
    names = encoded.dictionary.to_pylist()
    cached &= codes >= 0  # a null cluster or topic: its key as it is written
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    starts = np.searchsorted(sorted_codes, np.arange(len(names)))
    ends = np.searchsorted(sorted_codes, np.arange(len(names)), side="right")
    for code, (start, end) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        rows = order[start:end]
        rows = rows[cached[rows]]
        if len(rows):
            out[rows] = hashes.of(names[code], numbers[rows])
    rest = np.flatnonzero(~cached)
    if len(rest):
        taken = table.take(pa.array(rest))
        out[rest] = _key_hashes([f"{c}/{t}/{p}" for c, t, p in zip(
            _strings(taken.column("cluster")), _strings(taken.column("topic")), _strings(taken.column("partition")),
            strict=True)])
    return np.mod(out, buckets)


def entry_json(table: pa.Table, row: int) -> tuple[str, int]:
    """One entry as the JSON record a collector would have written (for the quarantine), and that JSON's whole length
    in characters. A list of more items than the quarantine keeps characters is written with that many, its first
    (each item is at least two characters: the text the quarantine keeps is the same); a bad entry's list may hold
    millions (a lineage in a batch record of LZ4 frames: 1,000,000 items, 3 s and ~250 MB of the read task to write
    whole). The length counts such a list whole, without writing it (:func:`streaming.json_chars.json_chars`)."""
    one = table.slice(row, 1)
    cut = 0  # characters of the lists' items left out
    for i, field in enumerate(one.schema):
        if pa.types.is_list(field.type):
            column = one.column(i).combine_chunks()
            if (pc.max(pc.list_value_length(column)).as_py() or 0) > QUARANTINE_VALUE_MAX_CHARS:
                kept = pc.list_slice(column, 0, QUARANTINE_VALUE_MAX_CHARS, return_fixed_size_list=False)
                cut += int(json_chars(column)[0] - json_chars(kept)[0])
                one = one.set_column(i, field, kept)
    entry = {"schema": PARTITION_SCHEMA, **one.to_pylist()[0]}
    text = json.dumps(entry, separators=(",", ":"))
    return text, len(text) + cut


def _valid_entries(value: bytes) -> tuple[pa.Table | None, list[tuple[str, str, int]]]:
    """A batch record's valid entries (None for none), and ``(reason, entry JSON, its whole length)`` per entry it
    quarantines (the whole record: one, with an empty entry of length 0)."""
    table, quarantined = _valid_records([value])
    return table, [(reason, entry, chars) for _, reason, entry, chars in quarantined]


def _valid_records(values: Sequence[bytes]) -> tuple[pa.Table | None, list[tuple[int, str, str, int]]]:
    """The valid entries of batch records, in one table (None when no record has any), and ``(record index,
    reason, entry JSON, its whole length)`` per entry or whole record (with an empty entry of length 0)
    quarantined, in the records' order (:func:`entry_json`: the JSON's long lists cut, the length whole). The
    entries of all the records are checked at once: a check costs ~2.5 ms per call whatever the entries, and a
    collector's cycle of a small cluster is up to 16 records of a few entries each (BATCH_GROUPS)."""
    tables: list[pa.Table] = []
    owners: list[int] = []
    quarantined: list[tuple[int, str, str, int]] = []
    for index, value in enumerate(values):
        try:
            table = read_batch(value)
        except BatchError as exc:
            quarantined.append((index, str(exc), "", 0))
            continue
        if table.num_rows:
            tables.append(table)
            owners.append(index)
    if not tables:
        return None, quarantined
    whole = pa.concat_tables(tables).combine_chunks() if len(tables) > 1 else tables[0]
    reasons = _reasons(whole)
    bad = np.flatnonzero(reasons != None).tolist()  # noqa: E711 (elementwise)
    if bad:
        record_of = np.repeat(np.asarray(owners), [t.num_rows for t in tables])
        quarantined += [(int(record_of[row]), str(reasons[row]), *entry_json(whole, row)) for row in bad]
        quarantined.sort(key=lambda q: q[0])  # stable: a record's entries keep their order
        keep = np.ones(whole.num_rows, bool)
        keep[bad] = False
        whole = whole.filter(pa.array(keep))
    return (whole if whole.num_rows else None), quarantined


def _by_bucket(table: pa.Table, bucket_ids: Sequence[int]) -> dict[int, pa.Table]:
    """The entries grouped by bucket id, each group in the entries' order: one take in bucket order, then a slice
    per bucket (a filter per bucket took ~30 passes over every column of the table)."""
    ids = np.asarray(bucket_ids, np.int64)[buckets_of(table, len(bucket_ids))]
    order = np.argsort(ids, kind="stable")
    ordered = ids[order]
    if ordered[0] == ordered[-1]:
        return {int(ordered[0]): table}
    table = table.take(pa.array(order))
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], len(ordered)]
    return {int(ordered[start]): table.slice(start, end - start)
            for start, end in zip(starts.tolist(), ends.tolist(), strict=True)}


def split_batch(value: bytes, bucket_ids: Sequence[int]
                ) -> tuple[dict[int, pa.Table], list[tuple[str, str, int]]]:
    """A batch record's valid entries by bucket id, and ``(reason, entry JSON, its whole length)`` per entry it
    quarantines (the whole record: one, with an empty entry of length 0)."""
    table, quarantined = _valid_entries(value)
    return ({} if table is None else _by_bucket(table, bucket_ids)), quarantined


def split_records(values: Sequence[bytes], bucket_ids: Sequence[int]
                  ) -> tuple[dict[int, bytes], list[tuple[int, str, str, int]]]:
    """Batch records split by bucket: one IPC stream per bucket with its entries of all the records, in the
    records' order (a bucket then reads one stream per task, not one per record), LZ4-compressed
    (:data:`~replmon.contracts.batches.COMPRESSED`), and ``(record index, reason, entry JSON, its whole length)``
    per quarantined entry or record (:func:`_valid_records`)."""
    shares, quarantined, _ = split_task_records(values, bucket_ids)
    return shares, quarantined


def split_task_records(values: Sequence[bytes], bucket_ids: Sequence[int]
                       ) -> tuple[dict[int, bytes], list[tuple[int, str, str, int]], list[str]]:
    """:func:`split_records`, and the clusters the valid entries are samples of."""
    table, quarantined = _valid_records(values)
    if table is None:
        return {}, quarantined, []
    shares = _by_bucket(table, bucket_ids)
    clusters = [str(name) for name in pc.unique(table.column("cluster")).to_pylist()]
    return ({bucket_id: write_stream(share, COMPRESSED) for bucket_id, share in shares.items()}, quarantined,
            clusters)


QUARANTINED = "q"
"""Input ``kind`` of a record that failed parsing or validation (the job reads and parses each record once, for
the state and the quarantine): its ``sample`` is what the quarantine keeps of it, passed through the processor
untouched as the ``payload`` of a quarantine output row."""
HEARD = "h"
"""Input ``kind`` of a row that tells a bucket which clusters a read task read partition samples of (its
``sample``: their names, a JSON list), a row per bucket and task: a bucket that holds none of a cluster's
partitions still sampled learns the cluster is sampled, which forgetting its silent partitions needs
(:func:`streaming.detect.forget`)."""
BATCH = "B"
"""Input ``kind`` of a row whose ``batch`` holds partition samples as columns: a batch record, then (after
:func:`streaming.parse.read_records`) one bucket's share of the batch records of one task."""


# ------------------------------------------------------------------------------------------- the steady step


def _lists(array: pa.Array) -> Lists:
    return Lists(np.asarray(pc.list_flatten(array).to_numpy(zero_copy_only=False), np.int64),
                 _numpy(pc.list_value_length(array), 0).astype(np.int64),
                 np.asarray(array.is_valid().to_numpy(zero_copy_only=False), bool))


def as_entries(samples: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Partition samples given as dicts (JSON records, parsed) as a batch's entries: one way to compare both."""
    return pa.Table.from_pylist(list(samples), schema=ARROW_SCHEMA)


def gather_entries(columns: SteadyColumns, table: pa.Table, rows: np.ndarray) -> SampleColumns:
    """The partition samples (a batch's entries, or JSON records through :func:`as_entries`) that may be steady,
    as the arrays :func:`streaming.steady.steady_step` compares and writes: ``rows`` is each entry's row in the
    columns (-1 where it has none, or where its partition takes the step of :mod:`streaming.detect`; a partition
    may have several entries, one per round of the steady step). Kept: a high watermark, topic configs absent or
    the row's, a topic id absent, unknown to the row or the row's, one readable answer per replica of the row;
    no reassignment in flight; times, leader, epoch, membership, lineage and offsets are compared by steady_step."""
    width = columns.columns["brokers"].shape[1]
    c = columns.columns
    n = table.num_rows
    if not n or not len(columns):
        return SampleColumns.empty(width)
    known = rows >= 0
    safe = np.where(known, rows, 0)
    ok = known.copy()
    hw = table.column("high_watermark")
    ok &= np.asarray(hw.is_valid().to_numpy(zero_copy_only=False), bool)
    # topic configs absent or the row's; a topic id absent, unknown to the row, or the row's
    min_isr = table.column("min_insync_replicas")
    ok &= np.asarray(min_isr.is_null().to_numpy(zero_copy_only=False), bool) | (
        _numpy(min_isr, NULL) == c["min_insync_replicas"][safe])
    unclean = table.column("unclean_leader_election")
    ok &= np.asarray(unclean.is_null().to_numpy(zero_copy_only=False), bool) | (
        _numpy(pc.cast(unclean, pa.int64()), -1) == c["unclean"][safe])
    # no reassignment in flight (the columns hold none): its replicas to add and remove unknown or none
    for name in ("adding_replicas", "removing_replicas"):
        ok &= _numpy(pc.list_value_length(table.column(name)), 0) == 0
    absent = np.asarray(table.column("topic_id").is_null().to_numpy(zero_copy_only=False), bool)
    topic_id = columns.codes(table.column("topic_id"))  # -1: absent, or a name the columns do not hold
    stored = c["topic_id_code"][safe]
    ok &= absent | (stored < 0) | (stored == topic_id)
    # every replica's LEO read, one answer per replica of the row, placed in the row's broker order
    offsets = table.column("replica_offsets").combine_chunks()
    answers = pc.list_flatten(offsets)
    parents = np.asarray(pc.list_parent_indices(offsets).to_numpy(zero_copy_only=False), np.int64)
    brokers = _numpy(answers.field("broker_id"), -1)
    leos = _numpy(answers.field("log_end_offset"), NULL)
    unread = (leos == NULL) | np.asarray(answers.field("error").is_valid().to_numpy(zero_copy_only=False), bool)
    match = c["brokers"][safe[parents]] == brokers[:, None]
    found = match.any(axis=1)
    bad = np.zeros(n, bool)
    bad[parents[unread | ~found]] = True
    answered = _numpy(pc.list_value_length(offsets), 0)
    ok &= ~bad & (answered == c["replica_count"][safe]) & (
        _numpy(pc.list_value_length(table.column("replicas")), 0) == c["replica_count"][safe])
    entries = np.flatnonzero(ok)
    if not len(entries):
        return SampleColumns.empty(width)
    position = np.full(n, -1, np.int64)
    position[entries] = np.arange(len(entries))
    placed = position[parents] >= 0
    log_end_offsets = np.full((len(entries), width), NULL, np.int64)
    log_end_offsets[position[parents[placed]], match[placed].argmax(axis=1)] = leos[placed]
    # a broker that answered twice leaves another's slot at NULL, below any LEO: steady_step sends it to the step
    picked = table if len(entries) == n else table.take(pa.array(entries, pa.int64()))  # usually all of them
    values = {name: _numpy(picked.column(name), NULL) for name in SAMPLE_VALUES
              if name not in ("fingerprint", "lineage_sampled", "lineage_fingerprint")}
    membership = {name: picked.column(name).combine_chunks() for name in MEMBERSHIP}
    values["fingerprint"] = fingerprints(*(_lists(membership[name]) for name in MEMBERSHIP))
    lineage = picked.column("epoch_lineage").combine_chunks()
    pairs = pc.list_flatten(lineage)
    flat = np.empty(2 * len(pairs), np.int64)
    flat[0::2] = _numpy(pairs.field("leader_epoch"), 0)
    flat[1::2] = _numpy(pairs.field("start_offset"), 0)
    sampled = np.asarray(lineage.is_valid().to_numpy(zero_copy_only=False), bool)
    values["lineage_sampled"] = sampled.astype(np.int64)
    values["lineage_fingerprint"] = lineage_fingerprints(
        Lists(flat, 2 * _numpy(pc.list_value_length(lineage), 0).astype(np.int64), sampled))
    return SampleColumns(rows[entries], values, log_end_offsets, membership, entries, np.arange(len(entries)))
