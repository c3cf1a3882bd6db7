"""The log-dir agent: reads every replica a broker holds on disk, read-only, whether the broker runs or not.

Modules, pure parsing apart from file I/O:

- :mod:`collectors.logdir.layout`: names of Kafka's files and directories (partition dirs, segments).
- :mod:`collectors.logdir.checkpoints`: the text files (offset checkpoints, leader-epoch-checkpoint,
  partition.metadata, meta.properties), parsed from their text.
- :mod:`collectors.logdir.records`: record batch headers, the walk to a segment's log end offset, the offset
  index, parsed from bytes.
- :mod:`collectors.logdir.files`: reading those files (each read whole, or a segment's tail, and
  closed again).
- :mod:`collectors.logdir.scanner`: one scan of one or more log dirs into ReplicaSamples.
- :mod:`collectors.logdir.service`: ``replmon agent``.
"""
