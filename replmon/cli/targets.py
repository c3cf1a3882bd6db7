"""Which clusters replmon watches, decided once for every command: the configured ones, or else the local cluster
of `replmon cluster up`. The stages receive the complete configuration this makes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from replmon.core.config import ClusterConfig, ReplmonConfig, load_config
from replmon.core.errors import ReplmonError
from replmon.testbed.localcluster import LocalCluster, NodeState

LOCAL_CLUSTER_NAME = "local"


def local_cluster_config(cluster_dir: Path | str | None = None, require_running: bool = True) -> ClusterConfig:
    """The local cluster as a watched cluster, with its brokers' log dirs for the log-dir agents."""
    cluster = LocalCluster.open(cluster_dir)
    if require_running and all(s.state == NodeState.STOPPED for s in cluster.status() if s.role == "broker"):
        raise ReplmonError(f"the local cluster in {cluster.dir} is not running: start it with `replmon cluster up`")
    return ClusterConfig(
        name=LOCAL_CLUSTER_NAME,
        bootstrap_servers=cluster.bootstrap_servers.split(","),
        log_dirs={b: [cluster.broker_log_dir(b)] for b in cluster.broker_ids},
        security=cluster.client_security(),  # a secure local cluster: its admin (docs/security.md)
    )


def with_default_cluster(config: ReplmonConfig, cluster_dir: Path | str | None = None) -> ReplmonConfig:
    """``config`` unchanged when it names clusters; else the same with the local cluster filled in."""
    if config.clusters:
        return config
    return config.model_copy(update={"clusters": [local_cluster_config(cluster_dir)]})


def collector_config(path: Path | None, cluster_dir: Path | None = None) -> ReplmonConfig:
    """The collector's configuration: the clusters it watches are needed."""
    return with_default_cluster(load_config(path), cluster_dir)


def stream_config(path: Path | None, cluster_dir: Path | None = None) -> ReplmonConfig:
    """The job's configuration. The job reads only the samples topic: with ``transport.bootstrap_servers`` set it
    needs no watched cluster (it may run on another host than the collectors, or start before the clusters);
    without, the samples topic is on the first watched cluster, by default the local one."""
    config = load_config(path)
    return config if config.transport.bootstrap_servers else with_default_cluster(config, cluster_dir)


def agent_config(path: Path | None, log_dirs: Sequence[Path], publish: bool,
                 cluster_dir: Path | None = None) -> tuple[ReplmonConfig, str]:
    """The agent's configuration (complete when it publishes: the samples topic is on the transport or the first
    watched cluster) and the name of the cluster its log dirs belong to."""
    config = load_config(path)
    cluster = agent_cluster(config, log_dirs)
    if publish and not config.transport.bootstrap_servers:
        config = with_default_cluster(config, cluster_dir)
    return config, cluster


def agent_cluster(config: ReplmonConfig, log_dirs: Sequence[Path]) -> str:
    """The name of the cluster whose brokers' log dirs these are: a configured one (see
    :func:`collectors.logdir.service.cluster_name`), else the local cluster, also when it is not running (the
    agent's point is to read brokers that are down)."""
    from collectors.logdir.service import cluster_name

    return cluster_name(config, log_dirs) if config.clusters else LOCAL_CLUSTER_NAME
