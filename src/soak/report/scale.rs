//! The report's axes: what a quantity's ticks are and how they read — elapsed time as `1h30m`,
//! bytes in the binary unit that suits the largest, counts on whole numbers, percent, °C, W,
//! step times in ms or s, a trainer's numbers with the digits their range needs — the same
//! rules the page's script applies when a chart is zoomed.

use serde::Serialize;

/// What a chart's values are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Unit {
    Percent,
    /// Values in bytes.
    Bytes,
    /// Values in MiB (nvidia-smi's unit).
    Mebibytes,
    Count,
    Celsius,
    Watts,
    /// A step's time: in ms while the axis stays under a second.
    Seconds,
    /// A number a trainer beats (`loss`): any value, negative too.
    Number,
}

impl Unit {
    /// The ticks of a value axis from 0 to at least `top`: at most about `room` of them, on
    /// 1, 2 or 5 times a power of ten (of 1024 for bytes), whole numbers for counts.
    pub(super) fn ticks(self, top: f64, room: usize) -> Vec<f64> {
        let top = if top.is_finite() && top > 0.0 {
            top
        } else {
            1.0
        };
        let base = self.bytes_per_unit(top);
        let scaled = top / base;
        let raw = scaled / room.max(1) as f64;
        let magnitude = 10f64.powf(raw.log10().floor());
        let mut step = [1.0, 2.0, 5.0, 10.0]
            .iter()
            .map(|m| m * magnitude)
            .find(|s| *s >= raw)
            .unwrap_or(10.0 * magnitude);
        if self == Unit::Count {
            step = step.max(1.0).round();
        }
        let step = step * base;
        let n = (top / step).ceil() as usize;
        (0..=n).map(|i| i as f64 * step).collect()
    }

    /// The ticks of a value axis from `bottom` (when below 0, else from 0) to at least `top`,
    /// at most about `room` of them, one on 0.
    pub(super) fn ticks_between(self, bottom: f64, top: f64, room: usize) -> Vec<f64> {
        if !(bottom.is_finite() && bottom < 0.0) {
            return self.ticks(top, room);
        }
        let top = if top.is_finite() { top.max(0.0) } else { 0.0 };
        let span = self.ticks(top - bottom, room);
        let step = span.get(1).copied().unwrap_or(1.0);
        let below = (-bottom / step).ceil() as usize;
        let above = (top / step).ceil() as usize;
        (0..=below + above)
            .map(|i| (i as f64 - below as f64) * step)
            .collect()
    }

    /// The factor values are divided by to read in the unit that suits `top` (1 but for sizes).
    fn bytes_per_unit(self, top: f64) -> f64 {
        match self {
            Unit::Bytes => size_unit(top).1,
            Unit::Mebibytes => size_unit(top * MIB).1 / MIB,
            _ => 1.0,
        }
    }

    /// A value as it reads on an axis whose largest value is `top`.
    pub(super) fn label(self, value: f64, top: f64) -> String {
        match self {
            Unit::Percent => format!("{}%", trimmed(value)),
            Unit::Count => trimmed(value),
            Unit::Celsius => format!("{} °C", trimmed(value)),
            Unit::Watts => format!("{} W", trimmed(value)),
            Unit::Seconds if top.abs() < 1.0 => format!("{}ms", trimmed(value * 1000.0)),
            Unit::Seconds => format!("{}s", trimmed(value)),
            Unit::Number => number(value, top),
            Unit::Bytes | Unit::Mebibytes => {
                let bytes = if self == Unit::Bytes {
                    value
                } else {
                    value * MIB
                };
                let top = if self == Unit::Bytes { top } else { top * MIB };
                let (name, per) = size_unit(top);
                format!("{} {name}", trimmed(bytes / per))
            }
        }
    }
}

const MIB: f64 = 1024.0 * 1024.0;

/// A trainer's number on an axis whose largest magnitude is `top`: the digits that range needs
/// (`0.25`, `0.0125`, `1250`), thousands and up with an SI prefix (`12.5k`, `3M`).
fn number(value: f64, top: f64) -> String {
    let top = top.abs().max(value.abs());
    for (per, prefix) in [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")] {
        if top >= 10.0 * per {
            return format!("{}{prefix}", trimmed(value / per));
        }
    }
    if value == 0.0 || top == 0.0 {
        return "0".into();
    }
    let decimals = (2 - top.log10().floor() as i32).clamp(0, 12) as usize;
    let text = format!("{value:.decimals$}");
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        &text
    };
    if text == "-0" {
        "0".into()
    } else {
        text.into()
    }
}

/// The binary unit in which `top` bytes reads as a number below 1024.
fn size_unit(top: f64) -> (&'static str, f64) {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut per = 1.0;
    let mut i = 0;
    while i + 1 < UNITS.len() && top >= per * 1024.0 {
        per *= 1024.0;
        i += 1;
    }
    (UNITS[i], per)
}

/// A number with at most two decimals and no trailing zeros: `2`, `2.5`, `0.25`.
fn trimmed(value: f64) -> String {
    let text = format!("{value:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".into()
    } else {
        text.into()
    }
}

/// The steps elapsed-time ticks may take, in seconds: round numbers of seconds, minutes, hours
/// and days. The page's script uses the same list.
pub(super) const TIME_STEPS: [f64; 21] = [
    1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0,
    10800.0, 21600.0, 43200.0, 86400.0, 172800.0, 604800.0, 2419200.0,
];

/// The ticks of the time axis from 0 to `end` seconds: at most about `room` of them.
pub(super) fn time_ticks(end: f64, room: usize) -> Vec<f64> {
    let end = if end.is_finite() && end > 0.0 {
        end
    } else {
        1.0
    };
    let raw = end / room.max(1) as f64;
    let step = TIME_STEPS
        .iter()
        .copied()
        .find(|s| *s >= raw)
        .unwrap_or_else(|| (raw / 604800.0).ceil() * 604800.0);
    let n = (end / step).floor() as usize;
    (0..=n).map(|i| i as f64 * step).collect()
}

/// An elapsed time as an axis tick reads: `0`, `45s`, `2m`, `1m30s`, `1h30m`, `2d`, `1d12h`;
/// under ten seconds with a decimal when it has one (`2.5s`). A tick's two largest units only.
pub(super) fn elapsed(seconds: f64) -> String {
    if seconds <= 0.0 {
        return "0".into();
    }
    if seconds < 10.0 && seconds.fract().abs() > 1e-9 {
        return format!("{}s", trimmed(seconds));
    }
    let secs = seconds.round() as u64;
    let parts = [
        (secs / 86_400, "d"),
        (secs % 86_400 / 3600, "h"),
        (secs % 3600 / 60, "m"),
        (secs % 60, "s"),
    ];
    let first = parts.iter().position(|(n, _)| *n > 0).unwrap_or(3);
    let mut text = String::new();
    for (n, unit) in &parts[first..(first + 2).min(parts.len())] {
        if *n > 0 || text.is_empty() {
            text.push_str(&format!("{n}{unit}"));
        }
    }
    text
}

/// A number for the page's data: four significant digits, written as short as JSON allows
/// (`101.3`, `1342e4`, `314e-5`); what a chart 200 pixels high can show and no more.
pub(super) fn compact(value: f64) -> String {
    if !value.is_finite() {
        return "null".into();
    }
    if value == value.trunc() && value.abs() < 10_000.0 {
        return format!("{}", value as i64);
    }
    let exponent = value.abs().log10().floor() as i32 - 3;
    let mut mantissa = (value / 10f64.powi(exponent)).round() as i64;
    let mut exponent = exponent;
    while mantissa != 0 && mantissa % 10 == 0 {
        mantissa /= 10;
        exponent += 1;
    }
    if mantissa == 0 {
        return "0".into();
    }
    if (0..=2).contains(&exponent) {
        return format!("{}", mantissa * 10i64.pow(exponent as u32));
    }
    let scientific = format!("{mantissa}e{exponent}");
    if exponent > 0 {
        return scientific;
    }
    let digits = (-exponent) as usize;
    let sign = if mantissa < 0 { "-" } else { "" };
    let abs = mantissa.unsigned_abs().to_string();
    let decimal = if abs.len() > digits {
        format!(
            "{sign}{}.{}",
            &abs[..abs.len() - digits],
            &abs[abs.len() - digits..]
        )
    } else {
        format!("{sign}0.{}{abs}", "0".repeat(digits - abs.len()))
    };
    if decimal.len() <= scientific.len() {
        decimal
    } else {
        scientific
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elapsed_ticks_read_as_people_say_them() {
        assert_eq!(elapsed(0.0), "0");
        assert_eq!(elapsed(2.5), "2.5s");
        assert_eq!(elapsed(45.0), "45s");
        assert_eq!(elapsed(120.0), "2m");
        assert_eq!(elapsed(90.0), "1m30s");
        assert_eq!(elapsed(5400.0), "1h30m");
        assert_eq!(elapsed(172_800.0), "2d");
        assert_eq!(elapsed(129_600.0), "1d12h");
    }

    #[test]
    fn a_two_day_soak_has_ticks_in_hours_not_seconds() {
        let ticks = time_ticks(172_800.0, 8);
        assert!(ticks.len() <= 9, "{ticks:?}");
        assert!(ticks.iter().all(|t| t % 3600.0 == 0.0), "{ticks:?}");
        assert_eq!(elapsed(ticks[1]), "6h");
    }

    #[test]
    fn counts_tick_on_whole_numbers() {
        let ticks = Unit::Count.ticks(4.0, 8);
        assert_eq!(ticks, [0.0, 1.0, 2.0, 3.0, 4.0]);
        assert!(Unit::Count.ticks(1.0, 8).iter().all(|t| t.fract() == 0.0));
    }

    #[test]
    fn sizes_read_in_the_unit_of_the_largest() {
        let top = 45_000.0; // MiB
        let ticks = Unit::Mebibytes.ticks(top, 5);
        let labels: Vec<String> = ticks
            .iter()
            .map(|t| Unit::Mebibytes.label(*t, top))
            .collect();
        assert_eq!(labels.first().unwrap(), "0 GiB");
        assert!(
            labels
                .iter()
                .all(|l| l.ends_with(" GiB") && !l.contains('.')),
            "{labels:?}"
        );
        assert_eq!(Unit::Bytes.label(13_418_496.0, 14.0 * MIB), "12.8 MiB");
        assert_eq!(Unit::Percent.label(50.0, 100.0), "50%");
        assert_eq!(Unit::Celsius.label(71.0, 80.0), "71 °C");
    }

    #[test]
    fn step_times_and_numbers_read_with_the_digits_their_axis_needs() {
        assert_eq!(Unit::Seconds.label(0.05, 0.2), "50ms");
        assert_eq!(Unit::Seconds.label(0.125, 0.2), "125ms");
        assert_eq!(Unit::Seconds.label(2.5, 8.0), "2.5s");
        assert_eq!(Unit::Number.label(0.25, 2.5), "0.25");
        assert_eq!(Unit::Number.label(0.0125, 0.05), "0.0125");
        assert_eq!(Unit::Number.label(-0.5, 2.0), "-0.5");
        assert_eq!(Unit::Number.label(1250.0, 2000.0), "1250");
        assert_eq!(Unit::Number.label(12_500.0, 40_000.0), "12.5k");
        assert_eq!(Unit::Number.label(3e6, 4e7), "3M");
        assert_eq!(Unit::Number.label(0.0, 0.05), "0");
        assert_eq!(
            Unit::Number.ticks_between(-1.0, 3.0, 4),
            [-1.0, 0.0, 1.0, 2.0, 3.0]
        );
        assert_eq!(
            Unit::Count.ticks_between(0.0, 4.0, 8),
            Unit::Count.ticks(4.0, 8)
        );
        let ticks = Unit::Number.ticks(0.05, 4);
        assert!(
            ticks.len() >= 3 && ticks[1] > 0.0 && ticks[1] < 0.05,
            "{ticks:?}"
        );
    }

    #[test]
    fn compact_numbers_keep_four_significant_digits() {
        for (value, text) in [
            (0.0, "0"),
            (42.0, "42"),
            (101.3, "101.3"),
            (13_418_496.0, "1342e4"),
            (45_000.0, "45e3"),
            (-3.0, "-3"),
            (0.003_14, "314e-5"),
            (0.5, "0.5"),
            (0.000_031_4, "314e-7"),
            (f64::NAN, "null"),
        ] {
            assert_eq!(compact(value), text, "{value}");
            if value.is_finite() {
                let back: f64 = text.parse().unwrap();
                assert!(
                    (back - value).abs() <= value.abs() * 5e-4,
                    "{value} -> {text}"
                );
            }
        }
    }
}
