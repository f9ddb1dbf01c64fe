//! A cheap clock for per-op timestamps (the framework's flight recorder
//! stamps every op): the CPU's time-stamp counter where there is one
//! (x86-64: a few ns, against ~35 ns for `Instant::now` on these
//! machines), converted to wall-clock time only when read.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A point on the cheap clock: counter ticks (TSC) on x86-64, else
/// nanoseconds since the process's clock origin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stamp(u64);

impl Stamp {
    /// The raw counter value (for storing a stamp in an atomic word).
    pub fn ticks(self) -> u64 {
        self.0
    }

    /// The stamp of a raw counter value from [`Stamp::ticks`].
    pub fn from_ticks(ticks: u64) -> Stamp {
        Stamp(ticks)
    }
}

/// Reads the cheap clock.
#[inline]
pub fn stamp() -> Stamp {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no preconditions and touches no memory; every
        // x86-64 CPU has it (the counter is invariant on the hosts we run
        // on: the kernel's clocksource is `tsc`).
        Stamp(unsafe { core::arch::x86_64::_rdtsc() })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Stamp(origin().0.elapsed().as_nanos() as u64)
    }
}

/// The clock's origin: an instant, the wall-clock time then (µs since the
/// Unix epoch), and the stamp then.
fn origin() -> &'static (Instant, f64, u64) {
    static ORIGIN: std::sync::OnceLock<(Instant, f64, u64)> = std::sync::OnceLock::new();
    ORIGIN.get_or_init(|| {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64() * 1e6)
            .unwrap_or(0.0);
        // the stamp read in the same moment (`stamp` needs the origin
        // only off x86-64, where it is nanoseconds from here)
        let now = Instant::now();
        #[cfg(target_arch = "x86_64")]
        let s = stamp().0;
        #[cfg(not(target_arch = "x86_64"))]
        let s = 0;
        (now, wall, s)
    })
}

/// Ticks of the cheap clock per microsecond, measured against `Instant`
/// over the process's life so far (at least 1 ms of it).
fn ticks_per_us() -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        let (t0, _, s0) = *origin();
        let mut elapsed = t0.elapsed();
        if elapsed.as_micros() < 1000 {
            std::thread::sleep(
                std::time::Duration::from_millis(1)
                    - elapsed.min(std::time::Duration::from_millis(1)),
            );
            elapsed = t0.elapsed();
        }
        let ticks = stamp().0.saturating_sub(s0) as f64;
        ticks / (elapsed.as_secs_f64() * 1e6).max(1e-3)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        1e3
    }
}

/// Converts stamps to wall-clock time. Make one when reading stamps (a
/// dump), not per stamp: it measures the clock's rate.
#[derive(Clone, Copy, Debug)]
pub struct StampClock {
    s0: u64,
    wall0_us: f64,
    ticks_per_us: f64,
}

impl StampClock {
    /// A converter for stamps of this process.
    pub fn new() -> Self {
        let (_, wall0_us, s0) = *origin();
        StampClock {
            s0,
            wall0_us,
            ticks_per_us: ticks_per_us(),
        }
    }

    /// `s` as microseconds since the Unix epoch.
    pub fn wall_us(&self, s: Stamp) -> f64 {
        self.wall0_us + (s.0 as f64 - self.s0 as f64) / self.ticks_per_us
    }
}

impl Default for StampClock {
    fn default() -> Self {
        Self::new()
    }
}

/// Fixes the clock's origin now (a recorder calls it when it is made, so
/// the conversion's baseline predates every stamp it takes).
pub fn init_clock() {
    let _ = origin();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_convert_to_wall_time_within_a_millisecond() {
        init_clock();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let s = stamp();
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
            * 1e6;
        let got = StampClock::new().wall_us(s);
        assert!(
            (got - wall).abs() < 1000.0,
            "stamp {got} µs vs wall {wall} µs"
        );
        assert!(stamp() >= s, "the clock runs forwards");
    }
}
