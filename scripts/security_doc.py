"""Regenerate the generated blocks of docs/security.md (the grants table and the kafka-acls.sh commands) from
replmon/core/security.py, the one definition of the roles' ACLs.

    .venv/bin/python scripts/security_doc.py          # rewrite docs/security.md
    .venv/bin/python scripts/security_doc.py --check  # exit 1 when docs/security.md is stale
"""

from __future__ import annotations

import sys
from pathlib import Path

from replmon.core.security import render_doc

DOC = Path(__file__).resolve().parents[1] / "docs" / "security.md"


def main(argv: list[str]) -> int:
    text = DOC.read_text()
    fresh = render_doc(text)
    if "--check" in argv:
        if fresh != text:
            print(f"{DOC} is stale: run .venv/bin/python scripts/security_doc.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
