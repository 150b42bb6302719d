//! Synthetic 1-minute telemetry: a daily demand cycle, measurement noise, a slow
//! wander, and the developing faults the demo is about.

use super::spec::{Fault, SensorTemplate};
use crate::domain::SensorKind;
use crate::support::Rng;

/// What shapes one sensor's week of readings.
pub struct Signal<'a> {
    pub template: &'a SensorTemplate,
    pub kind: SensorKind,
    /// False for standby and stopped machines: no flow, no current, ambient temperatures.
    pub running: bool,
    /// The fault on this asset, or on the pump a motor drives.
    pub fault: Option<Fault>,
    /// Whether this is the motor of a faulty pump rather than the pump itself.
    pub via_motor: bool,
}

/// Demand relative to the daily mean, by hour of day (UTC): low at night, a morning
/// peak around 07:30, an evening peak around 19:00.
pub fn demand(hour: f64) -> f64 {
    let bump = |centre: f64, width: f64| {
        let mut d = (hour - centre).abs();
        if d > 12.0 {
            d = 24.0 - d;
        }
        (-0.5 * (d / width).powi(2)).exp()
    };
    0.93 + 0.25 * bump(7.5, 1.5) + 0.18 * bump(19.0, 2.0) - 0.3 * bump(3.0, 2.5)
}

/// Fault progress curve over the week: 0 at the start, 1 at the end, accelerating the
/// way bearing damage does.
fn progress(p: f64) -> f64 {
    ((3.0 * p).exp() - 1.0) / (3f64.exp() - 1.0)
}

impl Signal<'_> {
    /// Values for `n` consecutive minutes starting at `start_ts` (unix seconds).
    pub fn generate(&self, start_ts: i64, n: usize, rng: &mut Rng) -> Vec<f64> {
        let t = self.template;
        let mut wander = 0.0;
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let ts = start_ts + 60 * i as i64;
            let hour = (ts.rem_euclid(86_400)) as f64 / 3600.0;
            let p = i as f64 / n.max(1) as f64;
            // A slow AR(1) wander: real plants drift with ambient and raw-water conditions.
            wander = 0.995 * wander + 0.1 * rng.gauss();
            let noise = rng.gauss();
            let value = if self.running {
                let d = demand(hour);
                let base = t.nominal * (1.0 + t.demand * (d - 1.0));
                let v = base + t.noise * (noise + 0.3 * wander);
                self.with_fault(v, base, p, rng)
            } else {
                self.idle_value(noise)
            };
            out.push(round(value, t.noise));
        }
        out
    }

    fn idle_value(&self, noise: f64) -> f64 {
        match self.kind {
            SensorKind::Vibration => (0.15 + 0.02 * noise).max(0.0),
            SensorKind::BearingTemperature | SensorKind::WindingTemperature => 18.0 + 0.3 * noise,
            SensorKind::Flow | SensorKind::MotorCurrent => 0.0,
            SensorKind::DischargePressure => 4.6 + 0.02 * noise,
            _ => self.template.nominal + self.template.noise * noise,
        }
    }

    fn with_fault(&self, v: f64, base: f64, p: f64, rng: &mut Rng) -> f64 {
        let Some(fault) = self.fault else { return v };
        let t = self.template;
        match (fault, self.kind, self.via_motor) {
            (Fault::BearingWear, SensorKind::Vibration, false) => {
                // The drive end carries the bad bearing; the non-drive end sees some of it.
                let gain = if t.tag.ends_with("-DE") && !t.tag.ends_with("NDE") { 2.3 } else { 0.8 };
                let g = progress(p);
                let impact = if rng.uniform() < 0.02 * g { 1.2 * rng.uniform() } else { 0.0 };
                v * (1.0 + gain * g) + impact
            }
            (Fault::BearingWear, SensorKind::BearingTemperature, false) => v + 22.0 * progress(p),
            (Fault::BearingWear, SensorKind::MotorCurrent, true) => v * (1.0 + 0.03 * progress(p)),
            (Fault::Cavitation, kind, false) => {
                let c = 0.3 + 0.7 * p;
                match kind {
                    SensorKind::SuctionPressure => {
                        // Starved suction: the mean sags and high demand pulls it lower.
                        let sag = base * (1.0 - 0.5 * c) - 0.25 * c * (demand_from(base, t) - 1.0);
                        sag + t.noise * (1.0 + 4.0 * c) * rng.gauss()
                    }
                    SensorKind::DischargePressure => {
                        let collapse = if rng.uniform() < 0.04 * c { -0.6 * rng.uniform() } else { 0.0 };
                        v + t.noise * 8.0 * c * rng.gauss() + collapse
                    }
                    SensorKind::Flow => v * (1.0 - 0.08 * c) + t.noise * 6.0 * c * rng.gauss(),
                    SensorKind::Vibration => v + 0.9 * c + t.noise * 5.0 * c * rng.gauss().abs(),
                    _ => v,
                }
            }
            _ => v,
        }
    }
}

/// Recovers the demand factor from a value computed as nominal * (1 + k (d - 1)).
fn demand_from(base: f64, t: &SensorTemplate) -> f64 {
    if t.demand == 0.0 || t.nominal == 0.0 {
        return 1.0;
    }
    1.0 + (base / t.nominal - 1.0) / t.demand
}

/// Rounds to a resolution a transmitter would report: a tenth of the noise level.
fn round(v: f64, noise: f64) -> f64 {
    let step = if noise >= 1.0 {
        0.1
    } else if noise >= 0.1 {
        0.01
    } else {
        0.001
    };
    (v / step).round() * step
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demand_peaks_in_the_morning_and_dips_at_night() {
        assert!(demand(7.5) > demand(12.0));
        assert!(demand(19.0) > demand(12.0));
        assert!(demand(3.0) < demand(12.0));
        assert!((demand(23.99) - demand(0.0)).abs() < 0.01, "the cycle wraps at midnight");
    }
}
