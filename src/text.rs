//! Text for people: words for counts (`1 sample`, `2 samples`), times and sizes as people read
//! them, and what unilab did not write itself made safe to print on a terminal ([`foreign`]).

use std::borrow::Cow;

/// `n` and `word`, in the plural unless `n` is one: `1 process`, `3 processes`, `0 GPUs`.
pub(crate) fn count(n: impl Into<u64>, word: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("1 {word}")
    } else if word.ends_with('s') || word.ends_with('x') {
        format!("{n} {word}es")
    } else {
        format!("{n} {word}s")
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

/// A span of seconds as a person reads it, to its two largest units: `0.4s`, `5s`, `42s`,
/// `3m 12s`, `2m`, `2h 05m`, `4d 3h`. Rounded to the nearest of the last unit shown (a tenth of
/// a second under ten seconds), so that the same span reads the same in every command: 16.9 s
/// is `17s`, and 59.7 s is `1m`. A last unit that rounds to zero is left out, so a setting reads
/// as it is typed (`--stale-progress 2m`). Every duration unilab shows a person is written so
/// (and [`step_time`], which keeps more digits, below ten seconds).
pub(crate) fn duration(seconds: f64) -> String {
    // Not `max(0.0)`: that keeps -0.0, which prints as `-0`.
    let seconds = if seconds.is_finite() && seconds > 0.0 {
        seconds
    } else {
        0.0
    };
    if seconds < 9.95 {
        let tenths = format!("{seconds:.1}");
        return format!("{}s", tenths.strip_suffix(".0").unwrap_or(&tenths));
    }
    // Two units, the smaller left out when it is zero: `3m 12s`, `3m`.
    let two = |large: u64, big: &str, small: u64, unit: &str, width: usize| match small {
        0 => format!("{large}{big}"),
        _ => format!("{large}{big} {small:0width$}{unit}"),
    };
    // `as` saturates: a span too long for a u64 of seconds reads as the longest one does.
    let in_units = |unit: f64| (seconds / unit).round() as u64;
    let secs = in_units(1.0);
    if secs < 60 {
        return format!("{secs}s");
    }
    if secs < 3600 {
        return two(secs / 60, "m", secs % 60, "s", 2);
    }
    let minutes = in_units(60.0);
    if minutes < 24 * 60 {
        return two(minutes / 60, "h", minutes % 60, "m", 2);
    }
    let hours = in_units(3600.0);
    two(hours / 24, "d", hours % 24, "h", 1)
}

/// A step's time, with the digits that tell steps apart: three significant digits under ten
/// seconds (`850µs`, `4.25ms`, `101ms`, `1.23s`), then as [`duration`] reads (`12s`, `3m 12s`).
/// Also how long a tool call or a commit took, in `-v`'s detail lines.
pub(crate) fn step_time(seconds: f64) -> String {
    let seconds = if seconds.is_finite() {
        seconds.max(0.0)
    } else {
        0.0
    };
    let three = |value: f64, unit: &str| {
        let decimals = match value {
            v if v < 9.995 => 2,
            v if v < 99.95 => 1,
            _ => 0,
        };
        format!("{value:.decimals$}{unit}")
    };
    match seconds {
        s if s <= 0.0 => "0s".into(),
        s if s < 0.000_999_5 => three(s * 1e6, "µs"),
        s if s < 0.999_5 => three(s * 1e3, "ms"),
        s if s < 9.995 => three(s, "s"),
        s => duration(s),
    }
}

/// `text` with every control character escaped (`\n`, `\t`, `\u{1b}`): THE way a string unilab
/// did not write itself reaches the terminal. Whatever was read from a file or another process —
/// a job's alarm, a process or thread name, a wait channel, a stack line, a kernel line, an
/// output tail, a beat's phase or number name, a rank's entry, a collective, a host name from
/// another log, a metadata value — or taken from the environment or the command line goes
/// through it where it is put into a line, before any colour is added: what comes back cannot
/// begin a line of its own, move the cursor, clear the screen, set the window title, or pass for
/// one of unilab's own colour codes. Applied twice it changes nothing more.
pub(crate) fn foreign(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            escaped.extend(c.escape_debug());
        } else {
            escaped.push(c);
        }
    }
    Cow::Owned(escaped)
}

/// Text unilab composed — its lines, its tabs, the colour codes in `kept` — checked once more on
/// its way out: everything between those is passed through [`foreign`]. The last guard of
/// [`crate::output::Output`]'s lines and messages, should a value have been put in unescaped;
/// not a way to print a value (a forged line break or colour code passes it).
pub(crate) fn composed<'a>(text: &'a str, kept: &[String]) -> Cow<'a, str> {
    let ours = |c: char| c == '\n' || c == '\t';
    if !text.chars().any(|c| c.is_control() && !ours(c)) {
        return Cow::Borrowed(text);
    }
    let mut safe = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(code) = kept
            .iter()
            .find(|code| !code.is_empty() && rest.starts_with(code.as_str()))
        {
            safe.push_str(code);
            rest = &rest[code.len()..];
            continue;
        }
        // Up to the next line break, tab or escape (where a kept code may begin), escaped.
        let end = rest
            .char_indices()
            .skip(1)
            .find(|&(_, c)| ours(c) || c == '\u{1b}')
            .map_or(rest.len(), |(at, _)| at);
        let (piece, after) = rest.split_at(end);
        match piece.strip_prefix(ours) {
            Some(tail) => {
                safe.push_str(&piece[..piece.len() - tail.len()]);
                safe.push_str(&foreign(tail));
            }
            None => safe.push_str(&foreign(piece)),
        }
        rest = after;
    }
    Cow::Owned(safe)
}

/// A command line as a POSIX shell would take it back: each argument quoted where it needs it.
/// Every view that shows a command line to a person (`soak show`, `soak list`, `history`, the
/// report, the evidence, `-v`'s tool calls) shows it so — on a terminal through [`foreign`],
/// since an argument may hold a line break (the metrics file's label keeps it exact).
pub(crate) fn shell_command<S: AsRef<str>>(args: &[S]) -> String {
    let words = args.iter().map(AsRef::as_ref);
    // Only a word with a NUL byte has no quoting; no argument vector holds one.
    shlex::try_join(words.clone()).unwrap_or_else(|_| words.collect::<Vec<_>>().join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(count(1u32, "sample"), "1 sample");
        assert_eq!(count(2u32, "sample"), "2 samples");
        assert_eq!(count(0u32, "GPU"), "0 GPUs");
        assert_eq!(count(1u32, "process"), "1 process");
        assert_eq!(count(3u32, "process"), "3 processes");
        assert_eq!(count(2u32, "progress file"), "2 progress files");
    }

    #[test]
    fn byte_counts_read_in_binary_units() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(3_355_443), "3.2 MiB");
        assert_eq!(bytes(1_610_612_736), "1.5 GiB");
    }

    #[test]
    fn what_must_stay_on_one_line_escapes_newlines_too() {
        assert_eq!(foreign("5\nerror: forged\t"), "5\\nerror: forged\\t");
        assert_eq!(foreign("plain"), "plain");
        assert_eq!(
            foreign(&foreign("a\u{1b}[2J\r")),
            "a\\u{1b}[2J\\r",
            "once is enough"
        );
        // C1 controls too: U+009B is a one-character escape sequence on some terminals.
        assert_eq!(foreign("a\u{9b}2J"), "a\\u{9b}2J");
    }

    /// An alarm's reason forged as `x\n\x1b[31merror: forged` printed a line of its own, in
    /// unilab's own red: a value from a file passed through with its line break, and its escape
    /// taken for one of the palette's codes, which the last guard of a line keeps.
    #[test]
    fn a_forged_colour_code_or_line_break_in_a_value_is_escaped_though_the_palettes_are_kept() {
        let red = crate::style::Palette::colored(true).status("failed");
        let kept = crate::style::own_codes();
        let forged = format!("x\n{red}error: forged");
        let line = format!("{red} reason: {}", foreign(&forged));
        let shown = composed(&line, kept);
        assert!(shown.starts_with(&red), "{shown:?}");
        assert_eq!(
            shown.matches('\u{1b}').count(),
            red.matches('\u{1b}').count()
        );
        assert!(!shown.contains('\n'), "{shown:?}");
        let escaped = format!("reason: x\\n{}error: forged", foreign(&red));
        assert!(shown.ends_with(&escaped), "{shown:?}");
        // The guard alone keeps a line break and a code of the palette, escapes the rest.
        assert_eq!(
            composed("a\tb\n\u{1b}[2J\u{1b}]0;t\u{7}\r", kept),
            "a\tb\n\\u{1b}[2J\\u{1b}]0;t\\u{7}\\r"
        );
        assert_eq!(composed("\u{1b}[31mx", &[]), "\\u{1b}[31mx");
    }

    #[test]
    fn durations_read_in_their_two_largest_units() {
        assert_eq!(duration(0.42), "0.4s");
        assert_eq!(duration(-3.0), "0s");
        assert_eq!(duration(192.0), "3m 12s");
        assert_eq!(duration(7_500.0), "2h 05m");
        assert_eq!(duration(183_600.0), "2d 3h");
    }

    /// History said `every 1000 ms, stale after 120000 ms` of a soak's settings, and a run time
    /// of `1m 00s`: a unit that rounds to zero is left out, so a whole second, minute, hour or
    /// day reads as it is typed on the command line, and nothing — zero, a sub-second span, the
    /// edge of each unit, a span longer than any u64 of seconds — reads otherwise or panics.
    #[test]
    fn durations_leave_out_a_last_unit_of_zero_at_every_edge() {
        for (seconds, shown) in [
            (0.0, "0s"),
            (0.04, "0s"),
            (0.05, "0.1s"),
            (0.5, "0.5s"),
            (1.0, "1s"),
            (5.1, "5.1s"),
            (9.94, "9.9s"),
            (9.95, "10s"),
            (59.4, "59s"),
            (59.95, "1m"),
            (60.0, "1m"),
            (61.0, "1m 01s"),
            (120.0, "2m"),
            (600.0, "10m"),
            (3_599.4, "59m 59s"),
            (3_600.0, "1h"),
            (5_400.0, "1h 30m"),
            (86_400.0, "1d"),
            (90_000.0, "1d 1h"),
            (366.0 * 86_400.0, "366d"),
        ] {
            assert_eq!(duration(seconds), shown, "{seconds} s");
        }
        for huge in [1e18, 1e300, f64::MAX] {
            assert!(
                duration(huge).ends_with('h'),
                "{huge} s: {}",
                duration(huge)
            );
        }
        for nonsense in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0] {
            assert_eq!(duration(nonsense), "0s");
        }
    }

    #[test]
    fn step_times_keep_three_significant_digits() {
        assert_eq!(step_time(0.000_85), "850µs");
        assert_eq!(step_time(0.004_25), "4.25ms");
        assert_eq!(step_time(0.101_3), "101ms");
        assert_eq!(step_time(0.999_6), "1.00s");
        assert_eq!(step_time(1.234), "1.23s");
        assert_eq!(step_time(12.4), "12s");
        assert_eq!(step_time(0.0), "0s");
        assert_eq!(step_time(f64::NAN), "0s");
    }

    /// `soak show` said "ran 16s" of a soak that ran 16.9 s (truncated) and "last change at
    /// 17s" of the same instant (rounded): one rule, to the nearest of the last unit shown.
    #[test]
    fn durations_round_to_the_nearest_of_their_last_unit() {
        assert_eq!(duration(16.9), "17s");
        assert_eq!(duration(42.4), "42s");
        assert_eq!(duration(9.96), "10s");
        assert_eq!(duration(59.7), "1m");
        assert_eq!(duration(3599.6), "1h");
        assert_eq!(duration(7_529.0), "2h 05m");
        assert_eq!(duration(7_531.0), "2h 06m");
        assert_eq!(duration(86_399.0), "1d");
        assert_eq!(duration(f64::NAN), "0s");
    }
}
