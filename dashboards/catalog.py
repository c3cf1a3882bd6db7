"""The series names Prometheus can see from replmon, and the ``replmon_*`` names a PromQL expression uses.

Two sources, never a third: the streaming job's catalogue (replmon/contracts/metrics.py) and the collector's
own metrics (collectors/metrics.py), read from a fresh registry so the names are exactly what
prometheus-client exposes (a counter ``x`` is exposed as ``x_total``, a histogram as ``x_bucket``, ``x_sum``,
``x_count``). The dashboards builder and the tests of the alert rules and dashboards check against this.
"""

from __future__ import annotations

import re

from collectors.metrics import CollectorMetrics
from replmon.contracts.metrics import exposed_names

_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("_sum", "_count", "_created", ""),
    "info": ("_info",),
}

# a replmon_ identifier that is not part of a longer identifier (label values such as job="replmon-x" have a
# dash, not an underscore, and are not matched)
_NAME = re.compile(r"(?<![A-Za-z0-9_:])replmon_[A-Za-z0-9_:]*")


def collector_series_names() -> set[str]:
    names: set[str] = set()
    for family in CollectorMetrics().registry.collect():
        for suffix in _SUFFIXES.get(family.type, ("",)):
            names.add(family.name + suffix)
    return names


def job_series_names() -> set[str]:
    return set(exposed_names())


def known_series_names() -> set[str]:
    """Every replmon series name Prometheus can scrape from the job or the collector."""
    return job_series_names() | collector_series_names()


def referenced_names(expr: str) -> set[str]:
    """The ``replmon_*`` metric names a PromQL expression (or Grafana query) mentions."""
    return set(_NAME.findall(expr))


def unknown_names(expr: str) -> set[str]:
    return referenced_names(expr) - known_series_names()
