//! The plant simulator: telemetry from the seed plant's signal models and the alarm
//! events a SCADA system would send when those readings cross their limits, published
//! over MQTT at QoS 1, for demos, tests and benchmarks.
//!
//! Each sensor replays the last hours of the seeded week (so the developing faults
//! show), and disturbances drive a sensor past one of its set points for a few samples;
//! alarms raise and clear from the readings alone, by set point and deadband.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use crate::domain::Timestamp;
use crate::publish::Publisher;
use crate::seed::{self, PlantSpec, Point, SensorPlan};
use crate::sparkplug::edge::{EdgeNode, MetricSpec};
use crate::support::Rng;

#[derive(Debug, Clone, clap::Args)]
pub struct SimOptions {
    /// Broker to publish to.
    #[arg(long, default_value = "mqtt://127.0.0.1:1883")]
    pub broker: String,
    /// Topic for alarm events.
    #[arg(long, default_value = "scada/alarms")]
    pub topic: String,
    /// Topic for telemetry (one batch of readings per sample).
    #[arg(long, default_value = "scada/telemetry")]
    pub telemetry_topic: String,
    /// Folder holding plant.toml (the plant the daemon was seeded with).
    #[arg(long = "from", default_value = "seed")]
    pub seed_dir: PathBuf,
    /// Alarm events to publish; 0 = until stopped.
    #[arg(long, default_value_t = 100)]
    pub count: usize,
    /// Alarm events per second, on average; 0 = as fast as the broker takes them
    /// (alarm events only, no telemetry).
    #[arg(long, default_value_t = 0.5)]
    pub rate: f64,
    /// Seconds between telemetry samples when --rate is above 0.
    #[arg(long, default_value_t = 5.0)]
    pub interval: f64,
    /// Percentage of alarm events sent twice (redelivery as SCADA gateways do).
    #[arg(long, default_value_t = 0.0)]
    pub duplicates: f64,
    /// Percentage of alarm events preceded by a malformed message (a torn copy of the event).
    #[arg(long, default_value_t = 0.0)]
    pub malformed: f64,
    /// An alarm flood: many sensors driven past their limits at once and held there.
    #[arg(long)]
    pub flood: bool,
    /// A prefix for event ids, so separate runs do not collide.
    #[arg(long, default_value = "sim")]
    pub run: String,
    /// Publish telemetry as a Sparkplug B edge node (`sim`) of this group (default
    /// `demo`), one device per asset and one metric per tag, instead of JSON; births
    /// on connect and when asked, the NDEATH as the will. Alarm events stay JSON.
    #[arg(long, num_args = 0..=1, default_missing_value = "demo", value_name = "GROUP")]
    pub sparkplug: Option<String>,
}

/// The demo's alarm events per second: about one developing fault (a raise and its
/// clear, 2.3 events on average) every 15 minutes, so `serve --demo` is a calm plant, as
/// a well-run one is (EEMUA 191: well under one alarm per 10 minutes per operator). A
/// flood is `simulate --flood`.
pub const DEMO_RATE: f64 = 2.3 / 900.0;

impl SimOptions {
    /// What `serve --demo` publishes, until stopped: telemetry every 5 s, a fault at
    /// once (so a triaged alarm shows within the first minute), then one about every 15
    /// minutes. With `sparkplug`, the telemetry comes as that group's edge node.
    pub fn demo(broker: &str, seed_dir: &std::path::Path, sparkplug: Option<String>) -> SimOptions {
        SimOptions {
            broker: broker.to_string(),
            topic: "scada/alarms".into(),
            telemetry_topic: "scada/telemetry".into(),
            seed_dir: seed_dir.to_path_buf(),
            count: 0,
            rate: DEMO_RATE,
            interval: 5.0,
            duplicates: 5.0,
            malformed: 0.0,
            flood: false,
            run: format!("demo-{}", Timestamp::now().unix()),
            sparkplug,
        }
    }

    /// `count` alarm events as fast as the broker takes them, on `{run}/scada/alarms`,
    /// with no telemetry: what the tests and benchmarks publish.
    pub fn burst(broker: &str, run: &str, count: usize) -> SimOptions {
        SimOptions {
            broker: broker.to_string(),
            topic: format!("{run}/scada/alarms"),
            telemetry_topic: format!("{run}/scada/telemetry"),
            seed_dir: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("seed"),
            count,
            rate: 0.0,
            interval: 5.0,
            duplicates: 0.0,
            malformed: 0.0,
            flood: false,
            run: run.to_string(),
            sparkplug: None,
        }
    }
}

/// What a simulation sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimReport {
    /// MQTT messages published (and acknowledged by the broker).
    pub published: usize,
    /// Distinct alarm events (each `event_id` once).
    pub events: usize,
    /// Of those, raises (new occurrences unless the point was already active).
    pub raises: usize,
    /// Alarm events sent a second time.
    pub duplicates: usize,
    /// Malformed messages.
    pub malformed: usize,
    /// Telemetry messages (a batch of readings each).
    pub telemetry: usize,
}

struct SimSensor<'a> {
    plan: SensorPlan<'a>,
    /// The last hours of the seeded week, replayed in a loop.
    replay: Vec<f64>,
    points: Vec<Point>,
    /// A value forced by a disturbance, and for how many more samples.
    disturbance: Option<(f64, u32)>,
}

/// Samples the plant and derives the alarm events, one step at a time.
pub struct Generator<'a> {
    sensors: Vec<SimSensor<'a>>,
    rng: Rng,
    tick: usize,
    /// Set for a live run: the replay runs at the plant's own pace, a seeded minute per
    /// minute from this time (interpolated between minutes), not a minute per sample.
    real_time_from: Option<Timestamp>,
    seq: usize,
    run: String,
}

/// A live run's alarm on-delay, in samples (30 s at the demo's 5 s).
const LIVE_ON_DELAY: usize = 6;

/// Samples replayed per sensor: the last 6 hours of the seeded week.
const REPLAY: usize = 360;

impl<'a> Generator<'a> {
    pub fn new(spec: &'a PlantSpec, run: &str, now: Timestamp) -> Generator<'a> {
        let week = 7 * 24 * 60;
        let start = now.floor_minute().unix() - 60 * (week as i64 - 1);
        let sensors = seed::sensor_plans(spec, 0)
            .into_iter()
            .map(|plan| {
                let mut rng = Rng::from_label(&format!("{}/0", plan.sensor_id));
                let replay = plan.signal.generate(start, week, &mut rng).split_off(week - REPLAY);
                let t = plan.signal.template;
                let points = match plan.alarm_prefix() {
                    Some(_) => seed::set_points(&t.limits.as_array())
                        .into_iter()
                        .map(|(l, sp)| Point::new(l, sp, t.deadband, 1))
                        .collect(),
                    None => Vec::new(),
                };
                SimSensor { plan, replay, points, disturbance: None }
            })
            .collect();
        Generator { sensors, rng: Rng::from_label(run), tick: 0, real_time_from: None, seq: 0, run: run.to_string() }
    }

    /// Replays the seeded hours at their own pace from `start` on: a live plant's
    /// faults develop over minutes and hours, not twelve times faster.
    /// Its alarm points then wait out [`LIVE_ON_DELAY`] samples, as a tuned SCADA's do,
    /// so that noise at a limit does not chatter.
    pub fn in_real_time(mut self, start: Timestamp) -> Self {
        self.real_time_from = Some(start);
        for s in &mut self.sensors {
            s.points = s.points.iter().map(|p| p.with_on_delay(LIVE_ON_DELAY)).collect();
        }
        self
    }

    /// Drives one undisturbed alarming sensor past one of its set points for `ticks`
    /// samples (an outer limit also crosses the inner one, as on a real plant).
    pub fn disturb(&mut self, ticks: u32) {
        let free: Vec<usize> = (0..self.sensors.len())
            .filter(|&i| !self.sensors[i].points.is_empty() && self.sensors[i].disturbance.is_none())
            .collect();
        if free.is_empty() {
            return;
        }
        let s = &mut self.sensors[free[self.rng.below(free.len() as u64) as usize]];
        let p = s.points[self.rng.below(s.points.len() as u64) as usize];
        let margin = (0.04 * p.set_point.abs()).max(2.0 * s.plan.signal.template.deadband) * (1.0 + self.rng.uniform());
        let value = if p.level.is_high() { p.set_point + margin } else { p.set_point - margin };
        s.disturbance = Some((round3(value), ticks.max(1)));
    }

    /// One sample of every sensor at `now`: the readings, and the alarm events their
    /// limit crossings imply.
    pub fn step(&mut self, now: Timestamp) -> (Vec<Value>, Vec<Value>) {
        let (mut readings, mut events) = (Vec::new(), Vec::new());
        let time = now.to_rfc3339();
        for s in &mut self.sensors {
            let value = match &mut s.disturbance {
                Some((v, left)) => {
                    let v = *v;
                    *left -= 1;
                    if *left == 0 {
                        s.disturbance = None;
                    }
                    v
                }
                None => round3(match self.real_time_from {
                    Some(start) => {
                        let minutes = (now.unix() - start.unix()).max(0) as f64 / 60.0;
                        let (i, frac) = (minutes.floor() as usize, minutes.fract());
                        let (a, b) = (s.replay[i % REPLAY], s.replay[(i + 1) % REPLAY]);
                        a + (b - a) * frac
                    }
                    None => s.replay[self.tick % REPLAY],
                }),
            };
            readings.push(json!({"type": "reading", "sensor_id": s.plan.sensor_id, "time": time, "value": value}));
            let Some(prefix) = s.plan.alarm_prefix() else { continue };
            for p in &mut s.points {
                let Some(raised) = p.sample(value) else { continue };
                let unit = &s.plan.signal.template.unit;
                let message = if raised {
                    s.plan.alarm_message(p.level, value, p.set_point)
                } else {
                    format!("{}: returned to normal at {value:.2} {unit}", s.plan.asset_name)
                };
                events.push(json!({
                    "type": "alarm", "event_id": format!("{}-{}", self.run, self.seq),
                    "asset_id": s.plan.asset_id, "sensor_id": s.plan.sensor_id,
                    "code": seed::alarm_code(prefix, p.level),
                    "severity": seed::alarm_severity(p.level, s.plan.criticality),
                    "state": if raised { "raised" } else { "cleared" },
                    "value": value, "threshold": p.set_point, "time": time, "message": message,
                }));
                self.seq += 1;
            }
        }
        self.tick += 1;
        (readings, events)
    }

    /// Each sensor's asset, tag (its id after the asset's), unit and limits, in the
    /// order `step` samples them.
    pub fn sensors(&self) -> impl Iterator<Item = (&str, &str, &str, [Option<f64>; 4])> {
        self.sensors.iter().map(|s| {
            let (asset, id) = (s.plan.asset_id.as_str(), s.plan.sensor_id.as_str());
            let tag = id.strip_prefix(asset).and_then(|t| t.strip_prefix('.')).unwrap_or(id);
            let t = s.plan.signal.template;
            (asset, tag, t.unit.as_str(), t.limits.as_array())
        })
    }

    /// Alarm points currently active.
    pub fn active(&self) -> usize {
        self.sensors.iter().flat_map(|s| &s.points).filter(|p| p.active()).count()
    }
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// When disturbances start, and for how many samples each holds.
struct Faults {
    rng: Rng,
    /// Disturbances per tick, on average.
    per_tick: f64,
    flood: bool,
    live: bool,
}

impl Faults {
    fn new(opts: &SimOptions) -> Faults {
        let live = opts.rate > 0.0;
        // A disturbance yields about two events (raise, clear), more when it crosses an outer limit.
        let per_tick = if live { opts.rate * opts.interval / 2.3 } else { 1.0 };
        Faults { rng: Rng::from_label(&format!("{}/faults", opts.run)), per_tick, flood: opts.flood, live }
    }

    /// The disturbances starting at `tick`, each as its length in samples. A live run
    /// starts one at once.
    fn starting(&mut self, tick: usize) -> Vec<u32> {
        let starts = if self.flood {
            4
        } else {
            let whole = self.per_tick.floor();
            whole as usize
                + usize::from(self.rng.uniform() < self.per_tick - whole)
                + usize::from(tick == 0 && self.live)
        };
        // A live fault holds for 1 to 3 minutes, past the on-delay; a burst's for a few samples.
        let samples = |rng: &mut Rng| match (self.flood, self.live) {
            (true, _) => 20 + rng.below(40),
            (false, true) => 12 + rng.below(24),
            (false, false) => 2 + rng.below(4),
        };
        (0..starts).map(|_| samples(&mut self.rng) as u32).collect()
    }
}

/// Runs the simulation until `count` alarm events are published (or forever when 0),
/// and waits until the broker has acknowledged every message.
pub async fn simulate(opts: &SimOptions) -> anyhow::Result<SimReport> {
    let spec = seed::load_spec(&opts.seed_dir)?;
    let mut sim = Generator::new(&spec, &opts.run, Timestamp::now());
    if opts.rate > 0.0 {
        sim = sim.in_real_time(Timestamp::now());
    }
    let mut edge = opts.sparkplug.as_deref().map(|group| EdgeSim::new(group, &sim));
    let will = edge.as_ref().map(|e| e.edge.node_death());
    let ncmd = edge.as_ref().map(|e| format!("spBv1.0/{}/NCMD/{}", e.edge.group, e.edge.node));
    let mut publisher =
        Publisher::connect_as_edge(&opts.broker, &format!("twinops-sim-{}", opts.run), will, ncmd.as_deref())?;
    let mut faults = Faults::new(opts);
    let mut rng = Rng::from_label(&format!("{}/wire", opts.run));
    let mut report = SimReport::default();
    let live = opts.rate > 0.0;
    let mut tick = 0usize;
    while opts.count == 0 || report.events < opts.count {
        for samples in faults.starting(tick) {
            sim.disturb(samples);
        }
        let now = Timestamp::now();
        let (readings, events) = sim.step(now);
        match &mut edge {
            Some(edge) if live => {
                if tick == 0 || publisher.rebirth_asked() {
                    for (topic, payload) in edge.births(&readings) {
                        publisher.publish(&topic, payload).await?;
                    }
                }
                for (topic, payload) in edge.data(&readings, now) {
                    publisher.publish(&topic, payload).await?;
                    report.telemetry += 1;
                }
            }
            None if live => {
                publisher.publish(&opts.telemetry_topic, json!({"events": readings}).to_string().into_bytes()).await?;
                report.telemetry += 1;
            }
            _ => {}
        }
        for e in events.into_iter().take(if opts.count == 0 { usize::MAX } else { opts.count - report.events }) {
            let body = e.to_string().into_bytes();
            if rng.uniform() * 100.0 < opts.malformed {
                // A torn copy of the event that follows, as a gateway cut off mid-write sends.
                publisher.publish(&opts.topic, body[..body.len() / 2].to_vec()).await?;
                report.malformed += 1;
            }
            report.raises += usize::from(e["state"] == "raised");
            publisher.publish(&opts.topic, body.clone()).await?;
            report.events += 1;
            if rng.uniform() * 100.0 < opts.duplicates {
                publisher.publish(&opts.topic, body).await?;
                report.duplicates += 1;
            }
        }
        tick += 1;
        if live {
            tokio::time::sleep(Duration::from_secs_f64(opts.interval.max(1.0))).await;
        }
    }
    report.published = publisher.sent();
    publisher.finish().await?;
    Ok(report)
}

/// The demo plant as a Sparkplug B edge node `sim`: one device per asset, one metric
/// per tag, aliases in sampling order.
struct EdgeSim {
    edge: EdgeNode,
    /// Each sampled sensor's device (asset) and its metric spec.
    metrics: Vec<(String, MetricSpec)>,
}

impl EdgeSim {
    fn new(group: &str, sim: &Generator) -> EdgeSim {
        let bd_seq = Timestamp::now().unix() as u64 % 256;
        let metrics = sim
            .sensors()
            .enumerate()
            .map(|(i, (asset, tag, unit, limits))| {
                let spec =
                    MetricSpec { name: tag.to_string(), alias: i as u64, value: 0.0, unit: unit.to_string(), limits };
                (asset.to_string(), spec)
            })
            .collect();
        EdgeSim { edge: EdgeNode::new(group, "sim", bd_seq), metrics }
    }

    /// The NBIRTH and a DBIRTH per device, carrying the values of this sample.
    fn births(&mut self, readings: &[Value]) -> Vec<(String, Vec<u8>)> {
        let at = Timestamp::now().unix() as u64 * 1000;
        let mut out = vec![self.edge.node_birth(at)];
        let mut devices: Vec<&str> = self.metrics.iter().map(|(d, _)| d.as_str()).collect();
        devices.dedup();
        for device in devices {
            let specs: Vec<MetricSpec> = (self.metrics.iter().enumerate())
                .filter(|(_, (d, _))| d == device)
                .map(|(i, (_, m))| MetricSpec { value: readings[i]["value"].as_f64().unwrap_or(0.0), ..m.clone() })
                .collect();
            out.push(self.edge.device_birth(device, &specs, at));
        }
        out
    }

    /// A DDATA per device with this sample's values, by alias.
    fn data(&mut self, readings: &[Value], now: Timestamp) -> Vec<(String, Vec<u8>)> {
        let ms = now.unix() as u64 * 1000;
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.metrics.len() {
            let device = self.metrics[i].0.clone();
            let mut values = Vec::new();
            while i < self.metrics.len() && self.metrics[i].0 == device {
                values.push((self.metrics[i].1.alias, readings[i]["value"].as_f64().unwrap_or(0.0), ms));
                i += 1;
            }
            out.push(self.edge.device_data(&device, &values, ms));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `serve --demo` over 30 minutes, sample by sample as it runs, for 20 runs (each
    /// run's faults are its own): a fault raises an alarm within the first minute, no 10
    /// minutes hold more than 6 raises (the flood banner needs over 10; the busiest
    /// minutes are the start, when the replayed plant's standing alarms come up with the
    /// first fault, and a fault past an outer limit raises two), and the runs average
    /// under 10 raises per half hour. Before, the demo raised 57 in its first 10 minutes.
    #[test]
    fn the_demo_plant_is_calm_with_a_fault_at_once() {
        let spec = spec();
        let (mut all, mut worst) = (0, 0);
        for run in 0..20 {
            let opts = SimOptions {
                run: format!("demo-{run}"),
                ..SimOptions::demo("mqtt://unused", std::path::Path::new("seed"), None)
            };
            let (raised, busiest) = demo_half_hour(&spec, &opts);
            all += raised;
            worst = worst.max(busiest);
        }
        assert!(worst <= 6, "raises in the busiest 10 minutes of 20 runs: {worst}");
        assert!(all < 20 * 10, "raises in 20 half hours: {all}");
    }

    /// Raises in 30 minutes of `opts` as `serve --demo` runs them, and in its busiest 10.
    fn demo_half_hour(spec: &PlantSpec, opts: &SimOptions) -> (usize, usize) {
        let t0 = Timestamp::from_unix(1_796_040_000);
        let mut sim = Generator::new(spec, &opts.run, t0).in_real_time(t0);
        let mut faults = Faults::new(opts);
        let mut raised_at = Vec::new();
        let ticks = (30 * 60) / opts.interval as usize;
        for tick in 0..ticks {
            for samples in faults.starting(tick) {
                sim.disturb(samples);
            }
            let now = t0.plus_secs(tick as i64 * opts.interval as i64);
            let (_, events) = sim.step(now);
            raised_at.extend(events.iter().filter(|e| e["state"] == "raised").map(|_| now.unix() - t0.unix()));
        }
        assert!(raised_at.first().is_some_and(|&s| s < 60), "{}: a raise in the first minute: {raised_at:?}", opts.run);
        let in_ten = |from: i64| raised_at.iter().filter(|&&s| s >= from && s < from + 600).count();
        let busiest = (0..30 * 60 - 600).step_by(5).map(in_ten).max().unwrap_or(0);
        (raised_at.len(), busiest)
    }

    fn spec() -> PlantSpec {
        seed::load_spec(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("seed")).unwrap()
    }

    /// Alarms come from the readings: every raise carries a value past its threshold
    /// in the direction of its code, every clear follows a raise of the same point.
    #[test]
    fn alarms_follow_the_readings_across_limits() {
        let spec = spec();
        let mut g = Generator::new(&spec, "t", Timestamp::from_unix(1_800_000_000));
        let mut open = std::collections::HashSet::new();
        let (mut raises, mut clears) = (0, 0);
        for i in 0..300 {
            g.disturb(3);
            let (readings, events) = g.step(Timestamp::from_unix(1_800_000_000 + i));
            assert_eq!(readings.len(), 60, "every sensor sampled");
            for e in events {
                let reading = readings.iter().find(|r| r["sensor_id"] == e["sensor_id"]).unwrap();
                assert_eq!(reading["value"], e["value"], "the event carries the reading");
                let (v, sp) = (e["value"].as_f64().unwrap(), e["threshold"].as_f64().unwrap());
                let code = e["code"].as_str().unwrap();
                let high = code.ends_with("HI") || code.ends_with("HIHI");
                let point = (e["sensor_id"].to_string(), code.to_string());
                if e["state"] == "raised" {
                    assert!(if high { v > sp } else { v < sp }, "{e}");
                    assert!(open.insert(point), "raised twice without a clear: {e}");
                    raises += 1;
                } else {
                    assert!(open.remove(&point), "a clear without its raise: {e}");
                    clears += 1;
                }
            }
        }
        assert!(raises > 100 && clears > 100, "{raises} raises, {clears} clears");
        assert_eq!(g.active(), open.len());
    }
}
