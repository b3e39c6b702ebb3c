//! The axes of the plots: logarithmic value axes with tick marks at round numbers, and the
//! thread axis in log2 with a tick at every measured thread count.
//!
//! Plots draw in log space (log10 of the value, log2 of the threads) on plotters' linear axes and
//! bind their own key points, instead of plotters' `log_scale()`, whose ticks sit only at powers
//! of ten and so leave a range such as 1.2k-1.9k with no tick at all. [`log_ticks`] picks the
//! coarsest of three tick ladders (1, 10, 100...; 1, 2, 5, 10...; 1, 1.5, 2, 3, 5, 7, 10...)
//! that puts at least four ticks on the range (or the finest), and widens the range to the ticks around it, so
//! every plot has labelled round numbers at both ends.
//!
//! Not for: linear axes (nothing here plots one).

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use std::ops::Range;

/// A linear axis over `range` whose ticks are exactly `keys` (plotters' own `with_key_points`
/// loses the label formatter on `f64` axes).
#[derive(Clone, Debug)]
pub struct KeyedAxis {
    range: Range<f64>,
    keys: Vec<f64>,
}

impl KeyedAxis {
    /// An axis over `range` with ticks at `keys`.
    pub fn new(range: Range<f64>, keys: Vec<f64>) -> KeyedAxis {
        KeyedAxis { range, keys }
    }
}

impl Ranged for KeyedAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = self.range.end - self.range.start;
        let t = if span > 0.0 {
            (value - self.range.start) / span
        } else {
            0.5
        };
        limit.0 + (f64::from(limit.1 - limit.0) * t).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // Bold ticks only: no light mesh lines between them.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.keys.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.range.clone()
    }
}

/// Mantissa ladders, coarsest first.
const LADDERS: [&[f64]; 3] = [&[1.0], &[1.0, 2.0, 5.0], &[1.0, 1.5, 2.0, 3.0, 5.0, 7.0]];

/// Ticks of a log axis over the positive values `lo..=hi`: (axis start, axis end, ticks), all
/// values (not logarithms), the ends being ticks. `None` when the range has no positive,
/// finite values.
pub fn log_ticks(lo: f64, hi: f64) -> Option<(f64, f64, Vec<f64>)> {
    if !(lo.is_finite() && hi.is_finite() && lo > 0.0 && hi >= lo) {
        return None;
    }
    // A (nearly) single value: look at the 20% around it, so the axis has a span.
    let (lo, hi) = if hi < lo * 1.2 {
        (lo / 1.2, hi * 1.2)
    } else {
        (lo, hi)
    };
    let mut best = None;
    for ladder in LADDERS {
        let ticks = ladder_ticks(ladder, lo, hi);
        let enough = ticks.len() >= 4;
        best = Some(ticks);
        if enough {
            break;
        }
    }
    let mut ticks = best?;
    // Many decades: keep every other one (the ends stay).
    while ticks.len() > 10 {
        let last = *ticks.last()?;
        ticks = ticks.iter().copied().step_by(2).collect();
        if ticks.last() != Some(&last) {
            ticks.push(last);
        }
    }
    Some((*ticks.first()?, *ticks.last()?, ticks))
}

/// The ticks of `ladder` from the largest one <= `lo` to the smallest one >= `hi`.
fn ladder_ticks(ladder: &[f64], lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut exp = lo.log10().floor() as i32 - 1;
    loop {
        let decade = 10f64.powi(exp);
        for &m in ladder {
            // Round to kill representation noise (1.5 * 1e-3 = 0.0015000000000000000003).
            let t = round_sig(m * decade);
            if t <= lo * (1.0 + 1e-12) {
                out.clear();
            }
            out.push(t);
            if t >= hi * (1.0 - 1e-12) {
                return out;
            }
        }
        exp += 1;
    }
}

fn round_sig(v: f64) -> f64 {
    let e = v.log10().floor() as i32;
    let scale = 10f64.powi(6 - e);
    (v * scale).round() / scale
}

/// The key points of the thread axis (log2 of each thread count) and its range, padded so the
/// outermost points do not sit on the frame.
pub fn thread_axis(threads: &[usize]) -> (std::ops::Range<f64>, Vec<f64>) {
    let xs: Vec<f64> = threads.iter().map(|&t| (t.max(1) as f64).log2()).collect();
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = if lo.is_finite() { (lo, hi) } else { (0.0, 0.0) };
    let pad = ((hi - lo) * 0.08).max(0.4);
    ((lo - pad)..(hi + pad), xs)
}

/// The thread count a log2 key point stands for.
pub fn threads_of(x: f64) -> String {
    format!("{:.0}", 2f64.powf(x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decades_get_power_of_ten_ticks() {
        let (lo, hi, t) = log_ticks(1.3e3, 2.1e8).unwrap();
        let (_, _, two) = log_ticks(1.3e3, 31e3).unwrap();
        assert_eq!(two, [1e3, 2e3, 5e3, 1e4, 2e4, 5e4]);
        assert_eq!((lo, hi), (1e3, 1e9));
        assert_eq!(t, [1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9]);
    }

    #[test]
    fn a_narrow_range_still_gets_round_ticks_at_both_ends() {
        // alloc-fault-modify on linux: 1.27k to 1.92k ops/s.
        let (lo, hi, t) = log_ticks(1267.6, 1923.7).unwrap();
        assert_eq!((lo, hi), (1000.0, 2000.0));
        assert_eq!(t, [1000.0, 1500.0, 2000.0]);
        let (_, _, t) = log_ticks(0.012, 0.03).unwrap();
        assert_eq!(t, [0.01, 0.015, 0.02, 0.03]);
    }

    #[test]
    fn one_value_and_bad_ranges() {
        let (lo, hi, t) = log_ticks(5e6, 5e6).unwrap();
        assert!(lo <= 5e6 && hi >= 5e6 && t.len() >= 2, "{t:?}");
        assert!(log_ticks(0.0, 1.0).is_none());
        assert!(log_ticks(f64::NAN, 1.0).is_none());
        assert!(log_ticks(2.0, 1.0).is_none());
    }

    #[test]
    fn many_decades_are_thinned() {
        let (lo, hi, t) = log_ticks(1.0, 1e15).unwrap();
        assert!(t.len() <= 10, "{t:?}");
        assert_eq!((lo, hi), (1.0, 1e15));
    }

    #[test]
    fn thread_axis_is_log2_with_a_point_per_count() {
        let (range, xs) = thread_axis(&[1, 2, 16, 128]);
        assert_eq!(xs, [0.0, 1.0, 4.0, 7.0]);
        assert!(range.start < 0.0 && range.end > 7.0);
        assert_eq!(threads_of(7.0), "128");
        let (range, _) = thread_axis(&[2]);
        assert!(range.start < 1.0 && range.end > 1.0);
    }
}
