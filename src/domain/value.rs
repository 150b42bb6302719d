//! Measured values as shown to people and models.

/// A measured value as tools, notes and the HMI show it: four significant figures,
/// whole numbers kept whole (12,346, not 12,350). A transmitter is good to 0.1-1 % of
/// its span, so further digits are noise, and binary floats carry artefacts
/// (`2.0260000000000002`) that a note would quote. What is stored is not rounded.
pub fn shown(v: f64) -> f64 {
    if !v.is_finite() {
        return v;
    }
    if v.abs() >= 1000.0 {
        return v.round();
    }
    format!("{v:.3e}").parse().unwrap_or(v)
}

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn four_significant_figures_whole_numbers_whole() {
        let cases = [
            (2.0260000000000002, 2.026),
            (0.1 + 0.2, 0.3),
            (380.8435, 380.8),
            (-71.0336, -71.03),
            (0.000123456, 0.0001235),
            (12345.6, 12346.0),
            (999.96, 1000.0),
            (4.5, 4.5),
            (0.0, 0.0),
            (-0.0049, -0.0049),
        ];
        for (v, want) in cases {
            assert_eq!(shown(v), want, "{v}");
        }
        assert!(shown(f64::NAN).is_nan());
    }
}
