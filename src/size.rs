//! Sizes and rates on the command line: plain bytes (`1048576`) or a number with a unit —
//! binary (`512KiB`, `512MiB`, `40GiB`, `1TiB`) or decimal (`1.5GB`, `500MB`, `2kB`) — and a rate
//! as a size per second, minute or hour (`200MiB/h`, `5MiB/s`, `60MiB/min`).

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a size; use bytes (`1048576`) or units (`512MiB`, `40GiB`, `1.5GB`), at most 1 PiB"
)]
pub(crate) struct SizeError(pub String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a rate; use a size per `s`, `min` or `h` (`200MiB/h`, `5MiB/s`, `60MiB/min`)"
)]
pub(crate) struct RateError(pub String);

/// The largest size taken: a pebibyte. Larger ones are surely typos.
const MAX_BYTES: f64 = (1u64 << 50) as f64;

/// A size in bytes.
pub(crate) fn parse_size(text: &str) -> Result<u64, SizeError> {
    let err = || SizeError(text.to_owned());
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let scale: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "TiB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "kB" | "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        _ => return Err(err()),
    };
    let value: f64 = number.parse().map_err(|_| err())?;
    let bytes = (value * scale).round();
    if !bytes.is_finite() || bytes > MAX_BYTES || (unit.trim().is_empty() && number.contains('.')) {
        return Err(err());
    }
    Ok(bytes as u64)
}

/// A rate, in bytes an hour.
pub(crate) fn parse_rate(text: &str) -> Result<u64, RateError> {
    let err = || RateError(text.to_owned());
    let (size, per) = text.trim().rsplit_once('/').ok_or_else(err)?;
    let per_hour: u64 = match per.trim() {
        "s" => 3600,
        "min" => 60,
        "h" => 1,
        _ => return Err(err()),
    };
    parse_size(size)
        .ok()
        .and_then(|bytes| bytes.checked_mul(per_hour))
        .ok_or_else(err)
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
        for bad in [
            "",
            "MiB",
            "12 parsecs",
            "-1GiB",
            "1.5",
            "2PiB",
            "1e3",
            "1..2MiB",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn rates_per_second_minute_and_hour_are_bytes_an_hour() {
        assert_eq!(parse_rate("200MiB/h"), Ok(200 << 20));
        assert_eq!(parse_rate("60MiB/min"), Ok(3600 << 20));
        assert_eq!(parse_rate("5MiB/s"), Ok(18_000 << 20));
        for bad in ["200MiB", "200MiB/d", "/h", "x/h"] {
            assert!(parse_rate(bad).is_err(), "{bad:?}");
        }
    }
}
