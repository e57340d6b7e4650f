//! Standard output carries data only; diagnostics go to standard error.
//!
//! `-q` silences notes and warnings, `-v` adds detail; errors are always shown. Output is
//! buffered and flushed at the end of a command (and after each batch of `--follow`). A closed
//! standard error is ignored rather than allowed to abort the command.

use std::io::{BufWriter, Stdout, Write};

use crate::error::{Error, stdout_error};
use crate::time::{Clock, SystemClock, unix_seconds};

pub(crate) struct Output {
    pub json: bool,
    quiet: bool,
    verbose: u8,
    stdout: BufWriter<Stdout>,
}

impl Output {
    pub(crate) fn new(json: bool, quiet: bool, verbose: u8) -> Self {
        Self {
            json,
            quiet,
            verbose,
            stdout: BufWriter::new(std::io::stdout()),
        }
    }

    /// One line of data on standard output.
    pub(crate) fn line(&mut self, text: &str) -> Result<(), Error> {
        self.stdout
            .write_all(text.as_bytes())
            .and_then(|()| self.stdout.write_all(b"\n"))
            .map_err(stdout_error)
    }

    /// One JSON value, on one line.
    pub(crate) fn json_line(&mut self, value: &serde_json::Value) -> Result<(), Error> {
        serde_json::to_writer(&mut self.stdout, value).map_err(|e| stdout_error(e.into()))?;
        self.stdout.write_all(b"\n").map_err(stdout_error)
    }

    /// Bytes exactly as given, on standard output.
    pub(crate) fn raw(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.stdout.write_all(bytes).map_err(stdout_error)
    }

    pub(crate) fn is_quiet(&self) -> bool {
        self.quiet
    }

    pub(crate) fn flush(&mut self) -> Result<(), Error> {
        self.stdout.flush().map_err(stdout_error)
    }

    /// Something a person may want to know; silenced by `-q`.
    pub(crate) fn note(&self, text: &str) {
        if !self.quiet {
            let _ = writeln!(std::io::stderr(), "{}", crate::text::printable(text));
        }
    }

    pub(crate) fn warn(&self, text: &str) {
        if !self.quiet {
            let _ = writeln!(
                std::io::stderr(),
                "warning: {}",
                crate::text::printable(text)
            );
        }
    }

    /// Detail shown with `-v`.
    pub(crate) fn detail(&self, text: &str) {
        if self.verbose > 0 && !self.quiet {
            let _ = writeln!(std::io::stderr(), "{}", crate::text::printable(text));
        }
    }
}

/// A Unix-microsecond time as a person reads it, in the local time zone, to the millisecond.
pub(crate) fn human_time(us: i64) -> String {
    match jiff::Timestamp::from_microsecond(us) {
        Ok(ts) => ts
            .to_zoned_datetime(jiff::tz::TimeZone::system())
            .strftime("%Y-%m-%d %H:%M:%S%.3f")
            .to_string(),
        Err(_) => format!("@{us}us"),
    }
}

/// How long ago a Unix-seconds time was, as [`duration`] writes it.
pub(crate) fn age(since_unix_seconds: f64) -> String {
    duration(unix_seconds(SystemClock.now_us()) - since_unix_seconds)
}

/// A span of seconds as a person reads it, to its two largest units: `0.4s`, `42s`, `3m 12s`,
/// `2h 05m`, `4d 3h`.
pub(crate) fn duration(seconds: f64) -> String {
    let seconds = seconds.max(0.0);
    if seconds < 10.0 {
        return format!("{seconds:.1}s");
    }
    let secs = seconds as u64;
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m {:02}s", secs / 60, secs % 60),
        3600..86400 => format!("{}h {:02}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d {}h", secs / 86400, secs % 86400 / 3600),
    }
}

/// A byte count as a person reads it: `512 B`, `3.2 MiB`, `1.5 GiB`.
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::{bytes, duration};

    #[test]
    fn durations_read_in_their_two_largest_units() {
        assert_eq!(duration(0.42), "0.4s");
        assert_eq!(duration(-3.0), "0.0s");
        assert_eq!(duration(42.9), "42s");
        assert_eq!(duration(192.0), "3m 12s");
        assert_eq!(duration(7_500.0), "2h 05m");
        assert_eq!(duration(183_600.0), "2d 3h");
    }

    #[test]
    fn byte_counts_read_in_binary_units() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(3_355_443), "3.2 MiB");
        assert_eq!(bytes(1_610_612_736), "1.5 GiB");
    }
}
