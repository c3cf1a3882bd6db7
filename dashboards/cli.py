"""``replmon dashboards build|push`` (wired in replmon/cli.py)."""

from __future__ import annotations

import argparse

from dashboards.build import build_all
from dashboards.files import HERE, write_all
from dashboards.push import push, safe_url
from replmon.config import load_config
from replmon.errors import ReplmonError


def dashboards(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    if args.action == "build":
        for path in write_all(HERE, folder=cfg.grafana.folder):
            print(path)
        return 0
    if args.action == "push":
        boards = build_all()
        push(cfg.grafana, boards)
        print(f"pushed {len(boards)} dashboards ({', '.join(boards)}) to {safe_url(cfg.grafana.url)}, "
              f"folder {cfg.grafana.folder!r}")
        return 0
    raise ReplmonError(f"unknown dashboards action {args.action!r}: build or push")
