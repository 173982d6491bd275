//! The driver's clock: `CLOCK_BOOTTIME`, which keeps counting while the machine is
//! suspended, in the shape of a [`std::time::Instant`].
//!
//! `Instant` reads `CLOCK_MONOTONIC`, which stops while a machine or a virtual guest is
//! suspended: a guest frozen for a minute would wake up believing its lease still runs,
//! while the store expired its session long ago and a standby took over. The lease must
//! count the time the machine was away, so every instant the driver hands the elector is
//! "the start instant plus the boot time elapsed since", which runs on through a suspend.
//! The elector stays pure: it only ever compares the instants it is given.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The longest the driver sleeps on one timer. Timers run on tokio's monotonic clock,
/// which does not count a suspend; waking at least this often lets the lease end be
/// noticed soon after a resume even if no other input arrives.
pub const MAX_SLEEP: Duration = Duration::from_millis(500);

/// Boot time (CLOCK_BOOTTIME) since an arbitrary origin.
fn boottime() -> Duration {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME) {
        Ok(ts) => Duration::new(ts.tv_sec().max(0) as u64, ts.tv_nsec().max(0) as u32),
        // Not on Linux or not permitted: fall back to the monotonic clock.
        Err(_) => monotonic_origin().0.elapsed() + monotonic_origin().1,
    }
}

fn monotonic_origin() -> &'static (Instant, Duration) {
    static ORIGIN: OnceLock<(Instant, Duration)> = OnceLock::new();
    ORIGIN.get_or_init(|| (Instant::now(), Duration::ZERO))
}

/// The instant and boot time the clock started at.
fn origin() -> &'static (Instant, Duration) {
    static ORIGIN: OnceLock<(Instant, Duration)> = OnceLock::new();
    ORIGIN.get_or_init(|| (Instant::now(), boottime()))
}

/// Now, on the boot-time clock.
pub fn now() -> Instant {
    let (start, boot) = *origin();
    start + boottime().saturating_sub(boot)
}

/// Sleeps until `deadline` on the boot-time clock, or at most [`MAX_SLEEP`].
pub async fn sleep_until(deadline: Instant) {
    let left = deadline.saturating_duration_since(now());
    tokio::time::sleep(left.min(MAX_SLEEP)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_clock_runs_with_the_monotonic_one() {
        let a = now();
        std::thread::sleep(Duration::from_millis(20));
        let b = now();
        assert!(b - a >= Duration::from_millis(20), "{:?}", b - a);
        assert!(now() >= b, "the clock never goes back");
    }
}
