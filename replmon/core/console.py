"""The stages' and the front door's lines to the operator on stderr."""

from __future__ import annotations

from rich.console import Console

err = Console(stderr=True, highlight=False)
"""stderr, for rich's tables and status lines (no syntax highlighting of numbers and paths)."""


def say(line: str) -> None:
    """A log line as it is: one line whatever the terminal's width (a URL or a path stays whole for grep), and its
    text as given (a Spark error's ``[ERROR_CLASS]``), not read as rich markup."""
    err.print(line, markup=False, soft_wrap=True)
