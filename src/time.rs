//! Wall-clock time as unilab records it: Unix microseconds from a replaceable [`Clock`], and the
//! float seconds that JSON output uses.

/// Wall-clock source for `recorded_at` and `created_at`, replaceable in tests and fixture
/// generation.
pub trait Clock: Send + Sync {
    /// Unix microseconds.
    fn now_us(&self) -> i64;
}

/// The system's real-time clock.
pub(crate) struct SystemClock;

impl Clock for SystemClock {
    fn now_us(&self) -> i64 {
        match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
            Err(before) => -i64::try_from(before.duration().as_micros()).unwrap_or(i64::MAX),
        }
    }
}

/// A Unix-microsecond time as JSON's float seconds.
pub(crate) fn unix_seconds(us: i64) -> f64 {
    us as f64 / 1_000_000.0
}

/// Checks `check` every `every` until it gives a value or `within` has passed, checking once
/// more at the deadline: the one way unilab waits for something nothing will tell it about (a
/// process exiting, a pid file appearing, a pipe closing).
pub(crate) fn poll<T>(
    within: std::time::Duration,
    every: std::time::Duration,
    mut check: impl FnMut() -> Option<T>,
) -> Option<T> {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(found) = check() {
            return Some(found);
        }
        let now = std::time::Instant::now();
        if now >= deadline {
            return None;
        }
        std::thread::sleep(every.min(deadline - now));
    }
}

/// [`poll`] for a condition: whether it came true within `within`.
pub(crate) fn poll_until(
    within: std::time::Duration,
    every: std::time::Duration,
    mut done: impl FnMut() -> bool,
) -> bool {
    poll(within, every, || done().then_some(())).is_some()
}

/// Nanoseconds on the system-wide monotonic clock: comparable between processes of one host (the
/// soak's guard reports its command's spawn and exit on it), unaffected by wall-clock steps.
pub(crate) fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| {
            u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000_000
                + u64::try_from(t.tv_nsec()).unwrap_or(0)
        })
        .unwrap_or(0)
}
