//! The common heartbeat line, read straight from its bytes: one object of keys and values that
//! are numbers, strings of printable ASCII without escapes, `true`, `false` or `null` — what
//! the Python helper, `printf` and every JSON library write a step. Nothing is allocated.
//!
//! Anything else (an escape, a byte that is not printable ASCII, a nested value, a number
//! outside what is read exactly as `serde_json` reads it, more distinct numbers than a beat
//! keeps) is not judged here: [`read`] returns `None` and the line goes to the full parser,
//! which decides it. So what this reads it reads as the full parser does, value for value (a
//! property test checks that on generated lines): a number's digits are gathered into a `u64`
//! and scaled by a power of ten, `serde_json`'s own arithmetic (without its `float_roundtrip`
//! feature), for powers up to 10^22, the ones a double holds exactly.

use std::borrow::Cow;

use super::beat::{Fields, MAX_KEY_CHARS, Scalar};
use super::numbers::Numbers;

/// 10^0 to 10^22, each exact in a double.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// The fields of `line`, its numbers into `numbers`, when it is a flat object of the common
/// kind; `None` otherwise (the full parser decides, `numbers` left as they are).
pub(super) fn read<'a>(line: &'a [u8], numbers: &mut Numbers<'a>) -> Option<Fields<'a>> {
    // Checked once for the line: a string's bytes are printable ASCII, so every slice of it
    // between two of them is a `str`.
    let text = std::str::from_utf8(line).ok()?;
    let mut at = Cursor {
        text,
        bytes: line,
        at: 0,
    };
    let mut fields = Fields::default();
    at.expect(b'{')?;
    if at.peek()? == b'}' {
        at.at += 1;
    } else {
        loop {
            let key = at.string()?;
            at.expect(b':')?;
            let value = at.value()?;
            match key {
                "step" => fields.step = Some(value),
                "phase" => fields.phase = Some(value),
                "t" => fields.t = Some(value),
                _ if key.len() > MAX_KEY_CHARS => {}
                _ => match value.as_f64().filter(|v| v.is_finite()) {
                    Some(number) => {
                        if !numbers.set(Cow::Borrowed(key), number) {
                            return None; // more numbers than a beat keeps: the full parser
                        }
                    }
                    None => numbers.remove(key),
                },
            }
            match at.peek()? {
                b',' => at.at += 1,
                b'}' => {
                    at.at += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    at.skip_white_space();
    (at.at == line.len()).then_some(fields)
}

struct Cursor<'a> {
    text: &'a str,
    /// `text`'s bytes.
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn skip_white_space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte that is not white space, not taken.
    fn peek(&mut self) -> Option<u8> {
        self.skip_white_space();
        self.bytes.get(self.at).copied()
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    fn digit(&self) -> Option<u8> {
        self.bytes
            .get(self.at)
            .filter(|b| b.is_ascii_digit())
            .map(|b| b - b'0')
    }

    /// A string of printable ASCII without escapes.
    fn string(&mut self) -> Option<&'a str> {
        self.expect(b'"')?;
        let start = self.at;
        loop {
            match *self.bytes.get(self.at)? {
                b'"' => break,
                b'\\' => return None,
                b' '..=b'~' => self.at += 1,
                _ => return None,
            }
        }
        let text = self.text.get(start..self.at);
        self.at += 1;
        text
    }

    fn value(&mut self) -> Option<Scalar<'a>> {
        match self.peek()? {
            b'"' => self.string().map(|s| Scalar::Text(Cow::Borrowed(s))),
            b't' => self.word(b"true"),
            b'f' => self.word(b"false"),
            b'n' => self.word(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn word(&mut self, word: &[u8]) -> Option<Scalar<'a>> {
        let end = self.at + word.len();
        (self.bytes.get(self.at..end)? == word).then(|| {
            self.at = end;
            Scalar::Other
        })
    }

    /// Gathers the digits from here on into `significand`; how many, `None` when they overflow
    /// it. Eight at a time while eight are there.
    fn gather(&mut self, significand: &mut u64) -> Option<i32> {
        let start = self.at;
        while let Some(eight) = self
            .bytes
            .get(self.at..self.at + 8)
            .and_then(|b| eight_digits(u64::from_le_bytes(b.try_into().ok()?)))
        {
            *significand = significand.checked_mul(100_000_000)?.checked_add(eight)?;
            self.at += 8;
        }
        while let Some(digit) = self.digit() {
            *significand = significand.checked_mul(10)?.checked_add(u64::from(digit))?;
            self.at += 1;
        }
        i32::try_from(self.at - start).ok()
    }

    /// A number as `serde_json` reads it: an integer without a sign as a `u64`, any other as a
    /// double, its significand's digits gathered in a `u64` and scaled by a power of ten.
    fn number(&mut self) -> Option<Scalar<'a>> {
        let negative = self.bytes[self.at] == b'-';
        if negative {
            self.at += 1;
        }
        let mut significand: u64 = 0;
        match self.digit()? {
            0 => {
                self.at += 1;
                if self.digit().is_some() {
                    return None; // a leading zero
                }
            }
            _ => {
                self.gather(&mut significand)?;
            }
        }
        let mut exponent: i32 = 0;
        let mut fraction = false;
        if self.bytes.get(self.at) == Some(&b'.') {
            self.at += 1;
            match self.gather(&mut significand)? {
                0 => return None, // a point without digits after it
                digits => exponent = -digits,
            }
            fraction = true;
        }
        if let Some(b'e' | b'E') = self.bytes.get(self.at) {
            self.at += 1;
            let negative_exponent = match self.bytes.get(self.at) {
                Some(b'-') => {
                    self.at += 1;
                    true
                }
                Some(b'+') => {
                    self.at += 1;
                    false
                }
                _ => false,
            };
            let mut power: i32 = i32::from(self.digit()?);
            self.at += 1;
            while let Some(digit) = self.digit() {
                power = power.checked_mul(10)?.checked_add(i32::from(digit))?;
                self.at += 1;
            }
            exponent = if negative_exponent {
                exponent.checked_sub(power)?
            } else {
                exponent.checked_add(power)?
            };
            fraction = true;
        }
        if !fraction {
            return Some(if negative {
                Scalar::Number(-(significand as f64))
            } else {
                Scalar::Integer(significand)
            });
        }
        let scale = *POW10.get(usize::try_from(exponent.unsigned_abs()).ok()?)?;
        let mut value = significand as f64;
        if exponent >= 0 {
            value *= scale;
        } else {
            value /= scale;
        }
        Some(Scalar::Number(if negative { -value } else { value }))
    }
}

/// The number eight ASCII digits spell (the first in the lowest byte), `None` unless all eight
/// are digits.
fn eight_digits(chunk: u64) -> Option<u64> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    // Each byte: its high nibble 3, and adding 6 to it does not carry into the high nibble.
    let digits = (chunk & (0xF0 * ONES))
        | (((chunk.wrapping_add(0x06 * ONES)) & (0xF0 * ONES)) >> 4)
        == 0x33 * ONES;
    if !digits {
        return None;
    }
    // Pairs, then fours, then the eight: each step scales the higher half and adds.
    let chunk = chunk & (0x0F * ONES);
    let pairs = (chunk.wrapping_mul(10 << 8 | 1) >> 8) & 0x00FF_00FF_00FF_00FF;
    let fours = (pairs.wrapping_mul(100 << 16 | 1) >> 16) & 0x0000_FFFF_0000_FFFF;
    Some(fours.wrapping_mul(10_000 << 32 | 1) >> 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines unilab's Python helper, a shell's `printf` and the benchmarks write are read
    /// here, not by `serde_json`.
    #[test]
    fn the_common_lines_are_read_here() {
        for line in [
            r#"{"step": 41, "phase": "train", "t": 1754000000.123456, "loss": 0.3, "samples": 32}"#,
            r#"{"step":3}"#,
            r#" {"step": 7, "phase": "checkpoint", "ok": true, "note": null, "tag": "x"} "#,
            r#"{"step": 1, "t": 1.5e9, "lr": -3E-4, "tokens": 4096}"#,
            "{}",
        ] {
            assert!(
                read(line.as_bytes(), &mut Numbers::new()).is_some(),
                "{line}"
            );
        }
    }

    #[test]
    fn eight_digits_are_read_at_once_and_anything_else_is_not() {
        let at_once = |text: &[u8; 8]| eight_digits(u64::from_le_bytes(*text));
        assert_eq!(at_once(b"12345678"), Some(12_345_678));
        assert_eq!(at_once(b"00000000"), Some(0));
        assert_eq!(at_once(b"99999999"), Some(99_999_999));
        assert_eq!(at_once(b"00000010"), Some(10));
        for not in [
            b"1234567.",
            b"/2345678",
            b":2345678",
            b"1234567a",
            b"1234 678",
            b"\xff2345678",
        ] {
            assert_eq!(at_once(not), None, "{}", String::from_utf8_lossy(not));
        }
    }

    proptest::proptest! {
        #[test]
        fn any_eight_bytes_are_read_as_digits_only_when_they_are(bytes in proptest::array::uniform8(proptest::num::u8::ANY)) {
            let expected = bytes
                .iter()
                .all(u8::is_ascii_digit)
                .then(|| std::str::from_utf8(&bytes).unwrap().parse::<u64>().unwrap());
            proptest::prop_assert_eq!(eight_digits(u64::from_le_bytes(bytes)), expected);
        }
    }

    /// What is not of the common kind goes to the full parser, which decides it.
    #[test]
    fn the_rest_is_left_to_the_full_parser() {
        for line in [
            r#"{"st\u0065p": 1}"#,
            r#"{"step": 1, "phase": "é"}"#,
            r#"{"step": 1, "x": [1]}"#,
            r#"{"step": 1, "x": {}}"#,
            r#"{"step": 1, "x": 1e23}"#,
            r#"{"step": 18446744073709551616}"#,
            r#"{"step": 01}"#,
            r#"{"step": 1,}"#,
            r#"{"step": 1} x"#,
            r#"{"step": 1"#,
            "[1]",
        ] {
            assert!(
                read(line.as_bytes(), &mut Numbers::new()).is_none(),
                "{line}"
            );
        }
        let many: String = (0..17).map(|i| format!(r#""k{i:02}": {i}, "#)).collect();
        let line = format!("{{{many}\"step\": 1}}");
        assert!(read(line.as_bytes(), &mut Numbers::new()).is_none());
    }
}
