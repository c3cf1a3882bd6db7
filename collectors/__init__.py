"""The collectors stage of the replmon pipeline: the protocol sampler and the log-dir agent, which publish samples to
the samples topic (docs/design.md, "Architecture" and "Collectors")."""
