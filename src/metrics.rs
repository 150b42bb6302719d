//! Prometheus metrics: a small process-wide registry and the text exposition format.
//!
//! Every metric the daemon exports is declared in [`DEFINED`] (name, type, help);
//! `/metrics` prints all of them, so the dashboards' check can hold queries to that
//! list. Label values are bounded sets (severities, reasons, tool and provider names,
//! route templates): never ids.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

pub struct Def {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
}

const fn def(name: &'static str, kind: Kind, help: &'static str) -> Def {
    Def { name, kind, help }
}

use Kind::{Counter, Gauge, Histogram};

pub const DEFINED: &[Def] = &[
    def("twinops_ingest_messages_received_total", Counter, "MQTT messages received by ingest."),
    def("twinops_ingest_messages_committed_total", Counter, "MQTT messages whose effects were committed."),
    def("twinops_ingest_messages_acked_total", Counter, "MQTT messages acknowledged to the broker after commit."),
    def("twinops_ingest_dead_letters_total", Counter, "Messages or events refused into dead_letters, by reason."),
    def(
        "twinops_ingest_batches_failed_total",
        Counter,
        "Ingest batches that could not be committed (left unacked; ingest reconnects for redelivery).",
    ),
    def("twinops_ingest_batch_messages", Histogram, "Messages per ingest batch (one transaction)."),
    def("twinops_sparkplug_messages_total", Counter, "Sparkplug B messages applied, by type (NBIRTH, DDATA, ...)."),
    def(
        "twinops_sparkplug_sequence_gaps_total",
        Counter,
        "Sparkplug messages whose seq was not the one due (a message lost or reordered).",
    ),
    def(
        "twinops_sparkplug_rebirth_requests_total",
        Counter,
        "Rebirth requests (NCMD Node Control/Rebirth) sent to edge nodes.",
    ),
    def(
        "twinops_opcua_notifications_total",
        Counter,
        "OPC UA notifications with data received, by subscription (values, events).",
    ),
    def(
        "twinops_opcua_sequence_gaps_total",
        Counter,
        "OPC UA notification sequence gaps found, by subscription (each filled by Republish or recorded).",
    ),
    def("twinops_opcua_republished_total", Counter, "OPC UA notifications recovered by Republish, by subscription."),
    def("twinops_opcua_reconnects_total", Counter, "OPC UA sessions connected again after a loss."),
    def("twinops_opcua_up", Gauge, "1 while the OPC UA session is up and subscribed (when [opcua] is on)."),
    def(
        "twinops_cluster_acting",
        Gauge,
        "1 while this node is the acting one of its redundant pair (when [cluster] is on).",
    ),
    def(
        "twinops_cluster_term",
        Gauge,
        "The lease term this node last heard of its redundant pair (when [cluster] is on).",
    ),
    def("twinops_opcua_connect_failures_total", Counter, "OPC UA connects that failed (each retried with backoff)."),
    def(
        "twinops_opcua_bad_values_total",
        Counter,
        "OPC UA values with a bad or uncertain status: not stored, their sensor marked stale.",
    ),
    def("twinops_ingest_commit_seconds", Histogram, "From queueing a batch to its commit."),
    def(
        "twinops_store_writer_busy_seconds_total",
        Counter,
        "Time the single writer spent in transactions, BEGIN to COMMIT (its rate: the fraction of time it is busy).",
    ),
    def(
        "twinops_agent_notes_set_aside_total",
        Counter,
        "Triage notes from a model set aside for the rules model's note, by the flaw that failed its repair turn.",
    ),
    def("twinops_alarms_raised_total", Counter, "New alarm occurrences, by severity."),
    def(
        "twinops_alarms_raised_by_code_total",
        Counter,
        "New alarm occurrences by alarm code (at most 500 codes; beyond, 'other').",
    ),
    def(
        "twinops_alarm_chatter_total",
        Counter,
        "Occurrences of chattering alarm points (3 or more activations in 60 s).",
    ),
    def(
        "twinops_alarms_backfilled_total",
        Counter,
        "New occurrences received long after they were raised (a replayed buffer): journalled, summarised in one note per backfill.",
    ),
    def(
        "twinops_alarms_suppressed_total",
        Counter,
        "New occurrences of alarm points out of service: recorded, not annunciated or triaged.",
    ),
    def("twinops_alarms", Gauge, "Alarm occurrences not cleared, by ISA-18.2 state and severity."),
    def("twinops_alarm_flood", Gauge, "1 while more than 10 alarms were raised in the last 10 minutes."),
    def(
        "twinops_alarms_raised_last_10m",
        Gauge,
        "Alarms raised in the last 10 minutes (ISA-18.2 flood lines: 10 and 5).",
    ),
    def("twinops_triage_queue_depth", Gauge, "Triage jobs waiting."),
    def(
        "twinops_directory_up",
        Gauge,
        "1 while the directory (LDAP, AD) answers, 0 when its last call failed; absent without one.",
    ),
    def("twinops_triage_wait_seconds", Histogram, "From an occurrence's job being queued to a worker taking it."),
    def("twinops_triage_run_seconds", Histogram, "One triage run (a group of one asset's occurrences)."),
    def("twinops_triage_runs_total", Counter, "Triage runs by mode (agent, rules) and outcome."),
    def("twinops_model_calls_total", Counter, "Model calls by provider and outcome (ok or the error class)."),
    def("twinops_model_call_seconds", Histogram, "Model call latency by provider."),
    def("twinops_model_tokens_total", Counter, "Tokens by provider and direction (input, output)."),
    def("twinops_model_breaker_open", Gauge, "1 while a provider's circuit breaker is open (or half-open)."),
    def("twinops_tool_calls_total", Counter, "Tool calls by tool, caller (agent, mcp) and outcome (ok, error)."),
    def("twinops_tool_call_seconds", Histogram, "Tool call latency by tool."),
    def("twinops_guardrail_decisions_total", Counter, "Guardrail decisions by kind."),
    def("twinops_work_orders", Gauge, "Work orders by status."),
    def("twinops_http_requests_total", Counter, "HTTP requests by route template, method and status."),
    def("twinops_http_request_seconds", Histogram, "HTTP request latency by route template."),
];

const BUCKETS: &[f64] = &[0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0];
const SIZE_BUCKETS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0];

type Labels = Vec<(&'static str, String)>;

#[derive(Default)]
struct Hist {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

#[derive(Default)]
struct Registry {
    counters: BTreeMap<(&'static str, Labels), f64>,
    hists: BTreeMap<(&'static str, Labels), Hist>,
}

fn registry() -> &'static Mutex<Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(Default::default)
}

fn labels(l: &[(&'static str, &str)]) -> Labels {
    l.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

fn defined(name: &str, kind: Kind) {
    debug_assert!(DEFINED.iter().any(|d| d.name == name && d.kind == kind), "undeclared metric {name}");
}

/// Adds `by` to a counter.
pub fn count(name: &'static str, l: &[(&'static str, &str)], by: f64) {
    defined(name, Counter);
    *registry().lock().expect("metrics lock").counters.entry((name, labels(l))).or_default() += by;
}

/// `value` as a label value of `name`, or `other` once `name` has `max` distinct
/// values: for labels that come from outside (alarm codes), so the series stay bounded.
pub fn bounded(name: &'static str, key: &'static str, value: &str, max: usize) -> String {
    let r = registry().lock().expect("metrics lock");
    let seen = r.counters.range((name, Vec::new())..).take_while(|((n, _), _)| *n == name);
    let mut distinct = 0;
    for ((_, l), _) in seen {
        if l.iter().any(|(k, v)| *k == key && v == value) {
            return value.to_string();
        }
        distinct += 1;
    }
    if distinct >= max { "other".into() } else { value.to_string() }
}

/// Records a duration in a histogram.
pub fn time(name: &'static str, l: &[(&'static str, &str)], d: Duration) {
    observe(name, l, d.as_secs_f64());
}

/// A histogram's observations so far, over all its label sets: (count, sum). For
/// benchmarks that report what happened inside the pipeline they drove.
pub fn totals(name: &'static str) -> (u64, f64) {
    let r = registry().lock().expect("metrics lock");
    let all = r.hists.range((name, Vec::new())..).take_while(|((n, _), _)| *n == name);
    all.fold((0, 0.0), |(count, sum), (_, h)| (count + h.count, sum + h.sum))
}

/// A counter's value, summed over its label sets. For benchmarks, like [`totals`].
pub fn counter(name: &'static str) -> f64 {
    let r = registry().lock().expect("metrics lock");
    r.counters.range((name, Vec::new())..).take_while(|((n, _), _)| *n == name).map(|(_, v)| v).sum()
}

/// Records a value in a histogram.
pub fn observe(name: &'static str, l: &[(&'static str, &str)], v: f64) {
    defined(name, Histogram);
    let buckets = if name.ends_with("_seconds") { BUCKETS } else { SIZE_BUCKETS };
    let mut r = registry().lock().expect("metrics lock");
    let h = r.hists.entry((name, labels(l))).or_default();
    if h.counts.is_empty() {
        h.counts = vec![0; buckets.len()];
    }
    for (i, b) in buckets.iter().enumerate() {
        if v <= *b {
            h.counts[i] += 1;
        }
    }
    h.sum += v;
    h.count += 1;
}

/// A gauge's samples, computed at scrape time by the caller.
pub struct Gauges(pub Vec<(&'static str, Labels, f64)>);

impl Gauges {
    pub fn set(&mut self, name: &'static str, l: &[(&'static str, &str)], v: f64) {
        defined(name, Gauge);
        self.0.push((name, labels(l), v));
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn series(out: &mut String, name: &str, l: &Labels, extra: Option<(&str, String)>, v: f64) {
    out.push_str(name);
    let mut all: Vec<String> = l.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
    if let Some((k, v)) = extra {
        all.push(format!("{k}=\"{v}\""));
    }
    if !all.is_empty() {
        let _ = write!(out, "{{{}}}", all.join(","));
    }
    let _ = writeln!(out, " {v}");
}

/// The Prometheus text exposition of every declared metric, with `gauges` computed now.
pub fn render(gauges: &Gauges) -> String {
    let r = registry().lock().expect("metrics lock");
    let mut out = String::new();
    for d in DEFINED {
        let kind = match d.kind {
            Counter => "counter",
            Gauge => "gauge",
            Histogram => "histogram",
        };
        let _ = writeln!(out, "# HELP {} {}\n# TYPE {} {kind}", d.name, d.help, d.name);
        match d.kind {
            Counter => {
                for ((_, l), v) in r.counters.range((d.name, Vec::new())..).take_while(|((n, _), _)| *n == d.name) {
                    series(&mut out, d.name, l, None, *v);
                }
            }
            Gauge => {
                for (_, l, v) in gauges.0.iter().filter(|(n, _, _)| *n == d.name) {
                    series(&mut out, d.name, l, None, *v);
                }
            }
            Histogram => {
                let buckets = if d.name.ends_with("_seconds") { BUCKETS } else { SIZE_BUCKETS };
                for ((_, l), h) in r.hists.range((d.name, Vec::new())..).take_while(|((n, _), _)| *n == d.name) {
                    let bucket = format!("{}_bucket", d.name);
                    for (b, c) in buckets.iter().zip(&h.counts) {
                        series(&mut out, &bucket, l, Some(("le", b.to_string())), *c as f64);
                    }
                    series(&mut out, &bucket, l, Some(("le", "+Inf".into())), h.count as f64);
                    series(&mut out, &format!("{}_sum", d.name), l, None, h.sum);
                    series(&mut out, &format!("{}_count", d.name), l, None, h.count as f64);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_format_with_labels_and_buckets() {
        count("twinops_guardrail_decisions_total", &[("kind", "allow_list")], 1.0);
        observe("twinops_ingest_batch_messages", &[], 7.0);
        let mut g = Gauges(Vec::new());
        g.set("twinops_triage_queue_depth", &[], 3.0);
        let text = render(&g);
        assert!(text.contains("# TYPE twinops_guardrail_decisions_total counter"));
        assert!(text.contains("twinops_guardrail_decisions_total{kind=\"allow_list\"} "));
        assert!(text.contains("twinops_ingest_batch_messages_bucket{le=\"10\"} "));
        assert!(text.contains("twinops_ingest_batch_messages_bucket{le=\"+Inf\"} "));
        assert!(text.contains("twinops_triage_queue_depth 3"));
        for d in DEFINED {
            assert!(d.name.starts_with("twinops_"));
            assert_eq!(
                d.kind == Counter,
                d.name.ends_with("_total"),
                "{}: counters and only counters end in _total",
                d.name
            );
        }
    }
}
