//! Wall-clock time as unilab records it: Unix microseconds from a replaceable [`Clock`], and the
//! float seconds that JSON output uses.

/// Wall-clock source for `recorded_at` and `created_at`, replaceable in tests and fixture
/// generation.
pub trait Clock: Send + Sync {
    /// Unix microseconds.
    fn now_us(&self) -> i64;
}

/// The system's real-time clock.
pub struct SystemClock;

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
