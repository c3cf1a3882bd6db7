"""Secrets out of log output: kafka-python logs its whole configuration, password included, at DEBUG
(``REPLMON_DEBUG=1``); other libraries may echo a JAAS line. :func:`install` makes every log record pass through
:class:`SecretFilter` first, which masks the configured secrets wherever they appear and any ``password=...``-like
value."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

from pydantic import BaseModel, SecretStr

from replmon.core.config import ReplmonConfig

MASK = "[hidden]"
MIN_SECRET_LEN = 4
"""Shorter values are not masked by value (they would mask ordinary words); the key patterns still apply."""
_KEYED = re.compile(r"""(?ix)
    ((?:password|passwd|secret|token)['"]?\s*[:=]\s*['"]?)   # password=..., 'sasl_plain_password': '...'
    ([^'",;\s}]+)""")


def secrets_of(model: BaseModel) -> list[str]:
    """Every SecretStr value in ``model``, nested models and lists included."""
    found: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, SecretStr):
            found.append(value.get_secret_value())
        elif isinstance(value, BaseModel):
            for name in type(value).model_fields:
                walk(getattr(value, name))
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)

    walk(model)
    return found


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    for secret in sorted({s for s in secrets if len(s) >= MIN_SECRET_LEN}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return _KEYED.sub(lambda m: m.group(1) + MASK, text)


class SecretFilter(logging.Filter):
    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = list(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: leave it to the handler
            return True
        clean = redact(message, self.secrets)
        if clean != message:
            record.msg, record.args = clean, None
        return True


def install(config: ReplmonConfig) -> None:
    """Mask ``config``'s secrets in every record of every handler of the root logger (and Python's last-resort
    handler, which prints warnings when none is configured)."""
    flt = SecretFilter(secrets_of(config))
    handlers = list(logging.getLogger().handlers)
    if logging.lastResort is not None:
        handlers.append(logging.lastResort)
    for handler in handlers:
        for old in [f for f in handler.filters if isinstance(f, SecretFilter)]:
            handler.removeFilter(old)
        handler.addFilter(flt)
