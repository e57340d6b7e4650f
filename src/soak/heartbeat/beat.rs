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

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

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
///
/// The object is read straight from the bytes, its keys borrowed where they have no escapes,
/// and `step`, `phase` and `t` judged once the whole object was read (a repeated key takes its
/// last value). Values that are not kept are still read to the end, so that what JSON does not
/// allow — invalid UTF-8, `1e999`, too deep a nesting — anywhere in the line makes it malformed.
pub(crate) fn parse(line: &[u8], read_at: f64) -> Result<Beat, Line> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Err(Line::Blank);
    }
    let mut de = serde_json::Deserializer::from_slice(line);
    let fields = de
        .deserialize_map(FieldsVisitor)
        .map_err(|_| Line::Malformed)?;
    de.end().map_err(|_| Line::Malformed)?;
    let step = match fields.step {
        Some(Scalar::Integer(step)) => step,
        _ => return Err(Line::Malformed),
    };
    let phase = match fields.phase {
        None => DEFAULT_PHASE.to_owned(),
        Some(Scalar::Text(phase)) if phase_is_well_formed(&phase) => phase.into_owned(),
        Some(_) => return Err(Line::Malformed),
    };
    let (t, clocked) = match fields.t.as_ref().map(Scalar::as_f64) {
        None => (read_at, false),
        Some(t) => (
            t.filter(|t| t.is_finite())
                .ok_or(Line::Malformed)?
                .min(read_at),
            true,
        ),
    };
    let mut numbers = fields.numbers;
    while numbers.len() > MAX_NUMBERS {
        numbers.pop_last();
    }
    Ok(Beat {
        step,
        phase,
        t,
        clocked,
        numbers,
    })
}

/// What a line's object holds, each key at its last value.
struct Fields<'de> {
    step: Option<Scalar<'de>>,
    phase: Option<Scalar<'de>>,
    t: Option<Scalar<'de>>,
    /// Every user number whose key is short enough; the first [`MAX_NUMBERS`] are kept.
    numbers: BTreeMap<String, f64>,
}

struct FieldsVisitor;

impl<'de> Visitor<'de> for FieldsVisitor {
    type Value = Fields<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = Fields {
            step: None,
            phase: None,
            t: None,
            numbers: BTreeMap::new(),
        };
        while let Some(Key(key)) = map.next_key()? {
            match &*key {
                "step" => fields.step = Some(map.next_value()?),
                "phase" => fields.phase = Some(map.next_value()?),
                "t" => fields.t = Some(map.next_value()?),
                _ => {
                    let UserValue(number) = map.next_value()?;
                    if key.chars().count() > MAX_KEY_CHARS {
                        continue;
                    }
                    match number.filter(|v| v.is_finite()) {
                        Some(v) => {
                            fields.numbers.insert(key.into_owned(), v);
                        }
                        // The key's last value is not a number: it has none.
                        None => {
                            fields.numbers.remove(&*key);
                        }
                    }
                }
            }
        }
        Ok(fields)
    }
}

/// An object's key, borrowed from the line when it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// The value of `step`, `phase` or `t`, as far as the rules tell them apart.
enum Scalar<'de> {
    /// An integer `>= 0` that a `u64` holds.
    Integer(u64),
    /// Any other number.
    Number(f64),
    Text(Cow<'de, str>),
    /// `null`, a boolean, an array or an object.
    Other,
}

impl Scalar<'_> {
    fn as_f64(&self) -> Option<f64> {
        match *self {
            Scalar::Integer(v) => Some(v as f64),
            Scalar::Number(v) => Some(v),
            Scalar::Text(_) | Scalar::Other => None,
        }
    }
}

impl<'de> Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ScalarVisitor;
        impl<'de> Visitor<'de> for ScalarVisitor {
            type Value = Scalar<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Scalar::Integer(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(u64::try_from(v).map_or(Scalar::Number(v as f64), Scalar::Integer))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(Scalar::Number(v))
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Scalar::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Scalar::Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Scalar::Text(Cow::Owned(v)))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Scalar::Other)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Scalar::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                Skip.visit_seq(seq).map(|Skip| Scalar::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                Skip.visit_map(map).map(|Skip| Scalar::Other)
            }
        }
        d.deserialize_any(ScalarVisitor)
    }
}

/// A user key's value: its number, or none when it is not a number.
struct UserValue(Option<f64>);

impl<'de> Deserialize<'de> for UserValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct UserValueVisitor;
        impl<'de> Visitor<'de> for UserValueVisitor {
            type Value = UserValue;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(UserValue(Some(v as f64)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(UserValue(Some(v as f64)))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(UserValue(Some(v)))
            }
            fn visit_borrowed_str<E: de::Error>(self, _: &'de str) -> Result<Self::Value, E> {
                Ok(UserValue(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(UserValue(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(UserValue(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(UserValue(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                Skip.visit_seq(seq).map(|Skip| UserValue(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                Skip.visit_map(map).map(|Skip| UserValue(None))
            }
        }
        d.deserialize_any(UserValueVisitor)
    }
}

/// Any JSON value, read to its end and dropped. Not [`de::IgnoredAny`]: `serde_json` skips
/// that without checking its strings' UTF-8 or its numbers' range, and without a depth limit,
/// where a beat's line must be JSON throughout.
struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Skip)
    }
}

impl<'de> Visitor<'de> for Skip {
    type Value = Skip;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
        while let Some(Skip) = seq.next_element()? {}
        Ok(Skip)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
        while let Some((Skip, Skip)) = map.next_entry()? {}
        Ok(Skip)
    }
}

fn phase_is_well_formed(phase: &str) -> bool {
    !phase.is_empty()
        && phase.chars().count() <= MAX_PHASE_CHARS
        && !phase.chars().any(char::is_control)
}

#[cfg(test)]
#[path = "beat_agreement.rs"]
mod agreement;

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

    #[test]
    fn a_repeated_key_takes_its_last_value() {
        let b = beat(r#"{"step":"x","step":2,"loss":1,"loss":"x","acc":"x","acc":0.5}"#).unwrap();
        assert_eq!(b.step, 2);
        assert_eq!(b.numbers, BTreeMap::from([("acc".to_owned(), 0.5)]));
        assert_eq!(beat(r#"{"step":1,"step":"x"}"#), Err(Line::Malformed));
        assert_eq!(
            beat(r#"{"step":1,"phase":"a","phase":3}"#),
            Err(Line::Malformed)
        );
        assert_eq!(
            beat(r#"{"step":1,"phase":3,"phase":"a"}"#).unwrap().phase,
            "a"
        );
        // Keys are read with their escapes undone.
        let b = beat(r#"{"st\u0065p":4,"\u0074":1.5,"k\"q":1}"#).unwrap();
        assert_eq!((b.step, b.t), (4, 1.5));
        assert_eq!(b.numbers, BTreeMap::from([("k\"q".to_owned(), 1.0)]));
    }

    #[test]
    fn the_numbers_kept_are_the_first_keys_whatever_their_order_in_the_line() {
        let mut line = String::from(r#"{"step":1"#);
        for i in (0..20).rev() {
            line.push_str(&format!(r#","k{i:02}":{i}"#));
        }
        // A key whose last value is no number takes no place.
        line.push_str(r#","k03":null}"#);
        let b = beat(&line).unwrap();
        let keys: Vec<&str> = b.numbers.keys().map(String::as_str).collect();
        let mut expected: Vec<String> = (0..17)
            .filter(|&i| i != 3)
            .map(|i| format!("k{i:02}"))
            .collect();
        expected.sort();
        assert_eq!(keys, expected);
    }

    #[test]
    fn what_json_does_not_allow_is_malformed_even_in_an_ignored_value() {
        for bad in [
            r#"{"step":1,"x":[1e999]}"#,
            r#"{"step":1,"x":{"y":"\ud800"}}"#,
            r#"{"\ud800":1,"step":1}"#,
            r#"{"step":1,"x":[1,]}"#,
        ] {
            assert_eq!(beat(bad), Err(Line::Malformed), "{bad}");
        }
        assert_eq!(
            parse(b"{\"step\":1,\"x\":[\"\xff\"]}", 0.0),
            Err(Line::Malformed)
        );
        let deep = |n: usize| format!(r#"{{"step":1,"x":{}{}}}"#, "[".repeat(n), "]".repeat(n));
        assert!(beat(&deep(100)).is_ok());
        assert_eq!(beat(&deep(200)), Err(Line::Malformed));
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
