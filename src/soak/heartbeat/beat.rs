//! One heartbeat line, parsed: the rules a line must keep to be a beat.
//!
//! A line is one JSON object (UTF-8, without its ending `\n`):
//! - `step`: an integer `>= 0`, required (`3.0` is not an integer);
//! - `phase`: a string of 1 to [`MAX_PHASE_CHARS`] characters and no control character,
//!   optional, [`DEFAULT_PHASE`] without it;
//! - `t`: a finite number, optional: the Unix seconds at which the step ended. Every beat is
//!   also stamped with the time its line arrived (was read, within about 10 ms of its write);
//!   whether `t` is used in its place is the run's to decide ([`super::clock`]);
//! - any other key whose value is a number is a user number (`loss`, `samples`, `tokens`): at
//!   most [`MAX_NUMBERS`] are kept, the first in the keys' byte order, and a key longer than
//!   [`MAX_KEY_CHARS`] characters is ignored; keys whose values are not numbers are ignored.
//!
//! Anything else — not JSON, not an object, invalid UTF-8, a missing or negative or fractional
//! `step`, a `phase` that is not such a string, a `t` that is not a number, a number JSON
//! cannot hold as a double (`1e999`) — is malformed. A line of only white space is no beat and
//! no error. A repeated key takes its last value.
//!
//! The rules are here; reading a line by them is [`super::parse`]'s.

use std::borrow::Cow;

pub(crate) use super::numbers::MAX_NUMBERS;
use super::numbers::Numbers;

/// The phase of a beat that names none.
pub(crate) const DEFAULT_PHASE: &str = "train";
/// The longest phase name, in characters.
pub(crate) const MAX_PHASE_CHARS: usize = 64;
/// The longest user number's key, in characters.
pub(crate) const MAX_KEY_CHARS: usize = 64;

/// One beat: a step of a phase that ended at `t`, and the numbers the trainer gave with it;
/// its phase and its numbers' keys borrowed from its line where they were spelled without
/// escapes.
#[derive(Debug, Clone, PartialEq)]
pub struct Beat<'a> {
    pub step: u64,
    pub phase: Cow<'a, str>,
    /// Unix seconds: the line's `t`, or the time the line arrived.
    pub t: f64,
    /// Whether `t` came from the line (rather than from the time it arrived).
    pub clocked: bool,
    /// Unix seconds: when the line arrived (was read).
    pub arrived: f64,
    pub numbers: Numbers<'a>,
}

impl<'a> Beat<'a> {
    /// A beat of step 0 of the default phase, at 0, with no numbers: to be parsed into.
    pub fn new() -> Self {
        Beat {
            step: 0,
            phase: Cow::Borrowed(DEFAULT_PHASE),
            t: 0.0,
            clocked: false,
            arrived: 0.0,
            numbers: Numbers::new(),
        }
    }

    /// The same beat, holding its own phase and keys.
    pub fn into_owned(self) -> Beat<'static> {
        Beat {
            step: self.step,
            phase: Cow::Owned(self.phase.into_owned()),
            t: self.t,
            clocked: self.clocked,
            arrived: self.arrived,
            numbers: self.numbers.into_owned(),
        }
    }
}

#[cfg(test)]
impl Beat<'static> {
    /// Step `step` of `phase`, its `t` from its line and arrived then, with no numbers: for
    /// the tests.
    pub(crate) fn clocked_at(step: u64, phase: &str, t: f64) -> Self {
        Self {
            step,
            phase: Cow::Owned(phase.to_owned()),
            t,
            clocked: true,
            arrived: t,
            numbers: Numbers::new(),
        }
    }

    /// Step `step` of `phase` without a `t`, arrived at `arrived`: for the tests.
    pub(crate) fn arrived_at(step: u64, phase: &str, arrived: f64) -> Self {
        Self {
            clocked: false,
            ..Self::clocked_at(step, phase, arrived)
        }
    }
}

impl Default for Beat<'_> {
    fn default() -> Self {
        Beat::new()
    }
}

/// What a line was, when it was not a beat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    Blank,
    Malformed,
}

/// What a line's object holds of `step`, `phase` and `t`, each at its last value.
#[derive(Default)]
pub(super) struct Fields<'de> {
    pub(super) step: Option<Scalar<'de>>,
    pub(super) phase: Option<Scalar<'de>>,
    pub(super) t: Option<Scalar<'de>>,
}

impl<'de> Fields<'de> {
    /// Judges these fields by the rules of a line, into `beat` (its numbers already there),
    /// which arrived at `read_at`.
    pub(super) fn judge(self, read_at: f64, beat: &mut Beat<'de>) -> Result<(), Line> {
        let step = match self.step {
            Some(Scalar::Integer(step)) => step,
            _ => return Err(Line::Malformed),
        };
        let phase = match self.phase {
            None => Cow::Borrowed(DEFAULT_PHASE),
            Some(Scalar::Text(phase)) if phase_is_well_formed(&phase) => phase,
            Some(_) => return Err(Line::Malformed),
        };
        let (t, clocked) = match self.t.as_ref().map(Scalar::as_f64) {
            None => (read_at, false),
            Some(t) => (t.filter(|t| t.is_finite()).ok_or(Line::Malformed)?, true),
        };
        beat.step = step;
        beat.phase = phase;
        beat.t = t;
        beat.clocked = clocked;
        beat.arrived = read_at;
        Ok(())
    }
}

/// The value of `step`, `phase` or `t`, as far as the rules tell them apart.
pub(super) enum Scalar<'de> {
    /// An integer `>= 0` that a `u64` holds.
    Integer(u64),
    /// Any other number.
    Number(f64),
    Text(Cow<'de, str>),
    /// `null`, a boolean, an array or an object.
    Other,
}

impl Scalar<'_> {
    pub(super) fn as_f64(&self) -> Option<f64> {
        match *self {
            Scalar::Integer(v) => Some(v as f64),
            Scalar::Number(v) => Some(v),
            Scalar::Text(_) | Scalar::Other => None,
        }
    }
}

/// Sets `kept` to `phase`, in the room it has (a phase kept from beat to beat is not
/// allocated again).
pub(super) fn keep_phase(kept: &mut String, phase: &str) {
    kept.clear();
    kept.push_str(phase);
}

pub(super) fn phase_is_well_formed(phase: &str) -> bool {
    !phase.is_empty()
        && phase.chars().count() <= MAX_PHASE_CHARS
        && !phase.chars().any(char::is_control)
}
