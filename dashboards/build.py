"""replmon's Grafana dashboards, built in code with grafana-foundation-sdk.

Why grafana-foundation-sdk and not grafanalib: it is Grafana Labs' own SDK, generated (by cog) from the same
schemas Grafana itself uses, so every panel, option and query is a typed builder that mypy checks, and new
Grafana versions come as regenerated releases; grafanalib is a community project, hand-written, and lags
behind Grafana's panel types. The SDK's gaps (fields of Prometheus annotation queries it does not model:
``step``, ``titleFormat``, ``tagKeys``) are filled in after rendering, in :func:`render`, and nowhere else.

Three dashboards (uids are stable: links, pushes and provisioning rely on them):

- ``replmon-overview``: per cluster, the partitions at risk now and over time, event rates, data loss, and the
  health of replmon itself (job, collector).
- ``replmon-brokers``: per broker (variable ``broker``): replicas, leaders, out-of-ISR replicas, max lag.
- ``replmon-partition``: one partition (variables ``cluster``, ``topic``, ``partition``): ISR size against the
  replicas and min.insync.replicas, HW, LEO, HW lag, per-replica lag and ISR membership, leader and epoch.

All three show replmon's events as annotations (increases of replmon_events_total and of the data-loss
counters). Every query uses only metrics from the catalogue (replmon/contracts/metrics.py) or the collector
(collectors/metrics.py); :func:`build_all` refuses anything else.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.builders.common import ReduceDataOptions, VizLegendOptions
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.common import (
    BigValueColorMode,
    BigValueGraphMode,
    GraphDrawStyle,
    LegendDisplayMode,
    LegendPlacement,
    LineInterpolation,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from dashboards.catalog import unknown_names

DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
TAG = "replmon"
REFRESH = "30s"

# event types grouped for annotations (values of replmon_events_total's type label, see replmon/contracts/events.py)
ISR_EVENTS = ("ISR_SHRINK", "ISR_EXPAND", "ISR_FLAPPING")


# ------------------------------------------------------------------------------------------------ queries
def query(expr: str, legend: str = "__auto", ref: str = "A", *, instant: bool = False,
          fmt: PromQueryFormat | None = None) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DATASOURCE)
    q = q.instant() if instant else q.range()
    if fmt is not None:
        q = q.format(fmt)
    return q


def _refs(exprs: list[tuple[str, str]], **kw: Any) -> list[Builder[Any]]:
    return [query(expr, legend, chr(ord("A") + i), **kw) for i, (expr, legend) in enumerate(exprs)]


def _steps(*steps: tuple[float | None, str]) -> dash.ThresholdsConfig:
    return (dash.ThresholdsConfig().mode(model.ThresholdsMode.ABSOLUTE)
            .steps([model.Threshold(value=v, color=c) for v, c in steps]))


GOOD_IF_ZERO = _steps((None, "green"), (1, "red"))
WARN_IF_NONZERO = _steps((None, "green"), (1, "orange"))
NEUTRAL = _steps((None, "blue"))


# ------------------------------------------------------------------------------------------------ panels
def stat_panel(title: str, expr: str, *, description: str, thresholds: dash.ThresholdsConfig = NEUTRAL,
               unit: str = "short", w: int = 3, h: int = 4,
               mappings: list[model.ValueMap] | None = None) -> stat.Panel:
    panel = (stat.Panel().title(title).description(description).datasource(DATASOURCE)
             .with_target(query(expr, legend="__auto"))
             .unit(unit).thresholds(thresholds).span(w).height(h)
             .graph_mode(BigValueGraphMode.AREA).color_mode(BigValueColorMode.BACKGROUND)
             .reduce_options(ReduceDataOptions().calcs(["lastNotNull"]).values(False)))
    if mappings:
        panel = panel.mappings(list(mappings))
    return panel


def ts_panel(title: str, exprs: list[tuple[str, str]], *, description: str, unit: str = "short", w: int = 12,
             h: int = 8, bars: bool = False, stepped: bool = False, min_zero: bool = True) -> timeseries.Panel:
    panel = (timeseries.Panel().title(title).description(description).datasource(DATASOURCE)
             .targets(_refs(exprs)).unit(unit).span(w).height(h)
             .legend(VizLegendOptions().display_mode(LegendDisplayMode.LIST).placement(LegendPlacement.BOTTOM)
                     .show_legend(True))
             .fill_opacity(10).line_width(1))
    if min_zero:
        panel = panel.min(0)
    if bars:
        panel = panel.draw_style(GraphDrawStyle.BARS).fill_opacity(80)
    if stepped:
        panel = panel.line_interpolation(LineInterpolation.STEP_AFTER)
    return panel


def table_panel(title: str, exprs: list[tuple[str, str]], *, description: str, w: int = 24,
                h: int = 8) -> table.Panel:
    """Instant queries joined into one row per label set (Grafana's merge transformation)."""
    return (table.Panel().title(title).description(description).datasource(DATASOURCE)
            .targets(_refs(exprs, instant=True, fmt=PromQueryFormat.TABLE)).span(w).height(h)
            .with_transformation(model.DataTransformerConfig(id_val="merge", options={}))
            .with_transformation(model.DataTransformerConfig(
                id_val="organize", options={"excludeByName": {"Time": True}, "renameByName": {
                    f"Value #{chr(ord('A') + i)}": legend for i, (_e, legend) in enumerate(exprs)}})))


def state_panel(title: str, expr: str, legend: str, *, description: str, w: int = 12,
                h: int = 8) -> statetimeline.Panel:
    return (statetimeline.Panel().title(title).description(description).datasource(DATASOURCE)
            .with_target(query(expr, legend)).span(w).height(h)
            .mappings([model.ValueMap(options={
                "0": model.ValueMappingResult(text="out of ISR", color="red", index=0),
                "1": model.ValueMappingResult(text="in ISR", color="green", index=1)})])
            .thresholds(_steps((None, "red"), (1, "green"))))


YES_NO = [model.ValueMap(options={"0": model.ValueMappingResult(text="no", color="green", index=0),
                                  "1": model.ValueMappingResult(text="YES", color="red", index=1)})]


# ------------------------------------------------------------------------------------------------ variables
def datasource_variable() -> dash.DatasourceVariable:
    return dash.DatasourceVariable("datasource").label("Prometheus").type("prometheus")


def query_variable(name: str, label: str, metric_selector: str, *, multi: bool,
                   numeric: bool = False) -> dash.QueryVariable:
    order = model.VariableSort.NUMERICAL_ASC if numeric else model.VariableSort.ALPHABETICAL_ASC
    var = (dash.QueryVariable(name).label(label).datasource(DATASOURCE)
           .query(f"label_values({metric_selector}, {name})")
           .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(order))
    if multi:
        var = var.multi(True).include_all(True).all_value(".*")
    return var


# ------------------------------------------------------------------------------------------------ annotations
@dataclass(frozen=True)
class Annotation:
    """A Prometheus annotation query: a point where ``expr`` is non-empty, titled and tagged from its labels."""

    name: str
    expr: str
    color: str
    title: str
    text: str
    tag_keys: str
    enable: bool = True
    step: str = "60s"

    def builder(self) -> dash.AnnotationQuery:
        return (dash.AnnotationQuery().name(self.name).datasource(DATASOURCE).expr(self.expr)
                .enable(self.enable).hide(False).icon_color(self.color))

    def extra_fields(self) -> dict[str, Any]:
        return {"step": self.step, "titleFormat": self.title, "textFormat": self.text,
                "tagKeys": self.tag_keys, "useValueForTime": False}


def _new_or_increased(metric: str, selector: str, window: str = "2m") -> str:
    """Non-empty where a counter grew within ``window``, including the step that created it (a counter that
    replmon creates at its first event starts at 1, which increase() cannot see)."""
    m = f"{metric}{{{selector}}}"
    return f"(increase({m}[{window}]) > 0) or ({m} > 0 unless {m} offset {window})"


def event_annotations(selector: str) -> list[Annotation]:
    """``selector`` filters the topic-labelled counters (the events counter has only cluster and type)."""
    isr = "|".join(ISR_EVENTS)
    return [
        Annotation("Committed data lost", _new_or_increased("replmon_committed_messages_lost_total", selector),
                   "red", "Committed messages lost", "{{cluster}}/{{topic}}: HW went down", "cluster,topic"),
        Annotation("Unclean elections", _new_or_increased("replmon_unclean_leader_elections_total", selector),
                   "dark-red", "Unclean leader election", "{{cluster}}/{{topic}}", "cluster,topic"),
        Annotation("Epoch divergence", _new_or_increased("replmon_epoch_divergences_total", selector),
                   "purple", "Epoch divergence", "{{cluster}}/{{topic}}", "cluster,topic"),
        Annotation("replmon events", "sum by (cluster, type) ("
                   + _new_or_increased("replmon_events_total", f'cluster=~"$cluster", type!~"{isr}"') + ")",
                   "orange", "{{type}}", "{{cluster}}: {{type}}", "cluster,type"),
        Annotation("ISR changes", "sum by (cluster, type) ("
                   + _new_or_increased("replmon_events_total", f'cluster=~"$cluster", type=~"{isr}"') + ")",
                   "blue", "{{type}}", "{{cluster}}: {{type}}", "cluster,type", enable=False),
    ]


# ------------------------------------------------------------------------------------------------ dashboards
@dataclass
class Built:
    uid: str
    builder: dash.Dashboard
    annotations: list[Annotation] = field(default_factory=list)


def _dashboard(uid: str, title: str, description: str, variables: list[Builder[model.VariableModel]],
               notes: list[Annotation]) -> dash.Dashboard:
    board = (dash.Dashboard(title).uid(uid).description(description).tags([TAG]).editable()
             .refresh(REFRESH).time("now-1h", "now").timezone("browser")
             .tooltip(model.DashboardCursorSync.CROSSHAIR)
             .link(dash.DashboardLink("replmon").type(model.DashboardLinkType.DASHBOARDS).tags([TAG])
                   .as_dropdown(True).include_vars(True).keep_time(True)))
    for var in variables:
        board = board.with_variable(var)
    for note in notes:
        board = board.annotation(note.builder())
    return board


def overview() -> Built:
    c = 'cluster=~"$cluster"'
    notes = event_annotations(c)
    board = _dashboard(
        "replmon-overview", "replmon / Cluster overview",
        "Partitions at risk per cluster, replication events and data loss, and replmon's own health.",
        [datasource_variable(),
         query_variable("cluster", "Cluster", "replmon_cluster_partitions", multi=True)], notes)
    board = (board.with_row(dash.Row("Now"))
             .with_panel(stat_panel("Partitions", f"sum(replmon_cluster_partitions{{{c}}})",
                                    description="Partitions watched."))
             .with_panel(stat_panel("Under-replicated", f"sum(replmon_cluster_under_replicated_partitions{{{c}}})",
                                    description="Partitions with ISR < replicas.", thresholds=WARN_IF_NONZERO))
             .with_panel(stat_panel("Under min ISR", f"sum(replmon_cluster_under_min_isr_partitions{{{c}}})",
                                    description="ISR < min.insync.replicas: acks=all writes fail.",
                                    thresholds=GOOD_IF_ZERO))
             .with_panel(stat_panel("At min ISR", f"sum(replmon_cluster_at_min_isr_partitions{{{c}}})",
                                    description="ISR = min.insync.replicas: one more loss stops acks=all writes.",
                                    thresholds=_steps((None, "green"), (1, "yellow"))))
             .with_panel(stat_panel("Offline", f"sum(replmon_cluster_offline_partitions{{{c}}})",
                                    description="Partitions without a leader.", thresholds=GOOD_IF_ZERO))
             .with_panel(stat_panel("HW stalled", f"sum(replmon_cluster_hw_stalled_partitions{{{c}}})",
                                    description="Leader log end offset grows, high watermark does not.",
                                    thresholds=GOOD_IF_ZERO))
             .with_panel(stat_panel("Stale partitions", f"sum(replmon_cluster_stale_partitions{{{c}}})",
                                    description="No sample for longer than stream.stale_after_s.",
                                    thresholds=WARN_IF_NONZERO))
             .with_panel(stat_panel("Newest sample age",
                                    f"time() - max(replmon_cluster_last_sample_timestamp_seconds{{{c}}})",
                                    description="Age of the newest sample the job has seen (all selected clusters).",
                                    unit="s", thresholds=_steps((None, "green"), (30, "orange"), (60, "red"))))
             .with_row(dash.Row("Partitions at risk"))
             .with_panel(ts_panel("Partitions at risk by cluster", [
                 (f"sum by (cluster) (replmon_cluster_under_replicated_partitions{{{c}}})",
                  "{{cluster}} under-replicated"),
                 (f"sum by (cluster) (replmon_cluster_under_min_isr_partitions{{{c}}})", "{{cluster}} under min ISR"),
                 (f"sum by (cluster) (replmon_cluster_at_min_isr_partitions{{{c}}})", "{{cluster}} at min ISR"),
                 (f"sum by (cluster) (replmon_cluster_offline_partitions{{{c}}})", "{{cluster}} offline"),
             ], description="Partition counts from the job's cluster aggregates (always exported).", stepped=True,
                 w=8))
             .with_panel(ts_panel("HW stalled and stale partitions", [
                 (f"sum by (cluster) (replmon_cluster_hw_stalled_partitions{{{c}}})", "{{cluster}} HW stalled"),
                 (f"sum by (cluster) (replmon_cluster_stale_partitions{{{c}}})", "{{cluster}} stale"),
             ], description="HW stalled: LEO grows while the HW does not. Stale: no recent sample.", stepped=True,
                 w=8))
             .with_panel(ts_panel("Reassignments in flight", [
                 (f"sum by (cluster) (replmon_cluster_reassigning_partitions{{{c}}})", "{{cluster}} reassigning"),
             ], description="Partitions a reassignment is moving. The replicas it adds copy the log: neither "
                 "under-replicated nor in the brokers' max replica lag while they copy; their own lag stays in "
                 "replmon_replica_lag_messages, with replmon_replica_adding 1.", stepped=True, w=8))
             .with_panel(table_panel("Topics now", [
                 (f"sum by (cluster, topic) (replmon_topic_partitions{{{c}}})", "partitions"),
                 (f"sum by (cluster, topic) (replmon_topic_under_replicated_partitions{{{c}}})", "under-replicated"),
                 (f"sum by (cluster, topic) (replmon_topic_under_min_isr_partitions{{{c}}})", "under min ISR"),
                 (f"sum by (cluster, topic) (replmon_topic_offline_partitions{{{c}}})", "offline"),
                 (f"max by (cluster, topic) (replmon_topic_max_hw_lag_messages{{{c}}})", "max HW lag"),
             ], description="One row per topic: partitions, and how many are at risk."))
             .with_row(dash.Row("Events and data loss"))
             .with_panel(ts_panel("Events by type", [
                 (f"sum by (cluster, type) (rate(replmon_events_total{{{c}}}[$__rate_interval]))",
                  "{{cluster}} {{type}}"),
             ], description="Rate of replmon's events (ISR changes, leader changes, HW regressions, ...).",
                 unit="ops"))
             .with_panel(ts_panel("Committed messages lost", [
                 (f"sum by (cluster, topic) (increase(replmon_committed_messages_lost_total{{{c}}}[$__rate_interval]))",
                  "{{cluster}}/{{topic}}"),
             ], description="High watermark regressions: committed messages no replica holds any more.", bars=True))
             .with_panel(ts_panel("Never-committed tails discarded", [
                 (f"sum by (cluster, topic) (increase(replmon_uncommitted_messages_lost_total{{{c}}}"
                  "[$__rate_interval]))", "{{cluster}}/{{topic}}"),
             ], description="Offsets leader changes discarded above everything committed: writes acknowledged "
                 "to acks=0/1 producers (lost to them) or never acknowledged (retried). Each offset once.",
                 bars=True))
             .with_panel(ts_panel("Brokers fenced", [
                 (f"sum by (cluster, broker) (increase(replmon_broker_fencings_total{{{c}}}[$__rate_interval]))",
                  "{{cluster}} broker {{broker}}"),
             ], description="The controller fenced the broker without a controlled shutdown (heartbeats stopped, "
                 "or its process restarted); from the metadata log, needs a log-dir agent.", bars=True))
             .with_panel(ts_panel("Unclean elections and epoch divergences", [
                 (f"sum by (cluster, topic) (increase(replmon_unclean_leader_elections_total{{{c}}}"
                  "[$__rate_interval]))", "{{cluster}}/{{topic}} unclean election"),
                 (f"sum by (cluster, topic) (increase(replmon_epoch_divergences_total{{{c}}}[$__rate_interval]))",
                  "{{cluster}}/{{topic}} epoch divergence"),
             ], description="Leaders elected outside the ISR/ELR; replicas whose epoch lineage disagrees.",
                 bars=True))
             .with_panel(ts_panel("Newest sample age", [
                 (f"time() - replmon_cluster_last_sample_timestamp_seconds{{{c}}}", "{{cluster}}"),
             ], description="Seconds since the newest sample per cluster.", unit="s"))
             .with_row(dash.Row("replmon itself"))
             .with_panel(ts_panel("Job: micro-batches", [
                 ("replmon_job_batch_duration_seconds", "batch duration"),
                 ("replmon_job_sample_to_metric_delay_seconds", "sample to metric delay"),
                 ("time() - replmon_job_last_batch_timestamp_seconds", "since last batch"),
             ], description="The streaming job's last micro-batch.", unit="s", w=8))
             .with_panel(ts_panel("Job: rows", [
                 ("replmon_job_input_rows_per_second", "input rows/s"),
                 ("replmon_job_processed_rows_per_second", "processed rows/s"),
                 ("sum by (reason) (rate(replmon_quarantined_samples_total[$__rate_interval]))",
                  "quarantined {{reason}}/s"),
             ], description="Input and processing rate; samples quarantined by reason.", w=8))
             .with_panel(ts_panel("Job: state and series", [
                 ("replmon_job_state_rows", "state rows"),
                 ("replmon_job_partition_series", "partitions with series"),
                 ("replmon_job_partition_series_dropped", "partitions beyond the budget"),
             ], description="State store rows; per-partition series within stream.series_budget.", w=8))
             .with_panel(ts_panel("Collector: cycle duration (p95)", [
                 (f"histogram_quantile(0.95, sum by (le, cluster) "
                  f"(rate(replmon_collector_cycle_duration_seconds_bucket{{{c}}}[$__rate_interval])))", "{{cluster}}"),
             ], description="Wall time of a sampling cycle; above collector.interval_s cycles are skipped.",
                 unit="s", w=8))
             .with_panel(ts_panel("Collector: brokers and errors", [
                 (f"sum by (cluster) (replmon_collector_unreachable_brokers{{{c}}})",
                  "{{cluster}} unreachable brokers"),
                 (f"sum by (cluster, kind) (rate(replmon_collector_errors_total{{{c}}}[$__rate_interval]))",
                  "{{cluster}} errors {{kind}}/s"),
                 (f"sum by (cluster) (rate(replmon_collector_cycles_skipped_total{{{c}}}[$__rate_interval]))",
                  "{{cluster}} skipped cycles/s"),
             ], description="Brokers that did not answer; errors by kind; cycles skipped.", w=8))
             .with_panel(ts_panel("Collector: samples", [
                 ("sum(rate(replmon_collector_samples_published_total[$__rate_interval]))", "published/s"),
                 ("sum(rate(replmon_collector_samples_dropped_total[$__rate_interval]))", "dropped/s"),
                 ("sum(replmon_collector_samples_buffered)", "buffered"),
             ], description="Samples acknowledged by the samples topic, dropped, and waiting.", w=8)))
    return Built("replmon-overview", board, notes)


def brokers() -> Built:
    cb = 'cluster=~"$cluster", broker=~"$broker"'
    notes = event_annotations('cluster=~"$cluster"')
    board = _dashboard(
        "replmon-brokers", "replmon / Brokers",
        "Per broker: replicas, leaders, replicas outside the ISR, follower lag.",
        [datasource_variable(),
         query_variable("cluster", "Cluster", "replmon_cluster_partitions", multi=True),
         query_variable("broker", "Broker", 'replmon_broker_replicas{cluster=~"$cluster"}', multi=True,
                        numeric=True)], notes)
    legend = "{{cluster}} broker {{broker}}"
    board = (board.with_row(dash.Row("Brokers now"))
             .with_panel(table_panel("Brokers", [
                 (f"replmon_broker_replicas{{{cb}}}", "replicas"),
                 (f"replmon_broker_leaders{{{cb}}}", "leaders"),
                 (f"replmon_broker_out_of_isr_replicas{{{cb}}}", "out of ISR"),
                 (f"replmon_broker_max_replica_lag_messages{{{cb}}}", "max lag"),
             ], description="One row per broker, now.", h=7))
             .with_row(dash.Row("Over time"))
             .with_panel(ts_panel("Replicas", [(f"replmon_broker_replicas{{{cb}}}", legend)],
                                  description="Replicas the broker hosts.", stepped=True))
             .with_panel(ts_panel("Leaders", [(f"replmon_broker_leaders{{{cb}}}", legend)],
                                  description="Partitions the broker leads.", stepped=True))
             .with_panel(ts_panel("Replicas out of ISR", [(f"replmon_broker_out_of_isr_replicas{{{cb}}}", legend)],
                                  description="The broker's replicas that are not in their partition's ISR.",
                                  stepped=True))
             .with_panel(ts_panel("Max replica lag", [(f"replmon_broker_max_replica_lag_messages{{{cb}}}", legend)],
                                  description="Largest follower lag (leader LEO - replica LEO) among the broker's "
                                  "replicas, in messages; a replica a reassignment is adding (copying the log) is "
                                  "left out."))
             .with_panel(ts_panel("Max time lag of in-sync followers", [
                 (f"replmon_broker_max_in_sync_replica_lag_seconds{{{cb}}}", legend)],
                 description="How long the broker's most lagging follower still in the ISR has not caught up with "
                 "its leader; Kafka drops it at replica.lag.time.max.ms (30 s by default).", unit="s"))
             .with_row(dash.Row("Partitions of the broker"))
             .with_panel(table_panel("Replicas out of ISR", [
                 (f"replmon_replica_in_isr{{{cb}}} == 0", "in ISR"),
             ], description="The broker's replicas outside the ISR now (within the series budget).", w=12))
             .with_panel(ts_panel("Most lagging replicas", [
                 (f"topk(10, replmon_replica_lag_messages{{{cb}}})", "{{topic}}-{{partition}} on {{broker}}"),
             ], description="The 10 replicas of the selected brokers with the largest lag."))
             .with_panel(ts_panel("Unreachable brokers (collector)", [
                 ('sum by (cluster) (replmon_collector_unreachable_brokers{cluster=~"$cluster"})', "{{cluster}}"),
             ], description="Brokers that did not answer the collector in its last cycle.", stepped=True, w=24,
                 h=6)))
    return Built("replmon-brokers", board, notes)


def partition() -> Built:
    p = 'cluster="$cluster", topic="$topic", partition="$partition"'
    notes = event_annotations('cluster="$cluster", topic="$topic"')
    board = _dashboard(
        "replmon-partition", "replmon / Partition",
        "One partition: ISR, high watermark, log end offsets, per-replica lag, leader and epoch.",
        [datasource_variable(),
         query_variable("cluster", "Cluster", "replmon_cluster_partitions", multi=False),
         query_variable("topic", "Topic", 'replmon_partition_isr_size{cluster="$cluster"}', multi=False),
         query_variable("partition", "Partition",
                        'replmon_partition_isr_size{cluster="$cluster", topic="$topic"}', multi=False,
                        numeric=True)], notes)
    board = (board.with_row(dash.Row("Now"))
             .with_panel(stat_panel("Leader", f"replmon_partition_leader{{{p}}}",
                                    description="Broker id of the leader (-1: none).",
                                    thresholds=_steps((None, "red"), (0, "blue"))))
             .with_panel(stat_panel("Leader epoch", f"replmon_partition_leader_epoch{{{p}}}",
                                    description="Increments at every leader change."))
             .with_panel(stat_panel("ISR / replicas",
                                    f"replmon_partition_isr_size{{{p}}} / replmon_partition_replicas{{{p}}}",
                                    description="Fraction of the replicas in the ISR.", unit="percentunit",
                                    thresholds=_steps((None, "red"), (0.99, "green"))))
             .with_panel(stat_panel("HW lag", f"replmon_partition_hw_lag_messages{{{p}}}",
                                    description="Leader log end offset minus high watermark."))
             .with_panel(stat_panel("Under-replicated", f"replmon_partition_under_replicated{{{p}}}",
                                    description="ISR < replicas.", mappings=YES_NO, thresholds=WARN_IF_NONZERO))
             .with_panel(stat_panel("Under min ISR", f"replmon_partition_under_min_isr{{{p}}}",
                                    description="ISR < min.insync.replicas.", mappings=YES_NO,
                                    thresholds=GOOD_IF_ZERO))
             .with_panel(stat_panel("At min ISR", f"replmon_partition_at_min_isr{{{p}}}",
                                    description="ISR = min.insync.replicas.", mappings=YES_NO,
                                    thresholds=_steps((None, "green"), (1, "yellow"))))
             .with_panel(stat_panel("Offline", f"replmon_partition_offline{{{p}}}", description="No leader.",
                                    mappings=YES_NO, thresholds=GOOD_IF_ZERO))
             .with_row(dash.Row("ISR"))
             .with_panel(ts_panel("ISR size", [
                 (f"replmon_partition_isr_size{{{p}}}", "ISR"),
                 (f"replmon_partition_replicas{{{p}}}", "replicas"),
                 (f"replmon_partition_min_insync_replicas{{{p}}}", "min.insync.replicas"),
             ], description="ISR size against the replication factor and min.insync.replicas.", stepped=True))
             .with_panel(state_panel("Replicas in ISR", f"replmon_replica_in_isr{{{p}}}", "broker {{broker}}",
                                     description="ISR membership of each replica."))
             .with_row(dash.Row("Offsets"))
             .with_panel(ts_panel("High watermark and log end offset", [
                 (f"replmon_partition_high_watermark{{{p}}}", "high watermark"),
                 (f"replmon_partition_log_end_offset{{{p}}}", "leader log end offset"),
             ], description="The HW trails the leader's LEO by a fetch round; a falling HW is data loss.",
                 min_zero=False))
             .with_panel(ts_panel("HW lag", [(f"replmon_partition_hw_lag_messages{{{p}}}", "HW lag")],
                                  description="Leader log end offset minus high watermark, in messages."))
             .with_panel(ts_panel("Lag per replica", [(f"replmon_replica_lag_messages{{{p}}}", "broker {{broker}}")],
                                  description="Leader log end offset minus each replica's log end offset."))
             .with_panel(ts_panel("Time lag per replica", [
                 (f"replmon_replica_lag_seconds{{{p}}}", "broker {{broker}}")],
                 description="How long ago the leader's log ended where each replica's ends now.", unit="s"))
             .with_panel(ts_panel("Leader and leader epoch", [
                 (f"replmon_partition_leader{{{p}}}", "leader (broker id)"),
                 (f"replmon_partition_leader_epoch{{{p}}}", "leader epoch"),
             ], description="Leader changes and the epoch they start.", stepped=True, min_zero=False)))
    return Built("replmon-partition", board, notes)


BUILDERS = (overview, brokers, partition)


# ------------------------------------------------------------------------------------------------ rendering
def render(built: Built) -> dict[str, Any]:
    """The dashboard as Grafana JSON: sequential panel ids, annotation fields the SDK does not model."""
    data: dict[str, Any] = json.loads(JSONEncoder(sort_keys=True).encode(built.builder.build()))
    next_id = 1
    for panel in data["panels"]:
        panel["id"] = next_id
        next_id += 1
        for inner in panel.get("panels", []):
            inner["id"] = next_id
            next_id += 1
    by_name = {a.name: a for a in built.annotations}
    notes: list[dict[str, Any]] = data.setdefault("annotations", {}).setdefault("list", [])
    for entry in notes:
        entry.update(by_name[entry["name"]].extra_fields())
    # Grafana's own built-in annotations (alerts, manual annotations), as every dashboard has them
    notes.insert(0, {
        "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True, "hide": True,
        "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard"})
    return data


def build_all() -> dict[str, dict[str, Any]]:
    """uid -> dashboard JSON; raises ValueError if a query uses a metric replmon does not export."""
    out: dict[str, dict[str, Any]] = {}
    for make in BUILDERS:
        built = make()
        data = render(built)
        bad = {name for expr in expressions(data) for name in unknown_names(expr)}
        if bad:
            raise ValueError(f"dashboard {built.uid} uses metrics replmon does not export: {sorted(bad)}")
        out[built.uid] = data
    return out


def expressions(data: dict[str, Any]) -> list[str]:
    """Every PromQL expression of a dashboard: panel targets, annotation queries, query variables (the
    selector inside ``label_values(...)``)."""
    exprs: list[str] = []

    def panels(items: list[dict[str, Any]]) -> None:
        for panel in items:
            exprs.extend(t["expr"] for t in panel.get("targets") or [] if t.get("expr"))
            panels(panel.get("panels") or [])

    panels(data.get("panels") or [])
    exprs.extend(a["expr"] for a in data.get("annotations", {}).get("list", []) if a.get("expr"))
    for var in data.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            text = var["query"] if isinstance(var["query"], str) else var["query"].get("query", "")
            match = re.fullmatch(r"label_values\((.+),\s*\w+\)", text.strip())
            exprs.append(match.group(1) if match else text)
    return exprs


def to_json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
