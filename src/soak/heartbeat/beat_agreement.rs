//! The beat parser checked against the one it replaced, which read a line into a
//! [`serde_json::Value`]: on generated lines, both say the same.

use proptest::prelude::{Just, Strategy, prop_oneof};

use super::*;

/// The parser this module had before, through a [`serde_json::Value`]: what [`parse`] must
/// agree with.
fn parse_through_value(line: &[u8], read_at: f64) -> Result<Beat<'static>, Line> {
    use serde_json::Value;
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
                .ok_or(Line::Malformed)?,
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
        phase: Cow::Owned(phase),
        t,
        clocked,
        arrived: read_at,
        numbers,
    })
}

/// Stands for a byte that is not UTF-8 in the generated lines.
const NOT_UTF8: &str = "@BAD@";

/// A key as the line spells it, quotes included.
fn key() -> impl Strategy<Value = String> {
    let quoted = |k: &str| format!("\"{k}\"");
    prop_oneof![
        3 => Just(quoted("step")),
        2 => Just(quoted("phase")),
        2 => Just(quoted("t")),
        1 => Just(quoted("st\\u0065p")),
        1 => Just(quoted("\\u0074")),
        6 => (0..24u32).prop_map(move |i| quoted(&format!("k{i:02}"))),
        3 => "[a-z]{1,3}".prop_map(move |k| quoted(&k)),
        1 => Just(quoted(r#"k\"q"#)),
        1 => Just(quoted(r"k\\n")),
        1 => Just(quoted(r"\u00e9t\u00e9")),
        1 => Just(quoted(r"\ud800")),
        1 => Just(quoted(&format!("k{NOT_UTF8}"))),
        1 => (62..67usize).prop_map(move |n| quoted(&"a".repeat(n))),
        1 => (62..67usize).prop_map(move |n| quoted(&"é".repeat(n))),
        1 => (62..67usize).prop_map(move |n| quoted(&format!("{}\\u00e9", "a".repeat(n)))),
    ]
}

/// A value as the line spells it.
fn value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        4 => (0u64..1000).prop_map(|v| v.to_string()),
        1 => proptest::num::u64::ANY.prop_map(|v| v.to_string()),
        1 => proptest::num::i64::ANY.prop_map(|v| v.to_string()),
        3 => (-1e9f64..1e9).prop_map(|v| v.to_string()),
        1 => proptest::num::f64::NORMAL.prop_map(|v| format!("{v:e}")),
        1 => proptest::sample::select(vec![
            "-0", "-1", "3.0", "1e2", "1e999", "-1e999", "1.5", "1e-400",
            "18446744073709551615", "18446744073709551616", "-9223372036854775809",
            "true", "false", "null", "01", "+1", "NaN",
        ])
        .prop_map(str::to_owned),
        3 => number(),
        3 => "[a-z]{0,3}".prop_map(|v| format!("\"{v}\"")),
        1 => proptest::sample::select(vec![
            r#""tr\u0061in""#, r#""a\nb""#, r#""\u0007""#, r#""\ud800""#, r#""\ud83d\ude00""#,
            r#""é""#, r#""\x""#,
        ])
        .prop_map(str::to_owned),
        1 => Just(format!("\"a{NOT_UTF8}\"")),
        1 => (63..66usize).prop_map(|n| format!("\"{}\"", "p".repeat(n))),
        1 => (63..66usize).prop_map(|n| format!("\"{}\"", "é".repeat(n))),
        1 => (126..130usize).prop_map(|n| format!("{}{}", "[".repeat(n), "]".repeat(n))),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4)
                .prop_map(|v| format!("[{}]", v.join(","))),
            proptest::collection::vec((key(), inner), 0..4).prop_map(|fields| {
                let fields: Vec<String> = fields
                    .into_iter()
                    .map(|(k, v)| format!("{k}:{v}"))
                    .collect();
                format!("{{{}}}", fields.join(","))
            }),
        ]
    })
}

/// A number as JSON spells it, or nearly: a sign, up to 25 digits before and after a point,
/// an exponent of up to 4 digits, and the edges of what `serde_json` reads one way or another
/// (a `u64`'s overflow, powers past 10^22, a leading zero, a point without digits).
fn number() -> impl Strategy<Value = String> {
    let digits = |n: std::ops::Range<usize>| proptest::collection::vec(0u8..10, n);
    let spelled = (
        proptest::bool::weighted(0.3),
        digits(1..26),
        proptest::option::weighted(0.6, digits(0..26)),
        proptest::option::weighted(
            0.4,
            (
                proptest::sample::select(vec!["e", "E", "e+", "e-", "E-"]),
                digits(0..5),
            ),
        ),
    )
        .prop_map(|(negative, whole, fraction, exponent)| {
            let text = |d: &[u8]| d.iter().map(|d| char::from(b'0' + d)).collect::<String>();
            let mut n = String::from(if negative { "-" } else { "" });
            n.push_str(&text(&whole));
            if let Some(fraction) = fraction {
                n.push('.');
                n.push_str(&text(&fraction));
            }
            if let Some((e, power)) = exponent {
                n.push_str(e);
                n.push_str(&text(&power));
            }
            n
        });
    prop_oneof![
        4 => spelled,
        1 => proptest::sample::select(vec![
            "0", "-0", "-0.0", "0e0", "1E5", "1e+5", "1e-5", "0.1", "1.e5", "1.", ".5", "-",
            "1e", "1e+", "0.30000000000000004", "9007199254740993", "9007199254740993.0",
            "1e22", "1e23", "1e-22", "1e-23", "1.7976931348623157e308", "5e-324",
            "123.456e-20", "-00", "2.5E-3", "18446744073709551615.5", "184467440737095516150",
        ])
        .prop_map(str::to_owned),
    ]
}

/// A key and value that keep a line a beat (but for a `phase` or `t` of the wrong kind),
/// so that many lines are beats: repeated keys, numbers and not, long keys, escapes.
fn clean_field() -> impl Strategy<Value = (String, String)> {
    let quoted = |k: &str| format!("\"{k}\"");
    let key = prop_oneof![
        8 => (0..24u32).prop_map(move |i| quoted(&format!("k{i:02}"))),
        2 => "[a-z]{1,2}".prop_map(move |k| quoted(&k)),
        1 => Just(quoted("phase")),
        1 => Just(quoted("t")),
        1 => Just(quoted(r"k\u0030\n")),
        1 => (62..67usize).prop_map(move |n| quoted(&"é".repeat(n))),
    ];
    let value = prop_oneof![
        4 => (0u64..1000).prop_map(|v| v.to_string()),
        3 => (-1e9f64..1e9).prop_map(|v| v.to_string()),
        1 => proptest::num::i64::ANY.prop_map(|v| v.to_string()),
        2 => number(),
        2 => "[a-z]{1,3}".prop_map(|v| format!("\"{v}\"")),
        1 => proptest::sample::select(vec!["null", "true", "[1,\"a\"]", "{\"k00\":1}"])
            .prop_map(str::to_owned),
    ];
    (key, value)
}

/// A line: mostly an object with a valid step somewhere in it, sometimes anything.
fn line() -> impl Strategy<Value = Vec<u8>> {
    let object = (
        prop_oneof![
            1 => proptest::collection::vec((key(), value()), 0..30),
            2 => proptest::collection::vec(clean_field(), 0..40),
        ],
        proptest::option::weighted(
            0.8,
            (0u64..1000, proptest::sample::select(vec![0usize, 1, 3, 40])),
        ),
        proptest::sample::select(vec!["", " ", "\t", "\r", "\n ", "\x0c"]),
        proptest::sample::select(vec!["", " ", "\r", " x", ",", "{}"]),
    )
        .prop_map(|(mut fields, step, before, after)| {
            if let Some((step, at)) = step {
                let at = at.min(fields.len());
                fields.insert(at, ("\"step\"".to_owned(), step.to_string()));
            }
            let fields: Vec<String> = fields
                .into_iter()
                .map(|(k, v)| format!("{k} : {v}"))
                .collect();
            format!("{before}{{{}}}{after}", fields.join(","))
        });
    prop_oneof![8 => object, 1 => value()].prop_map(|line| {
        let mut bytes = Vec::new();
        for (i, piece) in line.split(NOT_UTF8).enumerate() {
            if i > 0 {
                bytes.push(0xff);
            }
            bytes.extend_from_slice(piece.as_bytes());
        }
        bytes
    })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

    /// The common line's reader, where it reads a line at all, reads it as `serde_json` does.
    #[test]
    fn the_flat_reader_agrees_with_serde_json(line in line(), read_at in 0.0f64..2e9) {
        let mut flat = Beat::new();
        if let Some(fields) = super::flat::read(&line, &mut flat.numbers) {
            let flat = fields.judge(read_at, &mut flat).map(|()| flat);
            let mut full = Beat::new();
            let full = read_any(&line, &mut full.numbers)
                .and_then(|fields| fields.judge(read_at, &mut full))
                .map(|()| full);
            proptest::prop_assert_eq!(
                flat,
                full,
                "{}",
                String::from_utf8_lossy(&line)
            );
        }
    }

    #[test]
    fn parse_agrees_with_the_parser_through_a_value(line in line(), read_at in 0.0f64..2e9) {
        let expected = parse_through_value(&line, read_at);
        proptest::prop_assert_eq!(
            parse(&line, read_at),
            expected,
            "{}",
            String::from_utf8_lossy(&line)
        );
    }
}
