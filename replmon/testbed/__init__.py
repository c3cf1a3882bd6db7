"""The test bed: the local real Kafka cluster, the sequenced workload (ground truth for loss), the read-only
view of a cluster the tests and benchmarks check against, and the pipeline harness that runs replmon's stages
as an operator does. Used by the front door (``replmon cluster``, ``replmon demo``), the tests and the benches;
never by a stage."""
