//! A small seeded generator for the randomized suites: a failing schedule is replayed
//! from its printed seed alone.

/// splitmix64: small, seedable, the same sequence on every platform.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The generator seeded from environment variable `var` (a number), or from the
    /// clock when it is unset or not a number; with the seed, to print.
    pub fn from_env(var: &str) -> (Self, u64) {
        let seed = std::env::var(var)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| crate::fault::now_ms() as u64);
        (Self(seed), seed)
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}
