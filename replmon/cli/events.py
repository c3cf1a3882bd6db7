"""``replmon events``: the events in the job's history, filtered, as a table."""

from __future__ import annotations

import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.console import Console
from rich.table import Table

from replmon.core.config import load_config
from replmon.core.errors import ReplmonError

err = Console(stderr=True, highlight=False)

_DURATION = re.compile(r"^(\d+)([smhd])$")


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """'15m', '2h', '1d' (ago) or an ISO time."""
    now = now or datetime.now(UTC)
    match = _DURATION.match(text.strip())
    if match:
        amount, unit = int(match.group(1)), match.group(2)
        return now - timedelta(**{{"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[unit]: amount})
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ReplmonError(f"--since takes a duration such as 15m, 2h, 1d or an ISO time, not {text!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def events(config_path: Path | None, cluster: str | None = None, topic: str | None = None,
           event_type: str | None = None, since: str | None = None) -> int:
    from streaming.sinks import read_events

    config = load_config(config_path)
    frame = read_events(config.stream.history_dir)
    if frame.empty:
        err.print(f"no events in {config.stream.history_dir}")
        return 0
    if cluster:
        frame = frame[frame["cluster"] == cluster]
    if topic:
        frame = frame[frame["topic"] == topic]
    if event_type:
        frame = frame[frame["type"] == event_type.upper()]
    if since:
        frame = frame[frame["event_time_ms"] >= parse_since(since).timestamp() * 1000]
    table = Table(title=f"{len(frame)} events")
    for col in ("time (UTC)", "cluster", "partition", "type", "severity", "message"):
        table.add_column(col)
    for row in frame.itertuples(index=False):
        when = datetime.fromtimestamp(row.event_time_ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
        where = f"{row.topic}-{int(row.partition)}" if row.topic is not None and row.partition == row.partition \
            else "-"
        table.add_row(when, row.cluster, where, row.type, row.severity, row.message)
    Console(width=None if sys.stdout.isatty() else 200).print(table)
    return 0
