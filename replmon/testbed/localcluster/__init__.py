"""The local real Kafka cluster: the embedded default target of replmon and its test bed."""

from replmon.testbed.localcluster.artifacts import KAFKA_VERSION
from replmon.testbed.localcluster.cluster import (
    LocalCluster,
    NodeState,
    NodeStatus,
    cluster_dir_to_start,
    resolve_cluster_dir,
)

__all__ = ["KAFKA_VERSION", "LocalCluster", "NodeState", "NodeStatus", "cluster_dir_to_start", "resolve_cluster_dir"]
