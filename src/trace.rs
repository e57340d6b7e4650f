//! `-v` detail: what unilab is doing, on standard error, from wherever it is done — each
//! external tool call with its duration and exit, the steps of stopping a daemon, the event log
//! and how long its commits take. `-vv` adds what a soak does every sample.
//!
//! The level is set once, from the command line, before any command runs.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use crate::style::{Palette, Tone};

static LEVEL: AtomicU8 = AtomicU8::new(0);
static COLOUR: AtomicBool = AtomicBool::new(false);

/// Detail of every step (`-v`).
pub(crate) const STEPS: u8 = 1;
/// Detail of every sample of a soak as well (`-vv`).
pub(crate) const SAMPLES: u8 = 2;

pub(crate) fn init(level: u8, palette: Palette) {
    LEVEL.store(level, Ordering::Relaxed);
    COLOUR.store(palette.is_on(), Ordering::Relaxed);
}

pub(crate) fn enabled(level: u8) -> bool {
    LEVEL.load(Ordering::Relaxed) >= level
}

/// One line of detail; callers check [`enabled`] first (the [`detail!`] macro does).
pub(crate) fn emit(args: std::fmt::Arguments<'_>) {
    let palette = Palette::colored(COLOUR.load(Ordering::Relaxed));
    let text = crate::text::composed(&args.to_string(), &[]).into_owned();
    let _ = writeln!(std::io::stderr(), "{}", palette.paint(Tone::Aside, &text));
}

/// `detail!(LEVEL, "format", args...)`: one line of `-v` detail, formatted only when shown.
macro_rules! detail {
    ($level:expr, $($arg:tt)*) => {
        if $crate::trace::enabled($level) {
            $crate::trace::emit(format_args!($($arg)*))
        }
    };
}
pub(crate) use detail;
