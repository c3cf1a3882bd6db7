"""The streaming stage of the replmon pipeline: the Spark job from samples to events, metrics and history
(docs/design.md, "The streaming job")."""
