//! The values a flight-recorder dump is made of, whichever way it was written (JSON or
//! pickle), and the budget that keeps reading one bounded: at most [`MAX_DEPTH`] levels of
//! nesting and [`MAX_VALUES`] values, [`MAX_TEXT_BYTES`] of text, however the dump shares them.

use super::DumpError;

/// The deepest nesting a dump may have; FR's own is 5 (entry, frames, frame).
pub(crate) const MAX_DEPTH: usize = 64;
/// The most values one dump may expand to (a 2000-entry ring with 30 frames an entry is
/// about 300,000).
pub(crate) const MAX_VALUES: usize = 4_000_000;
/// The most text one dump may expand to: a pickle may name one string many times.
pub(crate) const MAX_TEXT_BYTES: usize = 256 << 20;

/// One value of a dump: JSON's, or what the pickle reader builds (a tuple is a list).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<Value>),
    /// Keys in the order written; FR's are strings, but a pickle may hold any.
    Dict(Vec<(Value, Value)>),
}

impl Value {
    /// The value under a string key, for a dict.
    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(items) => items
                .iter()
                .find(|(k, _)| matches!(k, Value::Str(s) if s == key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// An integer written either way torch writes counters: `7` (pickle) or `"7"` (JSON).
    pub(crate) fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Str(s) => s.trim().parse().ok(),
            Value::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e18 => Some(*f as i64),
            _ => None,
        }
    }

    /// A key as text: `"0"` and `0` name the same group.
    pub(crate) fn key_text(&self) -> Option<String> {
        match self {
            Value::Str(s) => Some(s.clone()),
            Value::Int(i) => Some(i.to_string()),
            _ => None,
        }
    }

    pub(crate) fn as_list(&self) -> Option<&[Value]> {
        match self {
            Value::List(items) => Some(items),
            _ => None,
        }
    }
}

/// What reading a dump has spent so far.
#[derive(Debug, Default)]
pub(crate) struct Budget {
    values: usize,
    text: usize,
}

impl Budget {
    pub(crate) fn value(&mut self, depth: usize) -> Result<(), DumpError> {
        if depth > MAX_DEPTH {
            return Err(DumpError::TooDeep { limit: MAX_DEPTH });
        }
        self.values += 1;
        if self.values > MAX_VALUES {
            return Err(DumpError::TooManyValues { limit: MAX_VALUES });
        }
        Ok(())
    }

    pub(crate) fn text(&mut self, len: usize) -> Result<(), DumpError> {
        self.text = self.text.saturating_add(len);
        if self.text > MAX_TEXT_BYTES {
            return Err(DumpError::TooManyValues { limit: MAX_VALUES });
        }
        Ok(())
    }
}

/// A JSON document as [`Value`]s, within the budget.
pub(crate) fn from_json(bytes: &[u8]) -> Result<Value, DumpError> {
    // serde_json stops at 128 levels itself, so parsing cannot exhaust the stack.
    let parsed: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| DumpError::Json(e.to_string()))?;
    convert(&parsed, 0, &mut Budget::default())
}

fn convert(v: &serde_json::Value, depth: usize, budget: &mut Budget) -> Result<Value, DumpError> {
    budget.value(depth)?;
    Ok(match v {
        serde_json::Value::Null => Value::None,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => {
            budget.text(s.len())?;
            Value::Str(s.clone())
        }
        serde_json::Value::Array(items) => Value::List(
            items
                .iter()
                .map(|i| convert(i, depth + 1, budget))
                .collect::<Result<_, _>>()?,
        ),
        serde_json::Value::Object(map) => Value::Dict(
            map.iter()
                .map(|(k, v)| Ok((Value::Str(k.clone()), convert(v, depth + 1, budget)?)))
                .collect::<Result<_, DumpError>>()?,
        ),
    })
}
