//! Limit alarming as a SCADA system does it: a reading beyond a set point for
//! `on_delay` consecutive samples raises; coming back past the deadband clears.

use super::spec::Limits;

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

/// Scans a series for alarm transitions of one set point.
pub fn scan(values: &[f64], level: Level, set_point: f64, deadband: f64, on_delay: usize) -> Vec<Transition> {
    let mut out = Vec::new();
    let mut active = false;
    let mut beyond_for = 0;
    for (index, &value) in values.iter().enumerate() {
        let beyond = if level.is_high() { value > set_point } else { value < set_point };
        if !active {
            beyond_for = if beyond { beyond_for + 1 } else { 0 };
            if beyond_for >= on_delay.max(1) {
                active = true;
                out.push(Transition { level, set_point, raised: true, index, value });
            }
        } else {
            let back = if level.is_high() { value < set_point - deadband } else { value > set_point + deadband };
            if back {
                active = false;
                beyond_for = 0;
                out.push(Transition { level, set_point, raised: false, index, value });
            }
        }
    }
    out
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
