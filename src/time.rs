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

/// A point in time as a person gives it on the command line: a duration ago (`2d`, `3h30m`) or a
/// date (`2026-12-01`, `2026-12-01T10:00`, in the local time zone unless it carries an offset:
/// `2026-12-01T10:00:00Z`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Since {
    Ago(std::time::Duration),
    At(i64),
}

impl Since {
    /// The moment, in Unix microseconds, when it is `now_us`.
    pub(crate) fn at_us(self, now_us: i64) -> i64 {
        match self {
            Since::At(us) => us,
            Since::Ago(ago) => now_us.saturating_sub(i64::try_from(ago.as_micros()).unwrap_or(0)),
        }
    }
}

/// Reads a [`Since`]; the error says both forms it takes.
pub(crate) fn parse_since(text: &str) -> Result<Since, String> {
    if let Ok(ago) = crate::duration::parse_duration(text) {
        return Ok(Since::Ago(ago));
    }
    let trimmed = text.trim();
    let local = jiff::tz::TimeZone::system();
    let at = trimmed.parse::<jiff::Timestamp>().ok().or_else(|| {
        let civil = trimmed.parse::<jiff::civil::DateTime>().ok().or_else(|| {
            trimmed
                .parse::<jiff::civil::Date>()
                .ok()
                .map(|date| date.to_datetime(jiff::civil::Time::midnight()))
        })?;
        local.to_timestamp(civil).ok()
    });
    match at.or_else(|| out_of_range(trimmed)) {
        Some(at) => Ok(Since::At(at.as_microsecond())),
        None => Err(format!(
            "`{text}` is neither a duration (`2d`, `3h`, `90m`) nor a date (`2026-12-01`, \
             `2026-12-01T10:00`, local time unless it ends in an offset such as `Z`)"
        )),
    }
}

/// The instant of a valid date past the last instant a timestamp holds (late on 31 December
/// 9999, whatever the offset) or before the first: that last or first instant, which every
/// recorded time is before or after all the same.
fn out_of_range(text: &str) -> Option<jiff::Timestamp> {
    let date = jiff::fmt::temporal::Pieces::parse(text).ok()?.date();
    match date.year() {
        9999 => Some(jiff::Timestamp::MAX),
        -9999 => Some(jiff::Timestamp::MIN),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_a_duration_ago_or_a_date() {
        assert_eq!(
            parse_since("2d"),
            Ok(Since::Ago(std::time::Duration::from_secs(2 * 86_400)))
        );
        assert_eq!(
            Since::Ago(std::time::Duration::from_secs(2)).at_us(5_000_000),
            3_000_000
        );
        assert_eq!(
            parse_since("2025-12-02T12:00:20Z"),
            Ok(Since::At(1_764_676_820_000_000))
        );
        // A date without an offset is local time; a plain date is its midnight.
        let local = |text: &str| match parse_since(text) {
            Ok(Since::At(us)) => us,
            other => panic!("{text}: {other:?}"),
        };
        assert_eq!(
            local("2025-12-02") + 12 * 3_600_000_000,
            local("2025-12-02T12:00")
        );
        assert_eq!(local("2025-12-02 12:00:00"), local("2025-12-02T12:00"));
        // Past the last instant a timestamp holds: that instant, which selects everything (a
        // date in local time is taken in any time zone, as that instant or as itself).
        let last = Since::At(jiff::Timestamp::MAX.as_microsecond());
        for far in [
            "9999-12-31T00:00Z",
            "9999-12-31T23:59:59Z",
            "9999-12-31T23:59+01:00",
        ] {
            assert_eq!(parse_since(far), Ok(last), "{far}");
        }
        assert!(local("9999-12-31") >= local("9999-12-30"));
        for bad in ["", "yesterday", "2025-13-01", "-2d", "2d ago", "9999-12-32"] {
            let error = parse_since(bad).unwrap_err();
            assert!(error.contains("neither a duration"), "{bad}: {error}");
        }
    }
}
