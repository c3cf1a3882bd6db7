"""The KRaft metadata log (``__cluster_metadata-0``) read from a node's disk: a lossless history of the cluster's
metadata changes (topics, partitions' ISR/leader/ELR, brokers) with their metadata offsets and append times.

Modules, pure parsing apart from file I/O:

- :mod:`.specs`: Kafka's metadata record schemas (JSON, vendored from the kafka-metadata jar into ``schemas/``),
  parsed into specs.
- :mod:`.messages`: a generic reader of Kafka's generated message serialization, driven by those specs.
- :mod:`.serde`: the ``ApiMessageAndVersion`` frame of each record's value (``MetadataRecordSerde``).
- :mod:`.batches`: records out of the v2 batches of a segment or snapshot, parsed from bytes.
- :mod:`.log`: reading the files: the log incrementally (:class:`MetadataLogReader`), snapshots whole.
"""

from collectors.logdir.metadata.batches import MetadataRecord, Skipped
from collectors.logdir.metadata.log import (
    LogRead,
    MetadataLogReader,
    SnapshotId,
    SnapshotRead,
    list_snapshots,
    read_snapshot,
)
from collectors.logdir.metadata.messages import MessageDecodeError
from collectors.logdir.metadata.serde import ApiMessageAndVersion, Unsupported, read_metadata_value
from collectors.logdir.metadata.specs import MetadataSpecs, metadata_specs

__all__ = [
    "ApiMessageAndVersion",
    "LogRead",
    "MessageDecodeError",
    "MetadataLogReader",
    "MetadataRecord",
    "MetadataSpecs",
    "Skipped",
    "SnapshotId",
    "SnapshotRead",
    "Unsupported",
    "list_snapshots",
    "metadata_specs",
    "read_metadata_value",
    "read_snapshot",
]
