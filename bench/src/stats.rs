//! Percentiles over samples.

use std::time::Duration;

/// The `q` quantile (0.0..=1.0) of `xs` by nearest rank; 0 when empty.
pub fn quantile(xs: &[f64], q: f64) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// Median of `xs`.
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Milliseconds of `d` as f64.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Resamples drawn by [`ratio_interval`].
const RESAMPLES: usize = 4_000;

/// The 90% interval of `median(on) / median(off)` by the percentile bootstrap: both
/// samples drawn again with replacement [`RESAMPLES`] times, the ratio taken each time,
/// and its 5th and 95th percentiles returned as `(low, high)`. How far the ratio of one
/// run of the benchmark could move from noise alone (runs on this shared 2-core machine
/// vary by about 9% each); deterministic (a fixed seed), so that a rerun of the same
/// samples gives the same interval. `(0, 0)` when either side is empty.
pub fn ratio_interval(off: &[f64], on: &[f64]) -> (f64, f64) {
    if off.is_empty() || on.is_empty() {
        return (0.0, 0.0);
    }
    // xorshift64*: enough to pick indices, no dependency for it.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut pick = |n: usize| {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    };
    let mut ratios = Vec::with_capacity(RESAMPLES);
    let (mut a, mut b) = (vec![0.0; off.len()], vec![0.0; on.len()]);
    for _ in 0..RESAMPLES {
        a.iter_mut().for_each(|x| *x = off[pick(off.len())]);
        b.iter_mut().for_each(|x| *x = on[pick(on.len())]);
        ratios.push(median(&b) / median(&a));
    }
    (quantile(&ratios, 0.05), quantile(&ratios, 0.95))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_samples_give_an_interval_around_one() {
        let off = [1.0, 1.1, 0.9, 1.05, 0.95, 1.2, 0.8];
        let (lo, hi) = ratio_interval(&off, &off);
        assert!(lo < 1.0 && hi > 1.0, "({lo}, {hi})");
    }

    #[test]
    fn a_constant_shift_gives_that_ratio() {
        let off = [2.0; 9];
        let on = [2.2; 9];
        let (lo, hi) = ratio_interval(&off, &on);
        assert!(
            (lo - 1.1).abs() < 1e-9 && (hi - 1.1).abs() < 1e-9,
            "({lo}, {hi})"
        );
    }

    #[test]
    fn the_interval_holds_the_ratio_of_medians_and_narrows_with_more_runs() {
        let off: Vec<f64> = (0..10).map(|i| 1.0 + f64::from(i) * 0.02).collect();
        let on: Vec<f64> = off.iter().map(|x| x * 1.03).collect();
        let point = median(&on) / median(&off);
        let (lo, hi) = ratio_interval(&off, &on);
        assert!(lo <= point && point <= hi, "{point} not in ({lo}, {hi})");
        let more = |v: &[f64]| {
            v.iter()
                .cycle()
                .take(v.len() * 4)
                .copied()
                .collect::<Vec<_>>()
        };
        let (lo4, hi4) = ratio_interval(&more(&off), &more(&on));
        assert!(hi4 - lo4 < hi - lo, "({lo4}, {hi4}) vs ({lo}, {hi})");
    }

    #[test]
    fn an_empty_side_has_no_interval() {
        assert_eq!(ratio_interval(&[], &[1.0]), (0.0, 0.0));
    }
}
