//! What a decode of a value would claim against the codec's limit, counted without decoding.
//!
//! bincode 2.0.1's limit ([`super::codec::MAX_RECORD_BYTES`], `with_limit`) does not count the
//! bytes a decode reads: each value claims what it may allocate, before it is read. Through
//! serde (`bincode::serde::decode_from_slice`) the claims are, from its source
//! (`de/impls.rs`, `features/impl_alloc.rs`, `features/serde/de_owned.rs`):
//! - `bool`, `u8`, `i8`, an `Option`'s tag: 1; `u16`, `i16`: 2; `u32`, `i32`, `f32`, an enum's
//!   variant index: 4; `u64`, `i64`, `f64`, `usize`, `isize`, a sequence's or map's length: 8;
//!   `u128`, `i128`: 16 — whatever the varint encoding took (one byte for a small number);
//! - a `char`: its UTF-8 length; a string or byte string: 8 for its length and 1 a byte;
//! - structs, tuples, unit values and newtypes: nothing beyond their fields.
//!
//! Claims only add up, so a value decodes within the limit exactly when its total is within
//! it. [`claimed`] counts that total with a serializer that mirrors those rules: what the log
//! checks a record against before committing it, so that no record it writes is one its own
//! reader refuses. One encoded byte claims at most [`MOST_CLAIMED_PER_BYTE`] (a one-byte
//! `u128`), which lets a short encoding skip the count.

use serde::ser::{self, Serialize};

/// The most one encoded byte can claim: a `u128` that its varint encoded in one byte. (The
/// stored types hold none; a string's or a sequence's length in one byte claims 8.)
pub(crate) const MOST_CLAIMED_PER_BYTE: usize = 16;

/// What decoding `value` claims against the limit, as bincode 2.0.1 counts it (saturating).
pub fn claimed<T: Serialize + ?Sized>(value: &T) -> usize {
    let mut counter = Counter(0);
    // The counter itself never fails; a value whose own `Serialize` fails cannot be encoded
    // either, and is refused by the encoder before its count matters.
    let _ = value.serialize(&mut counter);
    counter.0
}

struct Counter(usize);

impl Counter {
    fn add(&mut self, n: usize) {
        self.0 = self.0.saturating_add(n);
    }
}

/// The serializer's error: required by serde, never made by the counter itself.
#[derive(Debug)]
struct Never;

impl std::fmt::Display for Never {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a value could not be serialized")
    }
}

impl std::error::Error for Never {}

impl ser::Error for Never {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Never
    }
}

type Done = Result<(), Never>;

/// What a string's, a sequence's or a map's length claims, and an enum's variant index.
const LEN: usize = 8;
const VARIANT: usize = 4;

impl ser::Serializer for &mut Counter {
    type Ok = ();
    type Error = Never;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    fn serialize_bool(self, _: bool) -> Done {
        self.add(1);
        Ok(())
    }
    fn serialize_i8(self, _: i8) -> Done {
        self.add(1);
        Ok(())
    }
    fn serialize_i16(self, _: i16) -> Done {
        self.add(2);
        Ok(())
    }
    fn serialize_i32(self, _: i32) -> Done {
        self.add(4);
        Ok(())
    }
    fn serialize_i64(self, _: i64) -> Done {
        self.add(8);
        Ok(())
    }
    fn serialize_i128(self, _: i128) -> Done {
        self.add(16);
        Ok(())
    }
    fn serialize_u8(self, _: u8) -> Done {
        self.add(1);
        Ok(())
    }
    fn serialize_u16(self, _: u16) -> Done {
        self.add(2);
        Ok(())
    }
    fn serialize_u32(self, _: u32) -> Done {
        self.add(4);
        Ok(())
    }
    fn serialize_u64(self, _: u64) -> Done {
        self.add(8);
        Ok(())
    }
    fn serialize_u128(self, _: u128) -> Done {
        self.add(16);
        Ok(())
    }
    fn serialize_f32(self, _: f32) -> Done {
        self.add(4);
        Ok(())
    }
    fn serialize_f64(self, _: f64) -> Done {
        self.add(8);
        Ok(())
    }
    fn serialize_char(self, v: char) -> Done {
        self.add(v.len_utf8());
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Done {
        self.add(LEN);
        self.add(v.len());
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Done {
        self.add(LEN);
        self.add(v.len());
        Ok(())
    }
    fn serialize_none(self) -> Done {
        self.add(1);
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Done {
        self.add(1);
        value.serialize(self)
    }
    fn serialize_unit(self) -> Done {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Done {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Done {
        self.add(VARIANT);
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Done {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        value: &T,
    ) -> Done {
        self.add(VARIANT);
        value.serialize(self)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self, Never> {
        self.add(LEN);
        Ok(self)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self, Never> {
        Ok(self)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self, Never> {
        Ok(self)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, Never> {
        self.add(VARIANT);
        Ok(self)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self, Never> {
        self.add(LEN);
        Ok(self)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, Never> {
        Ok(self)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, Never> {
        self.add(VARIANT);
        Ok(self)
    }
    fn is_human_readable(&self) -> bool {
        false
    }
}

impl ser::SerializeSeq for &mut Counter {
    type Ok = ();
    type Error = Never;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Done {
        value.serialize(&mut **self)
    }
    fn end(self) -> Done {
        Ok(())
    }
}

impl ser::SerializeTuple for &mut Counter {
    type Ok = ();
    type Error = Never;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Done {
        value.serialize(&mut **self)
    }
    fn end(self) -> Done {
        Ok(())
    }
}

impl ser::SerializeTupleStruct for &mut Counter {
    type Ok = ();
    type Error = Never;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Done {
        value.serialize(&mut **self)
    }
    fn end(self) -> Done {
        Ok(())
    }
}

impl ser::SerializeTupleVariant for &mut Counter {
    type Ok = ();
    type Error = Never;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Done {
        value.serialize(&mut **self)
    }
    fn end(self) -> Done {
        Ok(())
    }
}

impl ser::SerializeMap for &mut Counter {
    type Ok = ();
    type Error = Never;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Done {
        key.serialize(&mut **self)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Done {
        value.serialize(&mut **self)
    }
    fn end(self) -> Done {
        Ok(())
    }
}

impl ser::SerializeStruct for &mut Counter {
    type Ok = ();
    type Error = Never;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, _: &'static str, value: &T) -> Done {
        value.serialize(&mut **self)
    }
    fn end(self) -> Done {
        Ok(())
    }
}

impl ser::SerializeStructVariant for &mut Counter {
    type Ok = ();
    type Error = Never;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, _: &'static str, value: &T) -> Done {
        value.serialize(&mut **self)
    }
    fn end(self) -> Done {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Serialize};

    use super::*;
    use crate::log::codec::{decodes_within, encode};

    /// A value of each kind the rules name, and what its decode claims by them.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Kind {
        Unit,
        Newtype(u8),
        Tuple(i16, u16),
        Struct { a: char, b: f32 },
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Every {
        flag: bool,
        small: (i8, u8, i16, u16, i32, u32, f32),
        wide: (i64, u64, f64, usize, isize),
        huge: (i128, u128),
        chars: (char, char, char, char),
        text: String,
        bytes: Vec<u8>,
        none: Option<u64>,
        some: Option<u64>,
        list: Vec<u32>,
        map: BTreeMap<String, u64>,
        kinds: Vec<Kind>,
        unit: (),
    }

    fn every() -> Every {
        Every {
            flag: true,
            small: (-1, 2, -3, 4, -5, 6, 7.0),
            wide: (-8, 9, 10.0, 11, -12),
            huge: (-13, 14),
            chars: ('a', 'é', '€', '𝄞'),
            text: "four".into(),
            bytes: vec![1, 2, 3],
            none: None,
            some: Some(u64::MAX),
            list: vec![0, 1, u32::MAX],
            map: BTreeMap::from([("k".into(), 1)]),
            kinds: vec![
                Kind::Unit,
                Kind::Newtype(1),
                Kind::Tuple(1, 2),
                Kind::Struct { a: 'x', b: 1.0 },
            ],
            unit: (),
        }
    }

    /// What bincode's decoder counts against its limit, rule by rule: the value decodes within
    /// exactly what it claims, and not within a byte less.
    #[test]
    fn what_a_value_claims_is_what_the_decoder_counts() {
        let expected = 1 // bool
            + (1 + 1 + 2 + 2 + 4 + 4 + 4)
            + (8 + 8 + 8 + 8 + 8)
            + (16 + 16)
            + (1 + 2 + 3 + 4) // each char's UTF-8 length
            + (8 + 4) // a string: its length, its bytes
            + (8 + 3) // a byte vector: the same
            + 1
            + (1 + 8)
            + (8 + 3 * 4)
            + (8 + (8 + 1) + 8)
            + (8 + 4 + (4 + 1) + (4 + 2 + 2) + (4 + 1 + 4));
        let value = every();
        assert_eq!(claimed(&value), expected);
        let bytes = encode(&value).unwrap();
        assert!(
            bytes.len() < expected,
            "small numbers take one byte and claim more"
        );
        assert_eq!(expected, 213, "the limits below follow the count");
        assert!(decodes_within::<Every, 213>(&bytes));
        assert!(!decodes_within::<Every, 212>(&bytes));
    }

    /// Large numbers take more bytes than they claim: counting the encoding would refuse a
    /// record the decoder takes.
    #[test]
    fn a_value_may_claim_less_than_its_encoding_takes() {
        let value = vec![u64::MAX; 100];
        let bytes = encode(&value).unwrap();
        assert_eq!(claimed(&value), 8 + 800);
        assert_eq!(bytes.len(), 1 + 900);
        assert!(decodes_within::<Vec<u64>, 808>(&bytes));
        assert!(!decodes_within::<Vec<u64>, 807>(&bytes));
    }
}
