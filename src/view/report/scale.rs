//! The report's axes: what a quantity's ticks are and how they read — elapsed time as `1h30m`
//! with the clock under it (all its labels with seconds or none), sizes on round steps of a
//! binary unit and read in it (`0 / 0.5 / 1 MiB`, never `0.49 MiB` or half a byte), counts on
//! whole numbers, percent, °C, W, step times in ms or s, a trainer's numbers with the digits
//! their range needs — the same rules the page's script applies when a chart is zoomed.

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
    /// 1, 2 or 5 times a power of ten, whole numbers for counts, one of [`size_steps`] for
    /// sizes.
    pub(super) fn ticks(self, top: f64, room: usize) -> Vec<f64> {
        let top = if top.is_finite() && top > 0.0 {
            top
        } else {
            1.0
        };
        if let Some(per) = self.bytes_per_value() {
            let raw = top * per / room.max(1) as f64;
            let step = size_steps()
                .into_iter()
                .find(|s| *s >= raw)
                .unwrap_or_else(|| (raw / SIZE_UNITS[5].1).ceil() * SIZE_UNITS[5].1);
            let n = (top * per / step).ceil() as usize;
            return (0..=n).map(|i| i as f64 * step / per).collect();
        }
        let raw = top / room.max(1) as f64;
        let magnitude = 10f64.powf(raw.log10().floor());
        let mut step = [1.0, 2.0, 5.0, 10.0]
            .iter()
            .map(|m| m * magnitude)
            .find(|s| *s >= raw)
            .unwrap_or(10.0 * magnitude);
        if self == Unit::Count {
            step = step.max(1.0).round();
        }
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

    /// How many bytes a value is, for a size; `None` for any other quantity.
    fn bytes_per_value(self) -> Option<f64> {
        match self {
            Unit::Bytes => Some(1.0),
            Unit::Mebibytes => Some(MIB),
            _ => None,
        }
    }

    /// The labels of an axis's `ticks` (evenly spaced, from [`Unit::ticks`]) whose largest
    /// value is `top`: sizes in the unit their step reads round in (see [`step_unit`]), every
    /// other quantity as [`Unit::label`] reads it.
    pub(super) fn axis_labels(self, ticks: &[f64], top: f64) -> Vec<String> {
        let Some(per) = self.bytes_per_value() else {
            return ticks.iter().map(|&t| self.label(t, top)).collect();
        };
        let step = match ticks {
            [a, b, ..] => (b - a).abs(),
            [a] => a.abs(),
            [] => 0.0,
        };
        let (name, unit) = step_unit(step * per);
        ticks
            .iter()
            .map(|&t| format!("{} {name}", trimmed(t * per / unit)))
            .collect()
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

/// The binary units, each with its bytes.
const SIZE_UNITS: [(&str, f64); 6] = [
    ("B", 1.0),
    ("KiB", 1024.0),
    ("MiB", MIB),
    ("GiB", MIB * 1024.0),
    ("TiB", MIB * MIB),
    ("PiB", MIB * MIB * 1024.0),
];

/// The binary unit in which `top` bytes reads as a number below 1024.
fn size_unit(top: f64) -> (&'static str, f64) {
    SIZE_UNITS
        .iter()
        .rev()
        .find(|(_, per)| top >= *per)
        .copied()
        .unwrap_or(SIZE_UNITS[0])
}

/// The steps a size axis may take, in bytes: 1, 2, 5 … 200 of a binary unit, then 256 and 512
/// of it — a quarter and a half of the next — so that every tick reads round in the unit of its
/// step (`0 / 0.5 / 1 MiB`, `0 / 200 / 400 KiB`), and none is a fraction of a byte. The page's
/// script takes the same list.
pub(super) fn size_steps() -> Vec<f64> {
    SIZE_UNITS
        .iter()
        .flat_map(|(_, per)| {
            [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 256.0, 512.0].map(|m| m * per)
        })
        .collect()
}

/// The unit an axis of sizes `step` bytes apart reads in: the largest in which the step is a
/// whole number of quarters, at least one (512 KiB reads `0.5 MiB`; 200 KiB stays in KiB).
fn step_unit(step: f64) -> (&'static str, f64) {
    SIZE_UNITS
        .iter()
        .rev()
        .find(|(_, per)| {
            let quarters = step / per * 4.0;
            quarters >= 1.0 && (quarters - quarters.round()).abs() < 1e-6
        })
        .copied()
        .unwrap_or(SIZE_UNITS[0])
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

    /// A memory axis read `0 / 0.49 / 0.98 MiB` (steps of 500 KiB read in MiB) and the
    /// progress directory's, of a byte or two, had a `0.5 B` tick.
    #[test]
    fn size_ticks_read_round_in_their_unit_and_never_as_a_fraction_of_a_byte() {
        let labels = |unit: Unit, top: f64, room: usize| {
            let ticks = unit.ticks(top, room);
            unit.axis_labels(&ticks, *ticks.last().unwrap())
        };
        assert_eq!(
            labels(Unit::Bytes, 1_040_000.0, 4),
            ["0 MiB", "0.25 MiB", "0.5 MiB", "0.75 MiB", "1 MiB"]
        );
        assert_eq!(
            labels(Unit::Bytes, 1_400_000.0, 4),
            ["0 MiB", "0.5 MiB", "1 MiB", "1.5 MiB"]
        );
        assert_eq!(labels(Unit::Bytes, 1.0, 4), ["0 B", "1 B"]);
        assert_eq!(labels(Unit::Bytes, 0.0, 4), ["0 B", "1 B"]);
        assert_eq!(labels(Unit::Bytes, 3.0, 4), ["0 B", "1 B", "2 B", "3 B"]);
        assert_eq!(
            labels(Unit::Bytes, 600_000.0, 4),
            ["0 KiB", "200 KiB", "400 KiB", "600 KiB"]
        );
        assert_eq!(
            labels(Unit::Mebibytes, 3000.0, 4),
            ["0 GiB", "1 GiB", "2 GiB", "3 GiB"]
        );
        // Every top from a byte to a petabyte, in either unit, at any room: the ticks are whole
        // bytes, cover the top, and read as whole numbers or quarters of the unit shown.
        for unit in [Unit::Bytes, Unit::Mebibytes] {
            let per = unit.bytes_per_value().unwrap();
            let mut top = 1.0;
            while top < 1e15 {
                for room in 3..=9 {
                    let ticks = unit.ticks(top / per, room);
                    let last = *ticks.last().unwrap();
                    assert!(last * per >= top * (1.0 - 1e-12), "{top} {room}: {ticks:?}");
                    assert!(ticks.len() <= 2 * room + 2, "{top} {room}: {ticks:?}");
                    for tick in &ticks {
                        assert_eq!((tick * per).fract(), 0.0, "{top} {room}: {ticks:?}");
                    }
                    for label in unit.axis_labels(&ticks, last) {
                        let number = label.split(' ').next().unwrap();
                        let decimals = number.split_once('.').map_or("", |(_, d)| d);
                        assert!(
                            ["", "25", "5", "75"].contains(&decimals),
                            "{top} {room}: {label}"
                        );
                    }
                }
                top *= 1.37;
            }
        }
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
