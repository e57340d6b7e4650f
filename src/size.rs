//! Sizes and rates on the command line: plain bytes (`1048576`) or a number with a unit —
//! binary (`512KiB`, `512MiB`, `40GiB`, `1TiB`) or decimal (`1.5GB`, `500MB`, `2kB`) — and a rate
//! as a size per second, minute or hour (`200MiB/h`, `5MiB/s`, `60MiB/min`).
//!
//! Sizes are whole bytes: a count of bytes (`4096`, `4096B`) has no fraction, so `0.5B` is
//! refused as `0.5` is; a size in a larger unit is rounded to the byte (`1.1MiB` is 1,153,434
//! bytes). A rate's size follows the same rule. Budgets (`--max-memory` and the like) are above
//! zero, and every error quotes what was typed.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SizeError {
    #[error(
        "`{0}` is not a size; use bytes (`1048576`) or units (`512MiB`, `40GiB`, `1.5GB`, `1PiB`), at most 1 PiB"
    )]
    NotASize(String),
    #[error(
        "`{0}` is not a whole number of bytes; give bytes without a fraction, or a larger unit (`1.5KiB`)"
    )]
    Fraction(String),
    #[error("`{0}` is over 1 PiB, the largest size taken")]
    TooLarge(String),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RateError {
    #[error(
        "`{0}` is not a rate; use a size per `s`, `min` or `h` (`200MiB/h`, `5MiB/s`, `60MiB/min`)"
    )]
    NotARate(String),
    #[error("`{text}` is not a rate: {size}")]
    Size { text: String, size: SizeError },
}

/// A budget of zero, which would fail every soak.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` would fail every soak; give a budget above zero, or leave the flag out")]
pub(crate) struct ZeroBudget(pub String);

/// The largest size taken: a pebibyte. Larger ones are surely typos.
const MAX_BYTES: f64 = (1u64 << 50) as f64;

/// A size in bytes.
pub(crate) fn parse_size(text: &str) -> Result<u64, SizeError> {
    let not_a_size = || SizeError::NotASize(text.to_owned());
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let unit = unit.trim();
    let scale: f64 = match unit {
        "" | "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "TiB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "PiB" => MAX_BYTES,
        "kB" | "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        "PB" => 1e15,
        _ => return Err(not_a_size()),
    };
    let value: f64 = number.parse().map_err(|_| not_a_size())?;
    let exact = value * scale;
    if !exact.is_finite() {
        return Err(not_a_size());
    }
    if scale == 1.0 && exact.fract() != 0.0 {
        return Err(SizeError::Fraction(text.to_owned()));
    }
    let bytes = exact.round();
    if bytes > MAX_BYTES {
        return Err(SizeError::TooLarge(text.to_owned()));
    }
    Ok(bytes as u64)
}

/// A rate, in bytes an hour.
pub(crate) fn parse_rate(text: &str) -> Result<u64, RateError> {
    let not_a_rate = || RateError::NotARate(text.to_owned());
    let (size, per) = text.trim().rsplit_once('/').ok_or_else(not_a_rate)?;
    let per_hour: u64 = match per.trim() {
        "s" => 3600,
        "min" => 60,
        "h" => 1,
        _ => return Err(not_a_rate()),
    };
    let bytes = parse_size(size).map_err(|size| match size {
        SizeError::NotASize(_) => not_a_rate(),
        size => RateError::Size {
            text: text.to_owned(),
            size,
        },
    })?;
    bytes.checked_mul(per_hour).ok_or_else(not_a_rate)
}

/// A size budget: a size above zero.
pub(crate) fn parse_size_budget(text: &str) -> Result<u64, String> {
    match parse_size(text) {
        Ok(0) => Err(ZeroBudget(text.to_owned()).to_string()),
        Ok(bytes) => Ok(bytes),
        Err(e) => Err(e.to_string()),
    }
}

/// A rate budget: a rate above zero.
pub(crate) fn parse_rate_budget(text: &str) -> Result<u64, String> {
    match parse_rate(text) {
        Ok(0) => Err(ZeroBudget(text.to_owned()).to_string()),
        Ok(per_hour) => Ok(per_hour),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_binary_and_decimal_units_and_plain_bytes() {
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("40GiB"), Ok(40 << 30));
        assert_eq!(parse_size("1.5GB"), Ok(1_500_000_000));
        assert_eq!(parse_size("2kB"), Ok(2000));
        assert_eq!(parse_size(" 1048576 "), Ok(1 << 20));
        assert_eq!(parse_size("0.5 GiB"), Ok(512 << 20));
        assert_eq!(parse_size("1.1MiB"), Ok(1_153_434), "rounded to the byte");
        assert_eq!(parse_size("4096B"), Ok(4096));
        for bad in ["", "MiB", "12 parsecs", "-1GiB", "1e3", "1..2MiB", "1EiB"] {
            assert_eq!(
                parse_size(bad),
                Err(SizeError::NotASize(bad.into())),
                "{bad:?}"
            );
        }
    }

    /// `1PiB` was refused while the error said "at most 1 PiB" (`1024TiB` was taken): the unit
    /// was missing from the table. Every size up to the limit the message names is taken.
    #[test]
    fn one_pebibyte_is_taken_as_the_message_says_and_more_is_not() {
        assert_eq!(parse_size("1PiB"), Ok(1 << 50));
        assert_eq!(parse_size("1024TiB"), Ok(1 << 50));
        // A fraction of a decimal unit is over the limit only by what it is worth.
        assert_eq!(parse_size("1.1PB"), Ok(1_100_000_000_000_000));
        assert_eq!(
            parse_size("1.2PB"),
            Err(SizeError::TooLarge("1.2PB".into()))
        );
        assert_eq!(parse_size("1PB"), Ok(1_000_000_000_000_000));
        assert_eq!(parse_size("0.5PiB"), Ok(1 << 49));
        let too_large = parse_size("2PiB").unwrap_err();
        assert_eq!(too_large, SizeError::TooLarge("2PiB".into()));
        assert_eq!(
            too_large.to_string(),
            "`2PiB` is over 1 PiB, the largest size taken"
        );
        assert!(
            SizeError::NotASize("x".into())
                .to_string()
                .contains("`1PiB`), at most 1 PiB")
        );
    }

    /// `0.5B` was taken (rounded to a byte) while `0.4` was refused: a count of bytes has no
    /// fraction, with its unit or without; larger units round to the byte.
    #[test]
    fn a_count_of_bytes_with_a_fraction_is_refused_with_or_without_its_unit() {
        for bad in ["0.4", "0.5", "0.5B", "0.4B", "1.5 B", "4096.5"] {
            assert_eq!(
                parse_size(bad),
                Err(SizeError::Fraction(bad.into())),
                "{bad:?}"
            );
        }
        assert_eq!(
            SizeError::Fraction("0.5B".into()).to_string(),
            "`0.5B` is not a whole number of bytes; give bytes without a fraction, or a larger unit (`1.5KiB`)"
        );
        assert_eq!(
            parse_size("2.0B"),
            Ok(2),
            "a whole number written with a point"
        );
        assert_eq!(parse_size("0.5KiB"), Ok(512));
    }

    #[test]
    fn rates_per_second_minute_and_hour_are_bytes_an_hour() {
        assert_eq!(parse_rate("200MiB/h"), Ok(200 << 20));
        assert_eq!(parse_rate("60MiB/min"), Ok(3600 << 20));
        assert_eq!(parse_rate("5MiB/s"), Ok(18_000 << 20));
        assert_eq!(parse_rate("1PiB/s"), Ok(3600 << 50));
        for bad in ["200MiB", "200MiB/d", "/h", "x/h"] {
            assert_eq!(
                parse_rate(bad),
                Err(RateError::NotARate(bad.into())),
                "{bad:?}"
            );
        }
    }

    /// `0.4B/h` was taken as zero bytes an hour, and then refused as `--max-memory-growth 0`,
    /// which the user never typed: every refusal of a rate or a budget quotes what was typed.
    #[test]
    fn a_refused_rate_or_budget_quotes_what_was_typed() {
        assert_eq!(
            parse_rate_budget("0.4B/h").unwrap_err(),
            "`0.4B/h` is not a rate: `0.4B` is not a whole number of bytes; give bytes without a \
             fraction, or a larger unit (`1.5KiB`)"
        );
        assert_eq!(
            parse_rate_budget("0B/h").unwrap_err(),
            "`0B/h` would fail every soak; give a budget above zero, or leave the flag out"
        );
        assert_eq!(
            parse_size_budget("0.0GiB").unwrap_err(),
            "`0.0GiB` would fail every soak; give a budget above zero, or leave the flag out"
        );
        assert_eq!(
            parse_rate_budget("3PiB/h").unwrap_err(),
            "`3PiB/h` is not a rate: `3PiB` is over 1 PiB, the largest size taken"
        );
        assert_eq!(parse_rate_budget("1B/h"), Ok(1));
        assert_eq!(parse_size_budget("1"), Ok(1));
    }

    /// The units the messages name, each with its factor.
    const UNITS: [(&str, u64); 12] = [
        ("", 1),
        ("B", 1),
        ("KiB", 1 << 10),
        ("MiB", 1 << 20),
        ("GiB", 1 << 30),
        ("TiB", 1 << 40),
        ("PiB", 1 << 50),
        ("kB", 1_000),
        ("MB", 1_000_000),
        ("GB", 1_000_000_000),
        ("TB", 1_000_000_000_000),
        ("PB", 1_000_000_000_000_000),
    ];

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// A whole number of any unit is taken exactly when it is at most 1 PiB, as the
        /// message says; over it, the refusal says so.
        #[test]
        fn whole_sizes_are_taken_up_to_the_limit_the_message_names(
            unit in proptest::sample::select(UNITS.to_vec()),
            n in 0u64..3_000_000,
            spaced in proptest::bool::ANY,
        ) {
            let (name, factor) = unit;
            let text = format!("{n}{}{name}", if spaced { " " } else { "" });
            match n.checked_mul(factor).filter(|bytes| *bytes <= 1 << 50) {
                Some(bytes) => proptest::prop_assert_eq!(parse_size(&text), Ok(bytes)),
                None => proptest::prop_assert_eq!(parse_size(&text), Err(SizeError::TooLarge(text.clone()))),
            }
        }

        /// A fraction is refused for a count of bytes, with its unit or without, and rounded to
        /// the byte in any larger unit; never a panic.
        #[test]
        fn fractions_are_refused_for_bytes_and_rounded_otherwise(
            unit in proptest::sample::select(UNITS.to_vec()),
            whole in 0u64..1000,
            tenths in 1u64..10,
        ) {
            let (name, factor) = unit;
            let text = format!("{whole}.{tenths}{name}");
            let parsed = parse_size(&text);
            if factor == 1 {
                proptest::prop_assert_eq!(parsed, Err(SizeError::Fraction(text.clone())));
            } else if let Ok(bytes) = parsed {
                let exact = (whole * 10 + tenths) as f64 / 10.0 * factor as f64;
                proptest::prop_assert!((bytes as f64 - exact).abs() <= 0.5 + exact * 1e-12);
            } else {
                // Refused only as over the limit, and only when it is: 1.2PB is, though 1PB
                // is not.
                proptest::prop_assert_eq!(parsed, Err(SizeError::TooLarge(text.clone())));
                let exact = (whole * 10 + tenths) as f64 / 10.0 * factor as f64;
                proptest::prop_assert!(exact.round() > (1u64 << 50) as f64, "{}", exact);
            }
            let rate = format!("{text}/h");
            match parse_rate_budget(&rate) {
                Ok(per_hour) => proptest::prop_assert_eq!(Ok(per_hour), parse_size(&text)),
                Err(e) => {
                    let quoted = format!("`{}`", rate);
                    proptest::prop_assert!(e.starts_with(&quoted), "{}", e);
                }
            }
        }

        /// Whatever is typed, no panic, and a refusal quotes it.
        #[test]
        fn any_text_is_a_size_or_a_refusal_that_quotes_it(text in "\\PC{0,12}") {
            match parse_size(&text) {
                Ok(bytes) => proptest::prop_assert!(bytes <= 1 << 50),
                Err(e) => {
                    let quoted = format!("`{}`", text);
                    proptest::prop_assert!(e.to_string().starts_with(&quoted), "{}", e);
                }
            }
            if let Err(e) = parse_rate_budget(&text) {
                let quoted = format!("`{}`", text);
                proptest::prop_assert!(e.starts_with(&quoted), "{}", e);
            }
        }
    }
}
