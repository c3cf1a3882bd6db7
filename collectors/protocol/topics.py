"""Which topics a cluster's sampler watches: include/exclude regular expressions (full match), internal topics
off unless asked for. Pure: names in, names out."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from replmon.core.config import TopicFilter
from replmon.core.errors import ReplmonError


@dataclass
class TopicSelector:
    include: list[re.Pattern[str]]
    exclude: list[re.Pattern[str]]
    include_internal: bool = False
    _warned: set[str] = field(default_factory=set)

    @classmethod
    def from_config(cls, topics: TopicFilter, cluster: str = "") -> TopicSelector:
        def compile_all(patterns: list[str], what: str) -> list[re.Pattern[str]]:
            compiled = []
            for pattern in patterns:
                try:
                    compiled.append(re.compile(pattern))
                except re.error as exc:
                    where = f"cluster {cluster}: " if cluster else ""
                    raise ReplmonError(f"{where}topic {what} pattern {pattern!r} is not a valid regular "
                                       f"expression: {exc}") from None
            return compiled

        return cls(compile_all(topics.include, "include"), compile_all(topics.exclude, "exclude"),
                   topics.include_internal)

    def wants(self, topic: str, internal: bool) -> bool:
        if internal and not self.include_internal:
            return False
        if not any(p.fullmatch(topic) for p in self.include):
            return False
        return not any(p.fullmatch(topic) for p in self.exclude)

    def unmatched_includes(self, topics: Iterable[tuple[str, bool]]) -> list[str]:
        """Include patterns that match none of ``topics`` ((name, internal) pairs) and were not reported yet:
        each is returned once, so the caller warns once."""
        names = [name for name, internal in topics if self.include_internal or not internal]
        fresh = []
        for pattern in self.include:
            if pattern.pattern in self._warned:
                continue
            if not any(pattern.fullmatch(n) for n in names):
                self._warned.add(pattern.pattern)
                fresh.append(pattern.pattern)
        return fresh


@dataclass(frozen=True)
class TopicChanges:
    """How the watched topics changed between two cycles (:func:`topic_changes`): topic -> partitions."""

    appeared: dict[str, int]
    left: dict[str, int]
    resized: dict[str, tuple[int, int]]
    """Topic -> (partitions before, partitions now)."""

    def __bool__(self) -> bool:
        return bool(self.appeared or self.left or self.resized)


def topic_changes(before: Mapping[str, int], now: Mapping[str, int]) -> TopicChanges:
    """The topics watched ``now`` and not ``before``, those watched ``before`` and no longer, and those whose
    partition count changed; each mapping is topic -> its watched partitions."""
    return TopicChanges(
        appeared={t: n for t, n in sorted(now.items()) if t not in before},
        left={t: n for t, n in sorted(before.items()) if t not in now},
        resized={t: (before[t], n) for t, n in sorted(now.items()) if t in before and before[t] != n})
