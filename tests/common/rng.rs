//! A seeded random source for fault rounds (the ensemble's and the recipes' campaign):
//! SplitMix64, so a seed names the same fault plan on every machine and every version of
//! every crate.

use std::time::Duration;

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True with probability `percent`/100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// Uniform in `lo..=hi`, to the millisecond.
    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// A seed from `WARDEN_FAULT_SEED` (decimal or `0x` hex), else from the clock and pid.
pub fn seed_from_env() -> (u64, bool) {
    match std::env::var("WARDEN_FAULT_SEED") {
        Ok(v) => {
            let v = v.trim().replace('_', "");
            let seed = match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse(),
            }
            .unwrap_or_else(|_| panic!("WARDEN_FAULT_SEED={v:?} is not a number"));
            (seed, true)
        }
        Err(_) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            let mut r = Rng::new(now.as_nanos() as u64 ^ ((std::process::id() as u64) << 32));
            (r.next_u64() >> 16, false)
        }
    }
}
