"""What ``replmon dashboards build`` writes: the dashboards' JSON and Grafana's provisioning files.

Layout (committed, and mounted as is by docker-compose.yml)::

    dashboards/generated/<uid>.json                  one file per dashboard
    dashboards/provisioning/dashboards/replmon.yml   file provider: the JSON files, in folder grafana.folder
    dashboards/provisioning/datasources/prometheus.yml   the Prometheus of docker-compose.yml, uid prometheus
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dashboards.build import build_all, to_json
from replmon.core.config import GrafanaConfig

HERE = Path(__file__).resolve().parent
GRAFANA_DASHBOARDS_DIR = "/etc/grafana/dashboards/replmon"
"""Where docker-compose.yml mounts dashboards/generated inside the Grafana container."""
COMPOSE_PROMETHEUS_URL = "http://prometheus:9090"

HEADER = "# Written by `replmon dashboards build` (dashboards/files.py): edit the code, not this file.\n"


DEFAULT_FOLDER: str = GrafanaConfig.model_fields["folder"].default
"""grafana.folder by default."""


def dashboard_provider(folder: str) -> dict[str, Any]:
    return {"apiVersion": 1, "providers": [{
        "name": "replmon", "orgId": 1, "folder": folder, "type": "file", "disableDeletion": False,
        "allowUiUpdates": False, "updateIntervalSeconds": 30,
        "options": {"path": GRAFANA_DASHBOARDS_DIR, "foldersFromFilesStructure": False},
    }]}


def datasource(url: str = COMPOSE_PROMETHEUS_URL) -> dict[str, Any]:
    return {"apiVersion": 1, "datasources": [{
        "name": "Prometheus", "uid": "prometheus", "type": "prometheus", "access": "proxy", "url": url,
        "isDefault": True, "editable": False, "jsonData": {"timeInterval": "10s"},
    }]}


def rendered(folder: str = DEFAULT_FOLDER) -> dict[str, str]:
    """Relative path -> file content, for everything ``build`` writes."""
    files = {f"generated/{uid}.json": to_json(data) for uid, data in build_all().items()}
    files["provisioning/dashboards/replmon.yml"] = HEADER + yaml.safe_dump(dashboard_provider(folder),
                                                                           sort_keys=False)
    files["provisioning/datasources/prometheus.yml"] = HEADER + yaml.safe_dump(datasource(), sort_keys=False)
    return files


def write_all(root: Path = HERE, folder: str = DEFAULT_FOLDER) -> list[Path]:
    """Write every file under ``root``; JSON files of dashboards that no longer exist are removed."""
    files = rendered(folder)
    written = []
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        written.append(path)
    for old in (root / "generated").glob("*.json"):
        if f"generated/{old.name}" not in files:
            old.unlink()
    return written
