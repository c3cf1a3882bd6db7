"""The ``replmon`` command line (docs/design.md, "Command line": a contract that tests and docs use as is).

Each command parses its arguments here and hands over to the stage that implements it; errors the user can
cause end as one clear line on stderr and exit status 2 (1 for failures of the monitored system).
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from replmon import __version__
from replmon.cli import cluster as cluster_commands
from replmon.core.console import say
from replmon.core.errors import ReplmonError

Handler = Callable[[argparse.Namespace], int]


# Each stage is imported only when its command runs, so ``--help`` and the cluster commands stay fast.
def _collect(args: argparse.Namespace) -> int:
    from collectors.protocol.service import collect
    from replmon.cli.targets import collector_config

    if args.output not in (None, "-"):
        raise ReplmonError(f"--output takes '-' (JSON lines on stdout), not {args.output!r}")
    return collect(collector_config(args.config, args.cluster_dir), once=args.once, json_lines=args.output == "-")


def _agent(args: argparse.Namespace) -> int:
    from collectors.logdir.service import agent
    from replmon.cli.targets import agent_config

    if args.output not in (None, "-"):
        raise ReplmonError(f"--output takes only '-' (JSON lines on stdout), not {args.output!r}")
    log_dirs = [Path(d) for d in args.log_dirs]
    config, cluster = agent_config(args.config, log_dirs, publish=args.output is None, cluster_dir=args.cluster_dir)
    return agent(config, log_dirs, cluster=cluster, broker_id=args.broker_id, once=args.once,
                 json_lines=args.output == "-")


def _stream(args: argparse.Namespace) -> int:
    from replmon.cli.targets import stream_config
    from streaming.service import stream

    return stream(stream_config(args.config, args.cluster_dir))


def _package(args: argparse.Namespace) -> int:
    from replmon.cli.package import package

    return package(args.output)


def _run(args: argparse.Namespace) -> int:
    from replmon.cli.run import run

    return run(args.config, args.cluster_dir)


def _events(args: argparse.Namespace) -> int:
    from replmon.cli.events import EventFilter, event_type, events, parse_since
    from replmon.cli.targets import stream_config
    from replmon.core import locations
    from replmon.core.config import load_config

    source = args.source or ("topic" if args.follow else "history")
    if args.follow and source != "topic":
        raise ReplmonError("--follow reads the events topic: it goes with --from topic, not --from history")
    if args.history_dir is not None and source != "history":
        raise ReplmonError("--history-dir goes with --from history")
    if args.history_dir is not None:  # refused as stream.history_dir is in the configuration, in the same words
        try:
            locations.normalize(args.history_dir)
        except ValueError as exc:
            raise ReplmonError(f"--history-dir: {exc}") from None
    for option, value in (("--cluster", args.cluster), ("--topic", args.topic)):
        if value is not None and not value.strip():  # an empty shell variable: it would match no event at all
            raise ReplmonError(f"{option} takes a {option[2:]} name, not {value!r}")
    keep = EventFilter(cluster=args.cluster, topic=args.topic,
                       type=event_type(args.event_type) if args.event_type is not None else None,
                       since_ms=int(parse_since(args.since).timestamp() * 1000) if args.since is not None else None)
    config = load_config(args.config) if source == "history" else stream_config(args.config, args.cluster_dir)
    return events(config, source=source, history_dir=args.history_dir, keep=keep, follow=args.follow,
                  as_json=args.json)


def _demo(args: argparse.Namespace) -> int:
    from replmon.cli.demo import demo

    return demo(args.cluster_dir)


def _dashboards(args: argparse.Namespace) -> int:
    from replmon.cli.dashboards import dashboards

    return dashboards(args.action, args.config)


# ---------------------------------------------------------------------------------------------- parser
class _Parser(argparse.ArgumentParser):
    """argparse's parser (its subcommands' too), a mistake on the command line told in one line as every other
    mistake is, naming the help that lists what the command takes: ``replmon agent: argument --broker-id: invalid
    int value: 'x' (see replmon agent --help)``, exit status 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.set_defaults(parser_=self)  # the innermost command's parser wins: it names what it does not know

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        """argparse's, but an argument no command takes is refused by the command it was given to, with the
        option of that command closest to it."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            owner: _Parser = getattr(parsed, "parser_", self)
            options = list(owner._option_string_actions)
            close = difflib.get_close_matches(extras[0].split("=")[0], options, n=1, cutoff=0.7)
            owner.error(f"unrecognized arguments: {' '.join(extras)}"
                        + (f" (did you mean {close[0]}?)" if close else ""))
        return parsed


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
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
        p.add_argument("--dir", "--cluster-dir", dest="dir", type=Path, default=None,
                       help="cluster directory (default: the one `up` started last)")

    up = csub.add_parser("up", help="start the local cluster and print its bootstrap servers",
                         description="Start one controller and N brokers on 127.0.0.1 (free ports), format "
                         "storage on first use, wait until every broker is registered and unfenced, and print "
                         "the bootstrap servers. Kafka is assembled from Maven Central and cached.")
    up.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    up.add_argument("--dir", "--cluster-dir", dest="dir", type=Path, default=None,
                    help="cluster directory (default: under the user's state dir)")
    up.add_argument("--set", action="append", metavar="KEY=VALUE",
                    help="override a broker setting, e.g. --set replica.lag.time.max.ms=5000 (repeatable)")
    up.add_argument("--unclean-election", action="store_true",
                    help="allow unclean leader election cluster-wide (unclean.leader.election.enable=true)")
    up.add_argument("--secure", action="store_true",
                    help="SASL_SSL listeners (SCRAM-SHA-512 over TLS, certificates made here), SCRAM users admin, "
                    "collector, agent and job, ACLs enforced (docs/security.md); only when the cluster is created")
    up.set_defaults(handler=cluster_commands.cluster_up)

    status = csub.add_parser("status", help="table of nodes: id, role, pid, state, listener, log dir")
    dir_arg(status)
    status.add_argument("--json", action="store_true",
                        help="print one JSON object: dir, bootstrap_servers, security_protocol, nodes, log_dirs, "
                        "security (file locations, no secrets)")
    status.set_defaults(handler=cluster_commands.cluster_status)

    down = csub.add_parser("down", help="stop every process of the cluster")
    dir_arg(down)
    down.add_argument("--purge", action="store_true", help="also delete the cluster directory and its data")
    down.set_defaults(handler=cluster_commands.cluster_down)

    fault = csub.add_parser("fault", help="inject a fault into a broker",
                            description="pause = SIGSTOP, resume = SIGCONT, kill = SIGKILL, stop = SIGTERM "
                            "(controlled shutdown), restart = stop if running, then start with the same log dir.")
    fault.add_argument("action", choices=["pause", "resume", "kill", "stop", "restart"])
    fault.add_argument("broker_id", type=int, metavar="BROKER_ID")
    dir_arg(fault)
    fault.set_defaults(handler=cluster_commands.cluster_fault)

    elect = csub.add_parser("elect", help="force an unclean leader election for one partition",
                            description="ElectLeaders with type UNCLEAN: a live replica outside the ISR may "
                            "become leader; what only the old leader held is lost.")
    elect.add_argument("topic")
    elect.add_argument("partition", type=int)
    elect.add_argument("--unclean", action="store_true", required=True, help="required: say it out loud")
    dir_arg(elect)
    elect.set_defaults(handler=cluster_commands.cluster_elect)

    def watch_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", type=Path, help="YAML configuration (default: the local cluster)")
        p.add_argument("--cluster-dir", type=Path, default=None, metavar="DIR",
                       help="with no cluster configured, the local cluster in DIR (default: the one `cluster up` "
                       "started last)")

    # collectors
    collect = sub.add_parser("collect", help="protocol sampler: sample every partition into the samples topic",
                             description="Sample leader, replicas, ISR, ELR, leader epoch and lineage, high "
                             "watermark and every replica's log end offset of the watched clusters, with a "
                             "constant number of requests per broker per cycle.")
    watch_args(collect)
    collect.add_argument("--once", action="store_true", help="run one cycle and exit")
    collect.add_argument("--output", metavar="-", help="'-' prints samples as JSON lines instead of publishing")
    collect.set_defaults(handler=_collect)

    agent = sub.add_parser("agent", help="log-dir agent: read replicas from a broker's log dirs (read-only)",
                           description="Read leader-epoch-checkpoint, replication-offset-checkpoint, "
                           "recovery-point-offset-checkpoint and the active segment's tail of every replica on "
                           "disk; works while the broker is down.")
    agent.add_argument("--log-dir", type=Path, nargs="+", required=True, dest="log_dirs", metavar="DIR")
    watch_args(agent)
    agent.add_argument("--broker-id", type=int, help="broker id (default: read from meta.properties)")
    agent.add_argument("--once", action="store_true", help="run one cycle and exit")
    agent.add_argument("--output", metavar="-", help="'-' prints samples as JSON lines instead of publishing")
    agent.set_defaults(handler=_agent)

    # streaming
    stream = sub.add_parser("stream", help="the Spark Structured Streaming job: samples to metrics and events")
    watch_args(stream)
    stream.set_defaults(handler=_stream)

    pack = sub.add_parser("package", help="replmon's code for Spark executors, and the spark-submit command",
                          description="Build the zip of replmon's code the executors import (shipped through "
                          "spark.archives, docs/deploy.md) and print its path and the job's spark-submit command.")
    pack.add_argument("--output", type=Path, default=Path("dist"), metavar="DIR",
                      help="where to write the archive (default: ./dist)")
    pack.set_defaults(handler=_package)

    run = sub.add_parser("run", help="collector + agents + job + exporter; no cluster configured: the local one")
    watch_args(run)
    run.set_defaults(handler=_run)

    events = sub.add_parser("events", help="print the job's events: from its history, or the events topic (live)",
                            description="The events the job wrote to its history (Parquet, stream.history_dir) or, "
                            "with --from topic, published to the events topic; --follow keeps printing new ones. "
                            "--json prints one event record a line (docs/events.md).")
    watch_args(events)
    events.add_argument("--from", dest="source", choices=["history", "topic"], default=None,
                        help="where to read: the history (default) or the events topic (default with --follow)")
    events.add_argument("--follow", action="store_true", help="keep printing events as they are published")
    events.add_argument("--history-dir", default=None, metavar="DIR",
                        help="the history to read, a directory or a Hadoop filesystem URI (default: "
                        "stream.history_dir of the configuration)")
    events.add_argument("--json", action="store_true", help="one JSON object a line, every field of the record")
    events.add_argument("--cluster", help="only events of this watched cluster")
    events.add_argument("--topic", help="only events of this topic")
    events.add_argument("--type", dest="event_type", help="only events of this type, e.g. LEADER_CHANGE")
    events.add_argument("--since", help="ISO time or a duration ago such as 15m, 2h, 1d (or -15m)")
    events.set_defaults(handler=_events)

    demo = sub.add_parser("demo", help="run + a workload + a scripted fault timeline, narrated in the terminal")
    demo.add_argument("--cluster-dir", type=Path, default=None, metavar="DIR",
                      help="the local cluster to use, started when it is not running (default: the one "
                      "`cluster up` started last)")
    demo.set_defaults(handler=_demo)

    dashboards = sub.add_parser("dashboards", help="Grafana dashboards: build JSON, push with grafana-client",
                                description="build: write the dashboards' JSON and Grafana's provisioning files "
                                "under dashboards/ (for file provisioning); push: create or update them in the "
                                "Grafana of grafana.url, in grafana.folder, with grafana.token (a service account "
                                "token, Editor role).")
    dashboards.add_argument("action", choices=["build", "push"], help="build the files, or push to Grafana")
    dashboards.add_argument("--config", type=Path, help="YAML configuration (its grafana section)")
    dashboards.set_defaults(handler=_dashboards)
    return parser


TAKES_DASHED = ("--since",)
"""Options whose value may begin with '-' (``--since -5m``), which argparse would take for an option."""


def dashed_values(argv: Sequence[str]) -> list[str]:
    """``argv`` with the value of each option of :data:`TAKES_DASHED` joined to it (``--since=-5m``) when it
    begins with '-' but is not an option of its own."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token in TAKES_DASHED and i + 1 < len(argv) and argv[i + 1][:1] == "-" and argv[i + 1][:2] != "--":
            out.append(f"{token}={argv[i + 1]}")
            i += 2
            continue
        out.append(token)
        i += 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(dashed_values(sys.argv[1:] if argv is None else argv))
    try:
        if any(name.upper().startswith("REPLMON_") for name in os.environ):  # spares --help the import otherwise
            from replmon.core.config import misspelt_variables

            if problems := misspelt_variables(os.environ):
                raise ReplmonError("; ".join(problems))
        result: int = args.handler(args)
        return result
    except ReplmonError as exc:
        say(f"replmon: {exc}")
        return 2
    except KeyboardInterrupt:
        say("replmon: interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
