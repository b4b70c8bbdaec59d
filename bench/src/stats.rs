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

/// The 90% confidence interval of `median(on) / median(off)` by the percentile bootstrap
/// over pairs: `off[i]` and `on[i]` were measured side by side (the same load drift on
/// both), so the pairs are drawn again with replacement, together, [`RESAMPLES`] times,
/// the ratio taken each time, and its 5th and 95th percentiles returned as `(low, high)`.
/// Pairs beyond the shorter side are left out. Deterministic (a fixed seed), so that the
/// same samples give the same interval. `(0, 0)` when there is no pair.
pub fn ratio_interval(off: &[f64], on: &[f64]) -> (f64, f64) {
    let n = off.len().min(on.len());
    if n == 0 {
        return (0.0, 0.0);
    }
    // xorshift64*: enough to pick indices, no dependency for it.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut pick = || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    };
    let mut ratios = Vec::with_capacity(RESAMPLES);
    let (mut a, mut b) = (vec![0.0; n], vec![0.0; n]);
    for _ in 0..RESAMPLES {
        for (x, y) in a.iter_mut().zip(b.iter_mut()) {
            let i = pick();
            (*x, *y) = (off[i], on[i]);
        }
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
        let on = [0.95, 1.15, 0.9, 1.1, 0.9, 1.25, 0.85];
        let (lo, hi) = ratio_interval(&off, &on);
        assert!(lo < 1.0 && hi > 1.0, "({lo}, {hi})");
    }

    #[test]
    fn a_shift_within_pairs_gives_that_ratio_however_the_pairs_drift() {
        // Each pair ran under its own load; on is 10% slower than off in every pair.
        let off: Vec<f64> = (0..20).map(|i| 1.0 + f64::from(i % 7) * 0.1).collect();
        let on: Vec<f64> = off.iter().map(|x| x * 1.1).collect();
        let (lo, hi) = ratio_interval(&off, &on);
        assert!(
            (lo - 1.1).abs() < 1e-9 && (hi - 1.1).abs() < 1e-9,
            "({lo}, {hi})"
        );
    }

    #[test]
    fn the_interval_holds_the_ratio_of_medians_and_narrows_with_more_pairs() {
        let off: Vec<f64> = (0..10).map(|i| 1.0 + f64::from(i) * 0.02).collect();
        let on: Vec<f64> = (0..10)
            .map(|i| 1.03 + f64::from((i * 7) % 10) * 0.02)
            .collect();
        let point = median(&on) / median(&off);
        let (lo, hi) = ratio_interval(&off, &on);
        assert!(lo <= point && point <= hi, "{point} not in ({lo}, {hi})");
        assert!(lo < hi, "({lo}, {hi})");
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
    fn unpaired_runs_are_left_out_and_no_pair_gives_no_interval() {
        assert_eq!(ratio_interval(&[], &[1.0]), (0.0, 0.0));
        assert_eq!(ratio_interval(&[2.0, 9.0], &[2.2]), (1.1, 1.1));
    }
}
