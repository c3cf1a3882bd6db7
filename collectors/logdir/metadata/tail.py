"""Following a node's metadata log on disk: its partition and broker changes as :class:`PartitionChange` and
:class:`BrokerChange` records.

The log-dir agent finds ``__cluster_metadata-0`` in the log dirs it reads (a KRaft broker or controller keeps it
in its ``metadata.log.dir``, by default its first log dir). :class:`MetadataTail` loads the newest snapshot into a
:class:`~collectors.logdir.metadata.view.MetadataView`, then replays the log from the snapshot's end offset, a
little more each :meth:`~MetadataTail.poll`, and returns every partition and broker change the replayed records
made.

When the reader cannot go on from where it is (segments deleted before it read them, or the log truncated beneath
it: a broker's or a follower controller's log follows the active controller's), the tail starts again from the
newest snapshot; the changes it reports again carry their metadata offsets, which the job applies once.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from collectors.logdir.layout import CLUSTER_METADATA_DIR
from collectors.logdir.metadata.batches import Skipped
from collectors.logdir.metadata.log import MetadataLogReader, list_snapshots, read_snapshot
from collectors.logdir.metadata.specs import MetadataSpecs, metadata_specs
from collectors.logdir.metadata.view import MetadataView
from replmon.contracts.samples import BrokerChange, PartitionChange

MAX_POLLS = 16
"""Reads of at most the reader's byte budget each per :meth:`MetadataTail.poll`: a long log is caught up over a
few polls, not in one."""


def find_metadata_log(log_dirs: list[Path]) -> Path | None:
    """The ``__cluster_metadata-0`` directory in one of ``log_dirs``, if any."""
    for log_dir in log_dirs:
        candidate = Path(log_dir) / CLUSTER_METADATA_DIR
        if candidate.is_dir():
            return candidate
    return None


@dataclass
class TailRead:
    changes: list[PartitionChange | BrokerChange] = field(default_factory=list)
    skipped: Counter[Skipped] = field(default_factory=Counter)
    """Records of a type or version without a schema here: skipped, counted."""
    problems: list[str] = field(default_factory=list)
    restarted: str | None = None
    """Why the tail started again from the newest snapshot, when it did."""


class MetadataTail:
    """The partition and broker changes of the metadata log in ``partition_dir``, as the agent ``agent_id`` of
    ``cluster`` reads them from node ``broker_id``'s disk."""

    def __init__(self, partition_dir: Path, cluster: str, agent_id: str, broker_id: int,
                 specs: MetadataSpecs | None = None) -> None:
        self.partition_dir = Path(partition_dir)
        self.specs = specs if specs is not None else metadata_specs()
        self.view = MetadataView(cluster, agent_id, broker_id)
        self.reader: MetadataLogReader | None = None

    def _start(self, result: TailRead) -> MetadataLogReader:
        snapshots = list_snapshots(self.partition_dir)
        start = 0
        if snapshots:
            snapshot = read_snapshot(self.partition_dir / snapshots[-1].file_name, self.specs)
            self.view.load_snapshot(snapshot.records)
            result.skipped.update(snapshot.skipped)
            result.problems.extend(f"snapshot {snapshots[-1].file_name}: {p}" for p in snapshot.problems)
            start = snapshots[-1].end_offset
        else:
            self.view.load_snapshot(())
        return MetadataLogReader(self.partition_dir, start, self.specs)

    def poll(self) -> TailRead:
        """What was appended since the last poll, replayed."""
        result = TailRead()
        if self.reader is None:
            self.reader = self._start(result)
        for _ in range(MAX_POLLS):
            read = self.reader.poll()
            result.skipped.update(read.skipped)
            result.problems.extend(read.problems)
            if read.gap is not None or read.truncated_to is not None:
                result.restarted = (f"metadata log offsets {read.gap[0]}..{read.gap[1] - 1} deleted before they "
                                    "were read" if read.gap is not None else
                                    f"metadata log truncated to offset {read.truncated_to}")
                self.reader = self._start(result)
                continue
            for record in read.records:
                result.changes.extend(self.view.apply(record))
            if not read.more:
                break
        return result
