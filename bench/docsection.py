"""A benchmark's section of docs/benchmarks.md, rewritten by each run."""

from __future__ import annotations

import re
from pathlib import Path

ANALYSIS = "### Analysis"
"""A subsection written by hand (what the figures mean, where the time goes): kept across runs."""


def write_section(doc: Path, heading: str, section: str) -> None:
    """Replace ``doc``'s ``## {heading}`` section with ``section`` (appended when absent), keeping the old
    section's hand-written analysis at its end."""
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    old = re.search(rf"## {re.escape(heading)}\n.*?(?=\n## |\Z)", text, flags=re.S)
    analysis = re.search(rf"\n{ANALYSIS}\n.*", old.group(0), flags=re.S) if old else None
    if analysis:
        section = section.rstrip() + "\n" + analysis.group(0)
    joined = (text[:old.start()] + section.rstrip() + "\n" + text[old.end():] if old
              else text.rstrip() + "\n\n" + section)
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(joined)


def write_figures(doc: Path, heading: str, intro: str, rows: list[str], image: Path, alt: str) -> None:
    """Write a benchmark's section: its heading, ``intro`` (the command, when, what was measured), its table
    ``rows`` and its plot ``image`` (beside ``doc``)."""
    write_section(doc, heading, "\n".join([f"## {heading}", "", intro, "", *rows, "", f"![{alt}]({image.name})", ""]))
    print(f"wrote {doc.name} and {image.name} in {doc.parent}")
