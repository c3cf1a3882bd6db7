"""``replmon events``: the job's events, from its history (Parquet) or from the events topic (``--from topic``,
live with ``--follow``), filtered, as a table or as JSON lines (``--json``: one event record a line, the fields of
:class:`replmon.contracts.events.Event`, docs/events.md)."""

from __future__ import annotations

import difflib
import json
import math
import re
import sys
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from replmon.contracts.events import Event, EventType
from replmon.core.config import ReplmonConfig
from replmon.core.console import say
from replmon.core.errors import ReplmonError
from replmon.core.processes import stop_signalled, wait_told

_DURATION = re.compile(r"^-?(\d+)\s*([smhd])(?:\s+ago)?$")
POLL_MS = 500
BOOTSTRAP_TIMEOUT_MS = 10_000
"""How long ``--from topic`` tries to reach the events topic's cluster before it says it cannot (kafka-python's
default, 30 s, left an operator without a word that long)."""


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """'15m', '2h', '1d' (ago; also written '-15m' or '15m ago') or an ISO time (UTC unless it names its zone)."""
    now = now or datetime.now(UTC)
    match = _DURATION.match(text.strip().lower())
    if match:
        amount, unit = int(match.group(1)), match.group(2)
        try:
            return now - timedelta(**{{"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[unit]: amount})
        except OverflowError:  # more than datetime or timedelta holds
            raise ReplmonError(f"--since {text.strip()} goes back before year 1") from None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ReplmonError(f"--since takes a duration such as 15m, 2h, 1d or an ISO time, not {text!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def event_type(text: str) -> EventType:
    """An event type named in any case; an unknown one is refused with the list of known ones."""
    try:
        return EventType(text.upper())
    except ValueError:
        known = ", ".join(t.value for t in EventType)
        raise ReplmonError(f"--type takes one of {known}, not {text!r}") from None


@dataclass(frozen=True)
class EventFilter:
    cluster: str | None = None
    topic: str | None = None
    type: EventType | None = None
    since_ms: int | None = None

    def __call__(self, event: dict[str, Any]) -> bool:
        return ((self.cluster is None or event.get("cluster") == self.cluster)
                and (self.topic is None or event.get("topic") == self.topic)
                and (self.type is None or event.get("type") == self.type)
                and (self.since_ms is None or int(event.get("event_time_ms") or 0) >= self.since_ms))


def canonical(record: dict[str, Any]) -> dict[str, Any]:
    """An event as its contract writes it (every field of :class:`Event`, JSON types), whether it comes from the
    topic or from the history's columns (where a missing number is NaN and an integer column may be float, and a
    file written before a field was added reads it null: the field's default then)."""
    fields = Event.model_fields
    plain = {name: _plain(value) for name, value in record.items() if name in fields}
    return Event.model_validate({name: value for name, value in plain.items()
                                 if value is not None or fields[name].default is None}).model_dump(mode="json")


def topic_record(value: bytes | None, where: str) -> dict[str, Any] | None:
    """An events topic record as :func:`canonical` gives it; None, told in one line, for one that is not an event
    of this version's contract (a newer job's, or another writer's): the others are still printed."""
    try:
        return canonical(json.loads(value or b"null"))
    except (ValueError, TypeError, AttributeError) as exc:  # pydantic's ValidationError is a ValueError
        reason = exc.errors(include_url=False, include_input=False)[0] if isinstance(exc, ValidationError) else None
        why = f"{'.'.join(map(str, reason['loc']))}: {reason['msg']}" if reason else str(exc).splitlines()[0]
        say(f"skipping {where}: not an event record of this replmon ({why})")
        return None


def _plain(value: Any) -> Any:
    """A history cell as a plain value: NaN as None, a numpy array or scalar as Python's."""
    if isinstance(value, float) and math.isnan(value):
        return None
    return value.tolist() if hasattr(value, "tolist") else value


def history_events(history_dir: str | Path, config: ReplmonConfig | None = None) -> list[dict[str, Any]]:
    """The history's events; one on a Hadoop filesystem (not a local directory) is read by a local Spark session
    with ``config``'s Spark settings (its Hadoop configuration reaches the cluster's filesystems)."""
    import pyarrow as pa

    from replmon.core import locations
    from streaming.sinks import read_events

    spark = None
    location = locations.normalize(history_dir)
    if not locations.is_local(location):
        from streaming.session import get_session
        from streaming.storage import HadoopDirectory

        stream = (config or ReplmonConfig()).stream.model_copy(update={"spark_master": "local[1]"})
        spark = get_session(stream, "replmon-events")
        found = HadoopDirectory(spark, location).is_dir("")
    else:
        found = Path(location).is_dir()
    if not found:  # a mistyped path, or a job that never ran with it: not an empty history
        raise ReplmonError(f"no history at {history_dir}: no such directory (the job's stream.history_dir, made "
                           "when the job starts; --history-dir reads another)")
    try:
        frame = read_events(history_dir, spark)
    except (pa.ArrowException, OSError) as exc:  # a file there that is not Parquet, or not readable
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ReplmonError(f"cannot read the history at {history_dir}: {reason}") from None
    if frame.empty:
        return []
    return [canonical(row) for row in frame.to_dict("records")]


def topic_events(config: ReplmonConfig, since_ms: int | None, follow: bool,
                 stop: threading.Event | None = None) -> Iterator[dict[str, Any]]:
    """The events topic's records from the start (or from ``since_ms``) to its current end, then, with ``follow``,
    each new one as it arrives until ``stop`` is set."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError

    from replmon.core.kafka_diagnose import connect_problem, require_reachable

    topic = config.transport.events_topic
    servers = config.samples_bootstrap()
    require_reachable(servers, "the events topic's cluster")
    try:
        consumer = KafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False, group_id=None,
                                 isolation_level="read_committed", client_id="replmon-events",
                                 request_timeout_ms=15000, bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS,
                                 **config.samples_security().kafka_python())
    except KafkaError as exc:
        raise ReplmonError(f"cannot reach the events topic's cluster {','.join(servers)}: "
                           f"{connect_problem(servers, exc)}") from None
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions and follow:  # the job creates the topic when it starts: followed from then on
            partitions = wait_told(lambda: consumer.partitions_for_topic(topic),
                                   f"waiting for topic {topic} on {','.join(servers)}: the job creates it when it "
                                   "starts", stop or threading.Event())
        if not partitions:
            if follow:
                return
            raise ReplmonError(f"no topic {topic!r} on {','.join(servers)}: the job has published no event there "
                               "yet (or transport.events_topic names another topic)")
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        if since_ms is None:
            consumer.seek_to_beginning(*tps)
        else:
            found = consumer.offsets_for_times({tp: since_ms for tp in tps})
            ends = consumer.end_offsets(tps)
            for tp in tps:
                consumer.seek(tp, found[tp].offset if found.get(tp) is not None else ends[tp])
        end = consumer.end_offsets(tps)
        caught_up = False
        while stop is None or not stop.is_set():
            for records in consumer.poll(timeout_ms=POLL_MS).values():
                for record in records:
                    event = topic_record(record.value, f"{topic}-{record.partition} offset {record.offset}")
                    if event is not None:
                        yield event
            if not caught_up and all(consumer.position(tp) >= end[tp] for tp in tps):
                caught_up = True
                if not follow:
                    return
    finally:
        consumer.close()


def _when(event: dict[str, Any]) -> str:
    return datetime.fromtimestamp(int(event["event_time_ms"]) / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def _where(event: dict[str, Any]) -> str:
    return f"{event['topic']}-{event['partition']}" if event.get("topic") is not None else "-"


def print_table(events: list[dict[str, Any]]) -> None:
    table = Table(title=f"{len(events)} events")
    for col in ("time (UTC)", "cluster", "partition", "type", "severity", "message"):
        table.add_column(col)
    for e in events:
        table.add_row(_when(e), e["cluster"], _where(e), e["type"], e["severity"], e["message"])
    Console(width=None if sys.stdout.isatty() else 200).print(table)


def print_line(event: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(event, separators=(",", ":")), flush=True)
    else:
        print(f"{_when(event)}  {event['cluster']}  {_where(event)}  {event['type']}  {event['severity']}  "
              f"{event['message']}", flush=True)


def unmatched(keep: EventFilter, every: list[dict[str, Any]]) -> str | None:
    """Why ``keep`` found nothing in ``every`` when it names a cluster or a topic no event has (a typo, not an
    empty history): the name, and the closest one the events have."""
    for field, name in (("cluster", keep.cluster), ("topic", keep.topic)):
        names = sorted({str(e[field]) for e in every if e.get(field) is not None})
        if name is not None and name not in names:
            close = difflib.get_close_matches(name, names, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"{len(names)} {field}s have events"
            return f"no event of {field} {name!r} ({hint})"
    return None


def _nothing(keep: EventFilter, where: str) -> str:
    """What to say when ``keep`` accepts no event of ``where`` and :func:`unmatched` has no better reason."""
    said = f"no {keep.type.value + ' ' if keep.type else ''}events in {where}"
    if keep.since_ms is None:
        return said
    return f"{said} since {datetime.fromtimestamp(keep.since_ms / 1000, tz=UTC):%Y-%m-%d %H:%M:%S} UTC"


def events(config: ReplmonConfig, *, source: str = "history", history_dir: str | Path | None = None,
           keep: EventFilter = EventFilter(), follow: bool = False, as_json: bool = False) -> int:
    """Print the events ``keep`` accepts. ``source`` 'history' reads the job's Parquet history (``history_dir``,
    else ``stream.history_dir``); 'topic' reads the events topic, and keeps printing new events with ``follow``."""
    if source == "history":
        root = history_dir or config.stream.history_dir
        every = history_events(root, config)
        found: Iterable[dict[str, Any]] = [e for e in every if keep(e)]
        if not found and not as_json:
            say(unmatched(keep, every) or _nothing(keep, str(root)))
            return 0
    elif follow:
        with stop_signalled() as stop:  # Ctrl-C or SIGTERM ends the wait between two polls, quietly
            for event in topic_events(config, keep.since_ms, follow=True, stop=stop):
                if keep(event):
                    print_line(event, as_json)
        return 0
    else:
        records = topic_events(config, keep.since_ms, follow=False)
        if as_json:  # printed as they are read
            for event in records:
                if keep(event):
                    print_line(event, as_json)
            return 0
        every = list(records)
        found = sorted((e for e in every if keep(e)), key=lambda e: int(e["event_time_ms"]))
        if not found:
            say(unmatched(keep, every) or _nothing(keep, f"topic {config.transport.events_topic}"))
            return 0
    if as_json:
        for event in found:
            print_line(event, as_json=True)
    else:
        print_table(list(found))
    return 0
