//! One heartbeat line, parsed: the rules a line must keep to be a beat.
//!
//! A line is one JSON object (UTF-8, without its ending `\n`):
//! - `step`: an integer `>= 0`, required (`3.0` is not an integer);
//! - `phase`: a string of 1 to [`MAX_PHASE_CHARS`] characters and no control character,
//!   optional, [`DEFAULT_PHASE`] without it;
//! - `t`: a finite number, optional: the Unix seconds at which the step ended. Without it the
//!   beat is stamped with the time its line was read, so its step time is only as fine as the
//!   polls; a `t` later than that time is taken as it (a step does not end after it was told);
//! - any other key whose value is a number is a user number (`loss`, `samples`, `tokens`): at
//!   most [`MAX_NUMBERS`] are kept, the first in the keys' byte order, and a key longer than
//!   [`MAX_KEY_CHARS`] characters is ignored; keys whose values are not numbers are ignored.
//!
//! Anything else — not JSON, not an object, invalid UTF-8, a missing or negative or fractional
//! `step`, a `phase` that is not such a string, a `t` that is not a number, a number JSON
//! cannot hold as a double (`1e999`) — is malformed. A line of only white space is no beat and
//! no error. A repeated key takes its last value.

use std::collections::BTreeMap;

use serde_json::Value;

/// The phase of a beat that names none.
pub(crate) const DEFAULT_PHASE: &str = "train";
/// The longest phase name, in characters.
pub(crate) const MAX_PHASE_CHARS: usize = 64;
/// The most user numbers a beat keeps.
pub(crate) const MAX_NUMBERS: usize = 16;
/// The longest user number's key, in characters.
pub(crate) const MAX_KEY_CHARS: usize = 64;

/// One beat: a step of a phase that ended at `t`, and the numbers the trainer gave with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Beat {
    pub step: u64,
    pub phase: String,
    /// Unix seconds: the line's `t`, or the time the line was read.
    pub t: f64,
    /// Whether `t` came from the line (rather than from the time it was read).
    pub clocked: bool,
    pub numbers: BTreeMap<String, f64>,
}

#[cfg(test)]
impl Beat {
    /// Step `step` of `phase`, its `t` from its line, with no numbers: for the tests.
    pub(crate) fn clocked_at(step: u64, phase: &str, t: f64) -> Self {
        Self {
            step,
            phase: phase.to_owned(),
            t,
            clocked: true,
            numbers: BTreeMap::new(),
        }
    }
}

/// What a line was, when it was not a beat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Line {
    Blank,
    Malformed,
}

/// The beat `line` holds (without its `\n`), stamped `read_at` when it carries no `t`.
pub(crate) fn parse(line: &[u8], read_at: f64) -> Result<Beat, Line> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Err(Line::Blank);
    }
    let Ok(Value::Object(mut object)) = serde_json::from_slice::<Value>(line) else {
        return Err(Line::Malformed);
    };
    let step = object
        .remove("step")
        .and_then(|v| v.as_u64())
        .ok_or(Line::Malformed)?;
    let phase = match object.remove("phase") {
        None => DEFAULT_PHASE.to_owned(),
        Some(Value::String(phase)) if phase_is_well_formed(&phase) => phase,
        Some(_) => return Err(Line::Malformed),
    };
    let (t, clocked) = match object.remove("t") {
        None => (read_at, false),
        Some(v) => (
            v.as_f64()
                .filter(|t| t.is_finite())
                .ok_or(Line::Malformed)?
                .min(read_at),
            true,
        ),
    };
    let numbers = object
        .into_iter()
        .filter(|(key, _)| key.chars().count() <= MAX_KEY_CHARS)
        .filter_map(|(key, value)| Some((key, value.as_f64().filter(|v| v.is_finite())?)))
        .take(MAX_NUMBERS)
        .collect();
    Ok(Beat {
        step,
        phase,
        t,
        clocked,
        numbers,
    })
}

fn phase_is_well_formed(phase: &str) -> bool {
    !phase.is_empty()
        && phase.chars().count() <= MAX_PHASE_CHARS
        && !phase.chars().any(char::is_control)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat(line: &str) -> Result<Beat, Line> {
        parse(line.as_bytes(), 2e9)
    }

    #[test]
    fn a_bare_step_is_a_train_beat_stamped_when_read() {
        let b = beat(r#"{"step": 7}"#).unwrap();
        assert_eq!(
            (b.step, b.phase.as_str(), b.t, b.clocked),
            (7, "train", 2e9, false)
        );
        assert!(b.numbers.is_empty());
    }

    #[test]
    fn phase_time_and_numbers_are_read_and_other_values_ignored() {
        let b = beat(
            r#"{"step":3,"phase":"eval","t":1700000000.25,"loss":0.5,"tokens":4096,"note":"x","ok":true,"n":null}"#,
        )
        .unwrap();
        assert_eq!(b.phase, "eval");
        assert_eq!((b.t, b.clocked), (1_700_000_000.25, true));
        assert_eq!(
            b.numbers,
            BTreeMap::from([("loss".to_owned(), 0.5), ("tokens".to_owned(), 4096.0)])
        );
    }

    #[test]
    fn what_is_not_a_beat_is_malformed() {
        for bad in [
            "step 3",
            "[1,2]",
            "3",
            r#"{"phase":"train"}"#,
            r#"{"step":-1}"#,
            r#"{"step":1.5}"#,
            r#"{"step":3.0}"#,
            r#"{"step":"3"}"#,
            r#"{"step":18446744073709551616}"#,
            r#"{"step":1,"phase":""}"#,
            r#"{"step":1,"phase":3}"#,
            r#"{"step":1,"phase":null}"#,
            r#"{"step":1,"phase":"a\nb"}"#,
            r#"{"step":1,"t":"now"}"#,
            r#"{"step":1,"t":null}"#,
            r#"{"step":1,"loss":1e999}"#,
            r#"{"step":1}{"step":2}"#,
            r#"{"step":1"#,
        ] {
            assert_eq!(beat(bad), Err(Line::Malformed), "{bad}");
        }
        assert_eq!(
            parse(b"{\"step\":1,\"phase\":\"\xff\"}", 0.0),
            Err(Line::Malformed)
        );
        let long_phase = format!(r#"{{"step":1,"phase":"{}"}}"#, "p".repeat(65));
        assert_eq!(beat(&long_phase), Err(Line::Malformed));
        let longest = format!(r#"{{"step":1,"phase":"{}"}}"#, "é".repeat(64));
        assert_eq!(beat(&longest).unwrap().phase.chars().count(), 64);
    }

    #[test]
    fn a_step_does_not_end_after_its_line_was_read() {
        let b = parse(br#"{"step":1,"t":2000.5}"#, 1000.0).unwrap();
        assert_eq!((b.t, b.clocked), (1000.0, true));
    }

    #[test]
    fn blank_lines_are_neither_beats_nor_errors() {
        assert_eq!(beat(""), Err(Line::Blank));
        assert_eq!(beat(" \t\r"), Err(Line::Blank));
        assert!(beat("{\"step\":1}\r").is_ok());
    }

    #[test]
    fn numbers_are_bounded_in_count_and_key_length() {
        let mut line = String::from(r#"{"step":1"#);
        for i in 0..40 {
            line.push_str(&format!(r#","k{i:02}":{i}"#));
        }
        line.push_str(&format!(r#","{}":1}}"#, "a".repeat(65)));
        let b = beat(&line).unwrap();
        assert_eq!(b.numbers.len(), MAX_NUMBERS);
        assert_eq!(b.numbers.keys().next().map(String::as_str), Some("k00"));
        assert_eq!(b.numbers.keys().last().map(String::as_str), Some("k15"));
    }

    proptest::proptest! {
        #[test]
        fn no_bytes_panic_and_a_beat_keeps_its_bounds(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            if let Ok(b) = parse(&bytes, 0.0) {
                proptest::prop_assert!(phase_is_well_formed(&b.phase));
                proptest::prop_assert!(b.numbers.len() <= MAX_NUMBERS);
                proptest::prop_assert!(b.t.is_finite());
            }
        }

        #[test]
        fn a_written_beat_reads_back(step in 0u64.., phase in "[a-z_]{1,64}", t in 0.0f64..4e9, loss in -1e6f64..1e6) {
            let line = serde_json::json!({"step": step, "phase": phase, "t": t, "loss": loss}).to_string();
            let b = parse(line.as_bytes(), 4e9).unwrap();
            // serde_json reads a double to within an ulp or so of what was written.
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-15 * b.abs().max(1.0);
            proptest::prop_assert_eq!((b.step, b.phase, b.clocked), (step, phase, true));
            proptest::prop_assert!(close(b.t, t), "{} {}", b.t, t);
            proptest::prop_assert!(close(b.numbers["loss"], loss));
        }
    }
}
