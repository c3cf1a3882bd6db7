"""The record contracts between the stages, each defined once (pydantic): the samples the collectors publish,
the events the job publishes, and the catalogue of metrics the job exports. Everything else (Spark schemas,
validation, docs, dashboards) derives from them.

Above the plumbing (``replmon.core``), below the stages."""
