"""Which clusters replmon watches: the configured ones, or else the local cluster of `replmon cluster up`."""

from __future__ import annotations

from pathlib import Path

from replmon.config import ClusterConfig, ReplmonConfig
from replmon.errors import ReplmonError
from replmon.localcluster import LocalCluster, NodeState

LOCAL_CLUSTER_NAME = "local"


def local_cluster_config(cluster_dir: Path | str | None = None) -> ClusterConfig:
    """The local cluster as a watched cluster, with its brokers' log dirs for the log-dir agents."""
    cluster = LocalCluster.open(cluster_dir)
    if all(s.state == NodeState.STOPPED for s in cluster.status() if s.role == "broker"):
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
