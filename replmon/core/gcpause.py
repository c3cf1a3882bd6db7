"""Python's cyclic garbage collector, paused around bulk work.

Building tens of thousands of small objects that stay alive (a cycle's samples, a state bucket unpickled) makes
the collector run over and over, each full pass walking every live object: the passes cost more than the work
(building 20k partition samples: 1.26 s with the collector, 0.41 s without; docs/benchmarks.md, "Collector").
None of these objects form reference cycles, so reference counting frees them all; the collector runs again
after the block. Its first pass then walks whatever the block built and still holds: the protocol collector's
cycle therefore stays paused until its samples are published and let go (collectors.protocol.runner).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The cyclic garbage collector off while the block runs (as it was, after)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
