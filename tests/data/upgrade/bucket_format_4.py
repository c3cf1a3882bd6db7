"""Writes ``bucket-format-4.bin``: the bucket value (state format 4) that replmon before the served columns of
reassignments (format 5: which partitions are reassigning, which replicas are being added) wrote after the first
6 micro-batches of ``batches.json``, the steady columns and the served columns filled (each micro-batch served as
the processor serves it) and the cluster heard of. Run once, by the replmon of that format (its tree first on the
path); ``tests/test_stream_steady.py`` reads the file.

    mkdir /tmp/replmon-format-4 && git archive d3264fb | tar -x -C /tmp/replmon-format-4
    cp tests/data/upgrade/bucket_format_4.py /tmp/replmon-format-4/tests/data/upgrade/
    (cd /tmp/replmon-format-4 && PYTHONPATH=. "$OLDPWD/.venv/bin/python" -m tests.data.upgrade.bucket_format_4)
    cp /tmp/replmon-format-4/tests/data/upgrade/bucket-format-4.bin tests/data/upgrade/
"""

from __future__ import annotations

import json
from pathlib import Path

from streaming.processor import apply_bucket, serve
from streaming.table import STATE_VERSION, ColumnarTable, pack
from tests.test_stream_steady import CFG, batch_frame

HERE = Path(__file__).resolve().parent


def main() -> None:
    assert STATE_VERSION == 4, "run by the replmon that writes format 4"
    batches = json.loads((HERE / "batches.json").read_text())
    table = ColumnarTable()
    for batch in batches[:6]:
        records = [(kind, s) for kind, s in batch["records"]]
        table, out = apply_bucket(table, batch_frame(records, len(records)), CFG, batch["now_ms"], copy=False)
        serve(table, out.rows, 0, 5, "format-4", out.steady)
        table.hear(["c"], batch["now_ms"])
    (HERE / "bucket-format-4.bin").write_bytes(pack(table))


if __name__ == "__main__":
    main()
