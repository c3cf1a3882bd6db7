"""``replmon cluster up|status|down|fault|elect``: the local real Kafka cluster of the test bed."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from replmon.core.errors import ReplmonError

if TYPE_CHECKING:
    from replmon.testbed.localcluster import LocalCluster

err_console = Console(stderr=True, highlight=False)
console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def cluster_up(args: argparse.Namespace) -> int:
    from replmon.testbed.localcluster import KAFKA_VERSION, LocalCluster

    overrides = dict(_key_value(s) for s in args.set or [])
    if args.unclean_election:
        overrides["unclean.leader.election.enable"] = "true"
    with err_console.status(f"starting Apache Kafka {KAFKA_VERSION}") as status:
        cluster = LocalCluster.up(args.dir, brokers=args.brokers, overrides=overrides, secure=args.secure,
                                  on_progress=lambda msg: status.update(msg))
    err_console.print(f"local cluster up in {cluster.dir} (Kafka {KAFKA_VERSION}, brokers {cluster.broker_ids}, "
                      f"{cluster.protocol})")
    if cluster.spec.security is not None:
        err_console.print(_security_summary(cluster), markup=False, soft_wrap=True)
    print(cluster.bootstrap_servers)
    return 0


def _security_summary(cluster: LocalCluster) -> str:
    """Where a client finds what it needs; never the passwords themselves."""
    sec = cluster.spec.security
    assert sec is not None
    text = (f"security: {sec.protocol} ({sec.sasl_mechanism}), controller listener {sec.controller_protocol} with "
            f"client certificates; CA {sec.ca_file}; users {', '.join(sec.users)} (passwords in "
            f"{sec.credentials_file}, Java client settings in {sec.ca_file.parent}/USER.properties)")
    if sec.certificates:
        text += (f"; mutual TLS (SSL, a user's client certificate) at {cluster.mtls_bootstrap_servers}: "
                 f"{sec.ca_file.parent}/USER.crt.pem, key USER.key.pem (encrypted with the user's password)")
    return text


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ReplmonError(f"--set takes KEY=VALUE, not {text!r}")
    return key.strip(), value.strip()


def cluster_status(args: argparse.Namespace) -> int:
    from replmon.testbed.localcluster import LocalCluster

    cluster = LocalCluster.open(args.dir)
    if args.json:
        print(json.dumps(status_record(cluster), indent=2))
        return 0
    table = Table(title=f"local cluster {cluster.dir}")
    for col in ("node id", "role", "pid", "state", "listener", "log dir"):
        table.add_column(col, overflow="fold")
    colors = {"running": "green", "paused": "yellow", "stopped": "red"}
    for node in cluster.status():
        table.add_row(str(node.node_id), node.role, str(node.pid or "-"),
                      f"[{colors[node.state]}]{node.state}[/]", node.listener, str(node.log_dir))
    console.print(table)
    console.print(f"bootstrap servers: {cluster.bootstrap_servers} ({cluster.protocol})", soft_wrap=True)
    if cluster.spec.security is not None:
        console.print(_security_summary(cluster), markup=False, soft_wrap=True)
    return 0


def status_record(cluster: LocalCluster) -> dict[str, Any]:
    """``cluster status --json``: what a script needs to point a client or replmon at the cluster (no secrets:
    the security part names the files that hold them)."""
    sec = cluster.spec.security
    return {
        "dir": str(cluster.dir),
        "bootstrap_servers": cluster.bootstrap_servers.split(","),
        "security_protocol": cluster.protocol,
        "nodes": [node.model_dump(mode="json") for node in cluster.status()],
        "log_dirs": {str(b): [str(cluster.broker_log_dir(b))] for b in cluster.broker_ids},
        "security": None if sec is None else {
            "sasl_mechanism": sec.sasl_mechanism, "ca_file": str(sec.ca_file),
            "credentials_file": str(sec.credentials_file), "admin_user": sec.admin_user,
            "users": {user: str(path) for user, path in sec.users.items()},
            "mtls_bootstrap_servers": cluster.mtls_bootstrap_servers.split(",") if sec.certificates else None,
            "client_certificates": {user: {"certificate": str(path), "key": str(sec.keys[user])}
                                    for user, path in sec.certificates.items()},
        },
    }


def cluster_down(args: argparse.Namespace) -> int:
    from replmon.testbed.localcluster import LocalCluster, resolve_cluster_dir
    from replmon.testbed.localcluster.cluster import UnreadableCluster, purge_cluster_dir

    cdir = resolve_cluster_dir(args.dir)
    if not (cdir / "cluster.json").exists():
        raise ReplmonError(f"no local cluster in {cdir}: nothing to stop")
    try:
        stopped = LocalCluster.open(cdir).down(purge=args.purge)
    except UnreadableCluster:
        if not args.purge:
            raise
        stopped = purge_cluster_dir(cdir)  # its processes are found by their marker, without cluster.json
    if not stopped and not args.purge:
        raise ReplmonError(f"the local cluster in {cdir} is not running: nothing to stop")
    err_console.print(f"stopped {len(stopped)} process(es) of {cdir}" + (" and deleted it" if args.purge else ""))
    return 0


def cluster_fault(args: argparse.Namespace) -> int:
    from replmon.testbed.localcluster import LocalCluster

    cluster = LocalCluster.open(args.dir)
    action = {"pause": cluster.pause, "resume": cluster.resume, "kill": cluster.kill,
              "stop": cluster.stop, "restart": cluster.restart}[args.action]
    action(args.broker_id)
    err_console.print(f"broker {args.broker_id}: {args.action} done ({cluster.node_state(args.broker_id)})")
    return 0


def cluster_elect(args: argparse.Namespace) -> int:
    from replmon.testbed.localcluster import LocalCluster

    if not args.unclean:
        raise ReplmonError("only --unclean elections are offered (preferred elections need no tool)")
    cluster = LocalCluster.open(args.dir)
    cluster.elect_unclean(args.topic, args.partition)
    err_console.print(f"unclean election of {args.topic}-{args.partition} requested")
    return 0
