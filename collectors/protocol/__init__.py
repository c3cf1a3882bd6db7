"""The protocol sampler: samples every partition of the watched clusters with a constant number of Kafka protocol
requests per broker and cycle (docs/design.md, "Collectors")."""
