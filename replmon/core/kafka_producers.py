"""Closing a kafka-python producer that still holds records."""

from __future__ import annotations

import contextlib
from typing import Any


def close_producer(producer: Any, timeout_s: float) -> None:
    """Close ``producer``, aborting what is still pending after ``timeout_s``. kafka-python's close raises from its
    flush while sends are pending and then never marks the producer closed: its ``__del__`` fails the same way at
    exit and Python prints the traceback. Its sender is stopped here as close itself stops it after a timeout.
    Never from one of the producer's own callbacks (its I/O thread would wait for itself)."""
    try:
        producer.close(timeout=timeout_s)
    except Exception:
        sender = getattr(producer, "_sender", None)
        with contextlib.suppress(Exception):
            if sender is not None:
                sender.force_close()
                sender.join(timeout_s)
        producer._closed = True
