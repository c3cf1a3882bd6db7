"""``replmon dashboards build|push``."""

from __future__ import annotations

from pathlib import Path

from dashboards.build import build_all
from dashboards.files import HERE, write_all
from dashboards.push import push, safe_url
from replmon.core.config import load_config
from replmon.core.errors import ReplmonError


def dashboards(action: str, config_path: Path | None) -> int:
    cfg = load_config(config_path)
    if action == "build":
        for path in write_all(HERE, folder=cfg.grafana.folder):
            print(path)
        return 0
    if action == "push":
        boards = build_all()
        push(cfg.grafana, boards)
        print(f"pushed {len(boards)} dashboards ({', '.join(boards)}) to {safe_url(cfg.grafana.url)}, "
              f"folder {cfg.grafana.folder!r}")
        return 0
    raise ReplmonError(f"unknown dashboards action {action!r}: build or push")
