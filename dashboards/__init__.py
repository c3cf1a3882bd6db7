"""The dashboards stage of the replmon pipeline: Grafana dashboards built from the metric catalogues
(docs/design.md, "Architecture")."""
