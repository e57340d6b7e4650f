//! The page rendered for the tests and benchmarks: of a soak gathered from a log, or of a
//! soak's record made up from a few figures ([`Sketch`]).

use crate::read::sketch::Sketch;
use crate::read::stream::Gathered;
use crate::view::report::{Charts, Extras};

/// The page of a soak gathered from the log, as `soak report` makes it (its command lines
/// masked), with the figures `extras` adds.
pub fn render_gathered(gathered: Gathered, charts: Charts, extras: &Extras) -> String {
    super::render(&gathered.record.masked(), charts, extras)
}

/// The page of the soak `sketch` makes up.
pub fn render_sketch(sketch: &Sketch, charts: Charts, extras: &Extras) -> String {
    super::render(&sketch.record(), charts, extras)
}
