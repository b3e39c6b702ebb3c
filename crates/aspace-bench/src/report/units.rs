//! Numbers with units for people: throughputs (`12k ops/s`), latencies (`140 ns`, `21 µs`) and
//! ratios (`27x`, `0.47x`), used by plot tick labels, the page and the headline.
//!
//! Every value is shown with three significant digits at most and trailing zeros dropped, so a
//! tick at 12,000 ops/s reads `12k ops/s`, not `0.01` (the old Mops/s axis) or `12.0k`.
//!
//! Not for: machine-readable output (CSV and JSON keep full precision).

/// `v` with at most three significant digits and no trailing zeros: `12`, `1.5`, `0.012`.
pub fn sig3(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    let s = if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        // Three significant digits below one: 0.0123 -> 0.0123.
        let decimals = (2.0 - a.log10().floor()) as usize;
        format!("{v:.decimals$}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A count with a k/M/G suffix: `12k`, `3.95M`, `1.2G`, `840`.
pub fn si(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{}G", sig3(v / 1e9))
    } else if a >= 1e6 {
        format!("{}M", sig3(v / 1e6))
    } else if a >= 1e3 {
        format!("{}k", sig3(v / 1e3))
    } else {
        sig3(v)
    }
}

/// A throughput: `12k ops/s`.
pub fn rate(ops_per_sec: f64) -> String {
    format!("{} ops/s", si(ops_per_sec))
}

/// A duration in nanoseconds: `140 ns`, `21 µs`, `1.2 ms`, `3 s`.
pub fn latency(ns: f64) -> String {
    let a = ns.abs();
    if a >= 1e9 {
        format!("{} s", sig3(ns / 1e9))
    } else if a >= 1e6 {
        format!("{} ms", sig3(ns / 1e6))
    } else if a >= 1e3 {
        format!("{} µs", sig3(ns / 1e3))
    } else {
        format!("{} ns", sig3(ns))
    }
}

/// A ratio: `27x`, `2.61x`, `0.47x` (whole numbers from 10 on, two decimals from 1, two
/// significant digits below 1).
pub fn ratio(r: f64) -> String {
    let a = r.abs();
    let s = if a >= 10.0 {
        format!("{r:.0}")
    } else if a >= 1.0 {
        format!("{r:.2}")
    } else if a > 0.0 {
        // Two significant digits below one: 0.916 -> 0.92.
        let decimals = (1.0 - a.log10().floor()) as usize;
        format!("{r:.decimals$}")
    } else {
        format!("{r}")
    };
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    format!("{s}x")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels_have_units_and_no_trailing_zeros() {
        // 0.012 Mops/s: the old axis read "0.01".
        assert_eq!(rate(0.012e6), "12k ops/s");
        assert_eq!(rate(1.5e6), "1.5M ops/s");
        assert_eq!(rate(2e9), "2G ops/s");
        assert_eq!(rate(840.0), "840 ops/s");
        assert_eq!(rate(1267.6), "1.27k ops/s");
        assert_eq!(rate(0.5), "0.5 ops/s");
    }

    #[test]
    fn latencies_pick_the_unit_that_keeps_the_number_short() {
        assert_eq!(latency(140.0), "140 ns");
        assert_eq!(latency(21_000.0), "21 µs");
        assert_eq!(latency(1_234_567.0), "1.23 ms");
        assert_eq!(latency(3e9), "3 s");
        assert_eq!(latency(1.9), "1.9 ns");
    }

    #[test]
    fn ratios_keep_two_significant_digits() {
        assert_eq!(ratio(27.1), "27x");
        assert_eq!(ratio(1.74), "1.74x");
        assert_eq!(ratio(2.0), "2x");
        assert_eq!(ratio(0.47), "0.47x");
        assert_eq!(ratio(0.916), "0.92x");
        assert_eq!(ratio(0.0123), "0.012x");
    }

    #[test]
    fn sig3_rounds_to_three_digits() {
        assert_eq!(sig3(123.456), "123");
        assert_eq!(sig3(12.345), "12.3");
        assert_eq!(sig3(1.2345), "1.23");
        assert_eq!(sig3(0.012345), "0.0123");
        assert_eq!(sig3(0.0), "0");
    }
}
