"""docs/security.md's grants table and kafka-acls.sh commands are generated from replmon/core/security.py and kept in
step; the grants are spelled in Kafka's own names."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from kafka.admin import ACLOperation, ResourceType

from replmon.core import security
from replmon.core.security import GRANTS, Role

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "security.md"


def test_committed_doc_equals_a_fresh_generation() -> None:
    text = DOC.read_text()
    assert security.render_doc(text) == text, "run .venv/bin/python scripts/security_doc.py and commit"
    check = subprocess.run([sys.executable, str(ROOT / "scripts" / "security_doc.py"), "--check"],
                           capture_output=True, text=True, cwd=ROOT)
    assert check.returncode == 0, check.stderr


def test_every_grant_is_in_the_table_and_the_commands_once() -> None:
    text = DOC.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "`User:" in line]
    commands = [line for line in text.splitlines() if line.startswith("kafka-acls.sh ")]
    assert len(rows) == len(commands) == len(GRANTS)
    for grant in GRANTS:
        assert sum(f"| {grant.role} (`User:{grant.role}`) | {grant.where} |" in r and f"| {grant.operation} |" in r
                   and grant.resource_name(security.TransportConfig()) in r for r in rows) == 1, grant
        op = security.acls_operation(grant.operation)
        assert sum(f"User:{grant.role} --operation {op} " in c for c in commands) >= 1, grant


def test_grants_use_kafkas_names_and_every_role_has_some() -> None:
    for grant in GRANTS:
        assert grant.operation in ACLOperation.__members__, grant
        assert grant.resource_type in ResourceType.__members__, grant
        # kafka-acls.sh spells operations in CamelCase: Describe, DescribeConfigs, Write, Read, Create
        assert re.fullmatch(r"(?:[A-Z][a-z]+)+", security.acls_operation(grant.operation)), grant
    assert {g.role for g in GRANTS} == set(Role)


def test_a_missing_block_is_an_error_not_a_silent_pass() -> None:
    try:
        security.render_doc("no generated blocks here")
    except ValueError as exc:
        assert "grants-table" in str(exc)
    else:
        raise AssertionError("render_doc accepted a doc without its generated blocks")
