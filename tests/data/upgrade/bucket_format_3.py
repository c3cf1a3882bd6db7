"""Writes ``bucket-format-3.bin``: the bucket value (state format 3) that replmon before the clusters a bucket has
heard of (format 4) wrote after the first 6 micro-batches of ``batches.json``, the steady columns and the served
columns filled (each micro-batch served as the processor serves it). Run once, by the replmon of that format;
``tests/test_stream_steady.py`` reads the file.

    .venv/bin/python -m tests.data.upgrade.bucket_format_3
"""

from __future__ import annotations

import json
from pathlib import Path

from streaming.processor import apply_bucket, serve
from streaming.table import STATE_VERSION, ColumnarTable, pack
from tests.test_stream_steady import CFG, batch_frame

HERE = Path(__file__).resolve().parent


def main() -> None:
    assert STATE_VERSION == 3, "run by the replmon that writes format 3"
    batches = json.loads((HERE / "batches.json").read_text())
    table = ColumnarTable()
    for batch in batches[:6]:
        records = [(kind, s) for kind, s in batch["records"]]
        table, out = apply_bucket(table, batch_frame(records, len(records)), CFG, batch["now_ms"], copy=False)
        serve(table, out.rows, 0, 5, "format-3", out.steady)
    (HERE / "bucket-format-3.bin").write_bytes(pack(table))


if __name__ == "__main__":
    main()
