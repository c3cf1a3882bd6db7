"""replmon: a monitor for the replication state of Apache Kafka clusters."""

__version__ = "0.1.0"
