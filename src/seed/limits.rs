//! Limit alarming as a SCADA system does it: a reading beyond a set point for
//! `on_delay` consecutive samples raises; coming back past the deadband clears.

use super::spec::Limits;
use crate::domain::{Criticality, Severity};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    LowLow,
    Low,
    High,
    HighHigh,
}

impl Level {
    /// The suffix of the alarm code: `VIB` + `-HI`.
    pub fn suffix(self) -> &'static str {
        match self {
            Level::LowLow => "LOLO",
            Level::Low => "LO",
            Level::High => "HI",
            Level::HighHigh => "HIHI",
        }
    }

    pub fn is_high(self) -> bool {
        matches!(self, Level::High | Level::HighHigh)
    }

    /// The second-level limits (LL, HH) are the urgent ones.
    pub fn is_outer(self) -> bool {
        matches!(self, Level::LowLow | Level::HighHigh)
    }

    pub fn word(self) -> &'static str {
        match self {
            Level::LowLow => "low-low",
            Level::Low => "low",
            Level::High => "high",
            Level::HighHigh => "high-high",
        }
    }
}

/// The set points a sensor has, each with its level.
pub fn set_points(limits: &Limits) -> Vec<(Level, f64)> {
    [(Level::LowLow, limits.ll), (Level::Low, limits.l), (Level::High, limits.h), (Level::HighHigh, limits.hh)]
        .into_iter()
        .filter_map(|(level, sp)| sp.map(|sp| (level, sp)))
        .collect()
}

/// One change of an alarm point: raised or returned to normal at sample `index`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Transition {
    pub level: Level,
    pub set_point: f64,
    pub raised: bool,
    pub index: usize,
    pub value: f64,
}

/// One alarm point of a sensor as samples arrive: raises after `on_delay` samples
/// beyond the set point, clears when the value comes back past the deadband.
#[derive(Debug, Clone, Copy)]
pub struct Point {
    pub level: Level,
    pub set_point: f64,
    deadband: f64,
    on_delay: usize,
    active: bool,
    beyond_for: usize,
}

impl Point {
    pub fn new(level: Level, set_point: f64, deadband: f64, on_delay: usize) -> Point {
        Point { level, set_point, deadband, on_delay: on_delay.max(1), active: false, beyond_for: 0 }
    }

    pub fn active(&self) -> bool {
        self.active
    }

    /// Feeds one sample: `Some(true)` when the alarm raises, `Some(false)` when it clears.
    pub fn sample(&mut self, value: f64) -> Option<bool> {
        let high = self.level.is_high();
        if !self.active {
            let beyond = if high { value > self.set_point } else { value < self.set_point };
            self.beyond_for = if beyond { self.beyond_for + 1 } else { 0 };
            self.active = self.beyond_for >= self.on_delay;
            return self.active.then_some(true);
        }
        let back = if high { value < self.set_point - self.deadband } else { value > self.set_point + self.deadband };
        if back {
            self.active = false;
            self.beyond_for = 0;
        }
        back.then_some(false)
    }
}

/// Scans a series for alarm transitions of one set point.
pub fn scan(values: &[f64], level: Level, set_point: f64, deadband: f64, on_delay: usize) -> Vec<Transition> {
    let mut point = Point::new(level, set_point, deadband, on_delay);
    values
        .iter()
        .enumerate()
        .filter_map(|(index, &value)| {
            point.sample(value).map(|raised| Transition { level, set_point, raised, index, value })
        })
        .collect()
}

/// The alarm code of a point: `VIB` + high -> `VIB-HI`.
pub fn code(prefix: &str, level: Level) -> String {
    format!("{prefix}-{}", level.suffix())
}

/// Outer limits (LL, HH) are high priority, critical on criticality-A equipment; inner
/// limits are medium.
pub fn severity(level: Level, criticality: Criticality) -> Severity {
    match (level.is_outer(), criticality) {
        (true, Criticality::A) => Severity::Critical,
        (true, _) => Severity::High,
        (false, _) => Severity::Medium,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raises_after_the_on_delay_and_clears_past_the_deadband() {
        let values = [4.0, 4.6, 4.4, 4.6, 4.7, 4.4, 4.3, 4.1];
        let t = scan(&values, Level::High, 4.5, 0.3, 2);
        assert_eq!(t.len(), 2, "{t:?}");
        assert!(t[0].raised && t[0].index == 4, "one sample beyond the set point is not enough");
        assert!(!t[1].raised && t[1].index == 7, "4.4 and 4.3 are inside the deadband");
    }

    #[test]
    fn low_limits_mirror_high_ones() {
        let t = scan(&[1.0, 0.4, 0.4, 0.52, 0.6], Level::Low, 0.5, 0.05, 2);
        assert_eq!(t.iter().map(|t| (t.raised, t.index)).collect::<Vec<_>>(), [(true, 2), (false, 4)]);
    }
}
