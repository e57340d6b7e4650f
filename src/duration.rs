//! Durations on the command line and in `UNILAB_TOOL_TIMEOUT`, one syntax everywhere: plain
//! seconds (`0.5`, `120`) or parts with units (`500ms`, `90s`, `10m`, `2h`, `2d`, `1h30m`).

use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a duration of at most 366 days; use seconds (`0.5`, `90`) or units (`500ms`, `90s`, `10m`, `2h`, `2d`, `1h30m`)"
)]
pub struct DurationError(pub String);

/// The longest duration unilab takes anywhere: a year and a day. Longer ones are refused when
/// they are read, so no deadline computed from one can overflow.
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

pub(crate) fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let err = || DurationError(text.to_owned());
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(err());
    }
    // Plain seconds: `0.5`, `90`.
    if trimmed.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return seconds(trimmed, 1.0).ok_or_else(err);
    }
    // One or more `<number><unit>` parts, largest first by convention: `1h30m`, `2d`, `500ms`.
    let mut total = Duration::ZERO;
    let mut rest = trimmed;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(err)?;
        let (number, after) = rest.split_at(digits);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let scale = match unit {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "d" => 86_400.0,
            _ => return Err(err()),
        };
        if number.is_empty() {
            return Err(err());
        }
        total = total
            .checked_add(seconds(number, scale).ok_or_else(err)?)
            .ok_or_else(err)?;
        rest = next;
    }
    Some(total).filter(|d| *d <= MAX_DURATION).ok_or_else(err)
}

/// `number` (plain decimal digits, no sign or exponent) times `scale` seconds, if it is a
/// duration unilab takes.
fn seconds(number: &str, scale: f64) -> Option<Duration> {
    let value: f64 = number.parse().ok()?;
    Duration::try_from_secs_f64(value * scale)
        .ok()
        .filter(|d| *d <= MAX_DURATION)
}

/// A timeout as `UNILAB_TOOL_TIMEOUT` gives it: a duration as above, but not zero.
pub(crate) fn parse_timeout(text: &str) -> Result<Duration, DurationError> {
    parse_duration(text)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| DurationError(text.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_suffixed_forms() {
        assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration(" 3 ").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_duration("2d").unwrap(), Duration::from_secs(172_800));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(
            parse_duration("1m0.5s").unwrap(),
            Duration::from_millis(60_500)
        );
    }

    #[test]
    fn everything_else_is_refused() {
        for bad in [
            "",
            "s",
            "-1",
            "1e3",
            "inf",
            "nan",
            "10 m",
            "5w",
            "h1",
            "1h-30m",
            "367d",
            "1..2",
            "0x10",
            "1e400",
            "10000000000000000000",
            "8785h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_duration("8784h").unwrap(), MAX_DURATION);
        for bad in ["1e19", "0", "0s", "-1", "inf", "nan", "", "31622401"] {
            assert!(parse_timeout(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_timeout("2.5").unwrap(), Duration::from_millis(2500));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        #[test]
        fn durations_read_back(
            ms in 0u64..10_000_000,
            unit in proptest::sample::select(vec!["ms", "s", ""]),
        ) {
            let text = match unit {
                "ms" => format!("{ms}ms"),
                _ => format!("{}.{:03}{unit}", ms / 1000, ms % 1000),
            };
            proptest::prop_assert_eq!(parse_duration(&text).unwrap(), Duration::from_millis(ms));
        }

        #[test]
        fn no_text_makes_it_panic(text in ".{0,200}") {
            let _ = parse_duration(&text);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        #[test]
        fn no_text_makes_it_panic_and_none_exceeds_the_longest(text in ".{0,64}") {
            for d in [parse_duration(&text), parse_timeout(&text)].into_iter().flatten() {
                proptest::prop_assert!(d <= MAX_DURATION);
            }
        }

        #[test]
        fn compound_forms_read_back(h in 0u64..100, m in 0u64..60, s in 0u64..60, ms in 0u64..1000) {
            let text = format!("{h}h{m}m{s}s");
            let expected = Duration::from_secs(h * 3600 + m * 60 + s);
            proptest::prop_assert_eq!(parse_duration(&text).unwrap(), expected);
            proptest::prop_assert_eq!(
                parse_duration(&format!("{ms}ms")).unwrap(),
                Duration::from_millis(ms)
            );
        }
    }
}
