//! A heartbeat line read by the rules of [`super::beat`]: the common line by [`super::flat`],
//! without an allocation, any other by `serde_json`, straight from its bytes.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use super::beat::{Beat, Fields, Line, MAX_KEY_CHARS, MAX_NUMBERS, Scalar};
#[cfg(test)]
use super::beat::{DEFAULT_PHASE, phase_is_well_formed};
use super::flat;
use super::numbers::Numbers;

/// The beat `line` holds (without its `\n`), arrived at `read_at` (its `t` too when it carries
/// none).
///
/// The common line — a flat object of numbers and plain strings — is read by [`flat`] without
/// an allocation; any other is read by `serde_json` straight from the bytes, its keys borrowed
/// where they have no escapes. Either way `step`, `phase` and `t` are judged once the whole
/// object was read (a repeated key takes its last value). Values that are not kept are still
/// read to the end, so that what JSON does not allow — invalid UTF-8, `1e999`, too deep a
/// nesting — anywhere in the line makes it malformed.
pub fn parse(line: &[u8], read_at: f64) -> Result<Beat<'_>, Line> {
    let mut beat = Beat::new();
    parse_into(line, read_at, &mut beat).map(|()| beat)
}

/// [`parse`], into `beat` (whose numbers it replaces): a beat is built where it is used, not
/// moved there (with its numbers, it is some 600 bytes).
pub(crate) fn parse_into<'a>(
    line: &'a [u8],
    read_at: f64,
    beat: &mut Beat<'a>,
) -> Result<(), Line> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Err(Line::Blank);
    }
    beat.numbers.clear();
    let fields = match flat::read(line, &mut beat.numbers) {
        Some(fields) => fields,
        None => {
            beat.numbers.clear();
            read_any(line, &mut beat.numbers)?
        }
    };
    fields.judge(read_at, beat)
}

/// Any line, by `serde_json`; its numbers into `numbers`.
pub(super) fn read_any<'a>(line: &'a [u8], numbers: &mut Numbers<'a>) -> Result<Fields<'a>, Line> {
    let mut de = serde_json::Deserializer::from_slice(line);
    let (fields, all) = de
        .deserialize_map(FieldsVisitor)
        .map_err(|_| Line::Malformed)?;
    de.end().map_err(|_| Line::Malformed)?;
    for (key, value) in all.into_iter().take(MAX_NUMBERS) {
        numbers.set(key, value);
    }
    Ok(fields)
}

struct FieldsVisitor;

/// Every user number, to keep the first keys whatever their order in the line.
type AllNumbers<'de> = BTreeMap<Cow<'de, str>, f64>;

impl<'de> Visitor<'de> for FieldsVisitor {
    type Value = (Fields<'de>, AllNumbers<'de>);

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = Fields::default();
        let mut numbers = AllNumbers::new();
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
                            numbers.insert(key, v);
                        }
                        // The key's last value is not a number: it has none.
                        None => {
                            numbers.remove(&*key);
                        }
                    }
                }
            }
        }
        Ok((fields, numbers))
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

#[cfg(test)]
#[path = "beat_agreement.rs"]
mod agreement;

#[cfg(test)]
mod tests {
    use super::*;

    fn beat(line: &str) -> Result<Beat<'_>, Line> {
        parse(line.as_bytes(), 2e9)
    }

    #[test]
    fn a_bare_step_is_a_train_beat_stamped_when_read() {
        let b = beat(r#"{"step": 7}"#).unwrap();
        assert_eq!(
            (b.step, &*b.phase, b.t, b.clocked),
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
            Numbers::from_iter([("loss", 0.5), ("tokens", 4096.0)])
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

    /// The line's `t` is kept as written, beside when it arrived: whether it is believed is
    /// the run's to say (a `t` clamped to the arrival here hid a clock 30 s ahead).
    #[test]
    fn a_beat_keeps_its_t_as_written_and_when_it_arrived() {
        let b = parse(br#"{"step":1,"t":2000.5}"#, 1000.0).unwrap();
        assert_eq!((b.t, b.clocked, b.arrived), (2000.5, true, 1000.0));
        let b = parse(br#"{"step":1}"#, 1000.0).unwrap();
        assert_eq!((b.t, b.clocked, b.arrived), (1000.0, false, 1000.0));
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
        assert_eq!(b.numbers.iter().next().map(|(k, _)| k), Some("k00"));
        assert_eq!(b.numbers.iter().last().map(|(k, _)| k), Some("k15"));
    }

    #[test]
    fn a_repeated_key_takes_its_last_value() {
        let b = beat(r#"{"step":"x","step":2,"loss":1,"loss":"x","acc":"x","acc":0.5}"#).unwrap();
        assert_eq!(b.step, 2);
        assert_eq!(b.numbers, Numbers::from_iter([("acc", 0.5)]));
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
        assert_eq!(b.numbers, Numbers::from_iter([("k\"q", 1.0)]));
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
        let keys: Vec<&str> = b.numbers.iter().map(|(k, _)| k).collect();
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
            proptest::prop_assert_eq!((b.step, &*b.phase, b.clocked), (step, &*phase, true));
            proptest::prop_assert!(close(b.t, t), "{} {}", b.t, t);
            proptest::prop_assert!(close(b.numbers.get("loss").unwrap(), loss));
        }
    }
}
