"""The ``replmon`` command line (DESIGN.md, "Command line": a contract that tests and docs use as is).

Each command parses its arguments here and hands over to the stage that implements it; errors the user can
cause end as one clear line on stderr and exit status 2 (1 for failures of the monitored system).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from replmon import __version__
from replmon.errors import ReplmonError

if TYPE_CHECKING:
    from replmon.localcluster.secure import LocalSecurity

err_console = Console(stderr=True, highlight=False)
console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)

Handler = Callable[[argparse.Namespace], int]


def _lazy(target: str) -> Handler:
    """A handler imported only when its command runs, so ``--help`` and cluster commands stay fast."""

    def run(args: argparse.Namespace) -> int:
        module, _, func = target.partition(":")
        handler: Handler = getattr(importlib.import_module(module), func)
        return handler(args)

    return run


# ---------------------------------------------------------------------------------------------- cluster
def _cluster_up(args: argparse.Namespace) -> int:
    from replmon.localcluster import KAFKA_VERSION, LocalCluster

    overrides = dict(_key_value(s) for s in args.set or [])
    if args.unclean_election:
        overrides["unclean.leader.election.enable"] = "true"
    with err_console.status(f"starting Apache Kafka {KAFKA_VERSION}") as status:
        cluster = LocalCluster.up(args.dir, brokers=args.brokers, overrides=overrides, secure=args.secure,
                                  on_progress=lambda msg: status.update(msg))
    err_console.print(f"local cluster up in {cluster.dir} (Kafka {KAFKA_VERSION}, brokers {cluster.broker_ids}, "
                      f"{cluster.protocol})")
    if cluster.spec.security is not None:
        err_console.print(_security_summary(cluster.spec.security), markup=False, soft_wrap=True)
    print(cluster.bootstrap_servers)
    return 0


def _security_summary(sec: LocalSecurity) -> str:
    """Where a client finds what it needs; never the passwords themselves."""
    return (f"security: {sec.protocol} ({sec.sasl_mechanism}), controller listener {sec.controller_protocol} with "
            f"client certificates; CA {sec.ca_file}; users {', '.join(sec.users)} (passwords in "
            f"{sec.credentials_file}, Java client settings in {sec.ca_file.parent}/USER.properties)")


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ReplmonError(f"--set takes KEY=VALUE, not {text!r}")
    return key.strip(), value.strip()


def _cluster_status(args: argparse.Namespace) -> int:
    from replmon.localcluster import LocalCluster

    cluster = LocalCluster.open(args.dir)
    table = Table(title=f"local cluster {cluster.dir}")
    for col in ("node id", "role", "pid", "state", "listener", "log dir"):
        table.add_column(col)
    colors = {"running": "green", "paused": "yellow", "stopped": "red"}
    for node in cluster.status():
        table.add_row(str(node.node_id), node.role, str(node.pid or "-"),
                      f"[{colors[node.state]}]{node.state}[/]", node.listener, str(node.log_dir))
    console.print(table)
    console.print(f"bootstrap servers: {cluster.bootstrap_servers} ({cluster.protocol})")
    if cluster.spec.security is not None:
        console.print(_security_summary(cluster.spec.security), markup=False, soft_wrap=True)
    return 0


def _cluster_down(args: argparse.Namespace) -> int:
    from replmon.localcluster import LocalCluster, resolve_cluster_dir

    cdir = resolve_cluster_dir(args.dir)
    if not (cdir / "cluster.json").exists():
        raise ReplmonError(f"no local cluster in {cdir}: nothing to stop")
    cluster = LocalCluster.open(cdir)
    stopped = cluster.down(purge=args.purge)
    if not stopped and not args.purge:
        raise ReplmonError(f"the local cluster in {cdir} is not running: nothing to stop")
    err_console.print(f"stopped {len(stopped)} process(es) of {cdir}" + (" and deleted it" if args.purge else ""))
    return 0


def _cluster_fault(args: argparse.Namespace) -> int:
    from replmon.localcluster import LocalCluster

    cluster = LocalCluster.open(args.dir)
    action = {"pause": cluster.pause, "resume": cluster.resume, "kill": cluster.kill,
              "stop": cluster.stop, "restart": cluster.restart}[args.action]
    action(args.broker_id)
    err_console.print(f"broker {args.broker_id}: {args.action} done ({cluster.node_state(args.broker_id)})")
    return 0


def _cluster_elect(args: argparse.Namespace) -> int:
    from replmon.localcluster import LocalCluster

    if not args.unclean:
        raise ReplmonError("only --unclean elections are offered (preferred elections need no tool)")
    cluster = LocalCluster.open(args.dir)
    cluster.elect_unclean(args.topic, args.partition)
    err_console.print(f"unclean election of {args.topic}-{args.partition} requested")
    return 0


# ---------------------------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="replmon",
        description="Monitor the replication state of Apache Kafka clusters: ISR, leader epochs, high "
        "watermarks and log end offsets, turned into metrics, events and alerts.",
    )
    parser.add_argument("--version", action="version", version=f"replmon {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    # cluster
    cluster = sub.add_parser("cluster", help="the local real Kafka cluster (KRaft, 127.0.0.1) and its faults",
                             description="A real Apache Kafka cluster on loopback: one controller and N brokers "
                             "as separate JVMs, for trying replmon and for its tests.")
    csub = cluster.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)

    def dir_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--dir", type=Path, default=None,
                       help="cluster directory (default: the one `up` started last)")

    up = csub.add_parser("up", help="start the local cluster and print its bootstrap servers",
                         description="Start one controller and N brokers on 127.0.0.1 (free ports), format "
                         "storage on first use, wait until every broker is registered and unfenced, and print "
                         "the bootstrap servers. Kafka is assembled from Maven Central and cached.")
    up.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    up.add_argument("--dir", type=Path, default=None, help="cluster directory (default: under the user's state dir)")
    up.add_argument("--set", action="append", metavar="KEY=VALUE",
                    help="override a broker setting, e.g. --set replica.lag.time.max.ms=5000 (repeatable)")
    up.add_argument("--unclean-election", action="store_true",
                    help="allow unclean leader election cluster-wide (unclean.leader.election.enable=true)")
    up.add_argument("--secure", action="store_true",
                    help="SASL_SSL listeners (SCRAM-SHA-512 over TLS, certificates made here), SCRAM users admin, "
                    "collector, agent and job, ACLs enforced (docs/security.md); only when the cluster is created")
    up.set_defaults(handler=_cluster_up)

    status = csub.add_parser("status", help="table of nodes: id, role, pid, state, listener, log dir")
    dir_arg(status)
    status.set_defaults(handler=_cluster_status)

    down = csub.add_parser("down", help="stop every process of the cluster")
    dir_arg(down)
    down.add_argument("--purge", action="store_true", help="also delete the cluster directory and its data")
    down.set_defaults(handler=_cluster_down)

    fault = csub.add_parser("fault", help="inject a fault into a broker",
                            description="pause = SIGSTOP, resume = SIGCONT, kill = SIGKILL, stop = SIGTERM "
                            "(controlled shutdown), restart = stop if running, then start with the same log dir.")
    fault.add_argument("action", choices=["pause", "resume", "kill", "stop", "restart"])
    fault.add_argument("broker_id", type=int, metavar="BROKER_ID")
    dir_arg(fault)
    fault.set_defaults(handler=_cluster_fault)

    elect = csub.add_parser("elect", help="force an unclean leader election for one partition",
                            description="ElectLeaders with type UNCLEAN: a live replica outside the ISR may "
                            "become leader; what only the old leader held is lost.")
    elect.add_argument("topic")
    elect.add_argument("partition", type=int)
    elect.add_argument("--unclean", action="store_true", required=True, help="required: say it out loud")
    dir_arg(elect)
    elect.set_defaults(handler=_cluster_elect)

    # collectors
    collect = sub.add_parser("collect", help="protocol sampler: sample every partition into the samples topic",
                             description="Sample leader, replicas, ISR, ELR, leader epoch and lineage, high "
                             "watermark and every replica's log end offset of the watched clusters, with a "
                             "constant number of requests per broker per cycle.")
    collect.add_argument("--config", type=Path, help="YAML configuration (default: the local cluster)")
    collect.add_argument("--once", action="store_true", help="run one cycle and exit")
    collect.add_argument("--output", metavar="-", help="'-' prints samples as JSON lines instead of publishing")
    collect.set_defaults(handler=_lazy("collectors.protocol.cli:collect"))

    agent = sub.add_parser("agent", help="log-dir agent: read replicas from a broker's log dirs (read-only)",
                           description="Read leader-epoch-checkpoint, replication-offset-checkpoint, "
                           "recovery-point-offset-checkpoint and the active segment's tail of every replica on "
                           "disk; works while the broker is down.")
    agent.add_argument("--log-dir", type=Path, nargs="+", required=True, dest="log_dirs", metavar="DIR")
    agent.add_argument("--config", type=Path, help="YAML configuration (default: the local cluster)")
    agent.add_argument("--broker-id", type=int, help="broker id (default: read from meta.properties)")
    agent.add_argument("--once", action="store_true", help="run one cycle and exit")
    agent.add_argument("--output", metavar="-", help="'-' prints samples as JSON lines instead of publishing")
    agent.set_defaults(handler=_lazy("collectors.logdir.cli:agent"))

    # streaming
    stream = sub.add_parser("stream", help="the Spark Structured Streaming job: samples to metrics and events")
    stream.add_argument("--config", type=Path, help="YAML configuration (default: the local cluster)")
    stream.set_defaults(handler=_lazy("streaming.cli:stream"))

    run = sub.add_parser("run", help="collector + agents + job + exporter; no cluster configured: the local one")
    run.add_argument("--config", type=Path, help="YAML configuration (default: the local cluster)")
    run.set_defaults(handler=_lazy("streaming.cli:run"))

    events = sub.add_parser("events", help="print events from the history")
    events.add_argument("--config", type=Path)
    events.add_argument("--cluster")
    events.add_argument("--topic")
    events.add_argument("--type", dest="event_type")
    events.add_argument("--since", help="ISO time or a duration such as 15m, 2h, 1d")
    events.set_defaults(handler=_lazy("streaming.cli:events"))

    demo = sub.add_parser("demo", help="run + a workload + a scripted fault timeline, narrated in the terminal")
    demo.set_defaults(handler=_lazy("replmon.demo:demo"))

    dashboards = sub.add_parser("dashboards", help="Grafana dashboards: build JSON, push with grafana-client")
    dashboards.add_argument("action", choices=["build", "push"])
    dashboards.add_argument("--config", type=Path)
    dashboards.set_defaults(handler=_lazy("dashboards.cli:dashboards"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result: int = args.handler(args)
        return result
    except ReplmonError as exc:
        err_console.print(f"replmon: {exc}", markup=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        err_console.print("replmon: interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
