//! Values for the fixed forms' fields: a new one at each call.

use crate::process::ProcessIdentity;

/// A new value at each call, so that no two fields of one form hold the same: two fields
/// swapped change the form's bytes. Each form starts its own, so that a change to one form's
/// parts changes no other form's bytes.
pub(super) struct Fresh(u64);

impl Fresh {
    pub(super) fn new() -> Self {
        Fresh(0)
    }

    pub(super) fn u64(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }

    pub(super) fn u32(&mut self) -> u32 {
        u32::try_from(self.u64()).unwrap_or(u32::MAX)
    }

    pub(super) fn u8(&mut self) -> u8 {
        u8::try_from(self.u64()).unwrap_or(u8::MAX)
    }

    pub(super) fn i64(&mut self) -> i64 {
        i64::try_from(self.u64()).unwrap_or(i64::MAX)
    }

    pub(super) fn i32(&mut self) -> i32 {
        i32::try_from(self.u64()).unwrap_or(i32::MAX)
    }

    /// Not a whole number: its bytes are not those of one.
    pub(super) fn f64(&mut self) -> f64 {
        f64::from(self.u32()) + 0.25
    }

    pub(super) fn f32(&mut self) -> f32 {
        f32::from(self.u8()) + 0.5
    }

    /// Alternates, from `true`.
    pub(super) fn bool(&mut self) -> bool {
        self.u64() % 2 == 1
    }

    pub(super) fn char(&mut self) -> char {
        char::from(b'A' + self.u8() % 26)
    }

    pub(super) fn text(&mut self) -> String {
        format!("text{}", self.u64())
    }

    pub(super) fn bytes(&mut self) -> Vec<u8> {
        vec![self.u8(), self.u8()]
    }

    pub(super) fn identity(&mut self) -> ProcessIdentity {
        ProcessIdentity {
            pid: self.u32(),
            start_ticks: self.u64(),
        }
    }
}
