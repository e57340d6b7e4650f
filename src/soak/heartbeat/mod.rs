//! Heartbeats: what a trainer says of its own steps, read from outside it.
//!
//! `soak run` creates a file in the soak's runtime directory and names it in `UNILAB_HEARTBEAT`
//! (`supervise::beats` reads it as lines arrive); the trainer appends one JSON
//! line a step, when the step ends (`{"step": 41, "phase": "train", "t": 1754.2, "loss": 0.3}`;
//! the rules of a line are [`beat`]'s). Here, pure and apart from the supervisor and the log:
//! - [`reader`]: the file read as it grows, in a budget a poll and bounded memory, whatever
//!   it holds (floods, huge lines, garbage, truncation); errors counted, never fatal;
//! - [`parse`]: a line read by those rules, the common line by [`flat`] from its bytes without
//!   an allocation (its numbers held in place, [`numbers`]), any other by `serde_json`;
//! - [`clock`]: when a beat happened: its `t` where that agrees with its arrival, else the
//!   arrival;
//! - [`summary`]: what a sample records of the beats since the last, in a fixed size, and the
//!   rule that times a step (from the beat before it, of any phase, where the step number
//!   changes);
//! - [`sketch`] and [`steps`]: the whole run's steps by phase, median and p99 within 1 %;
//! - [`limits`]: `--phase-timeout` and `--step-timeout`, and whether the step running now has
//!   taken longer than its phase's limit (the phase of the last beat);
//! - [`goodput`]: the run's time split into productive (`train`) and badput buckets; a beat's
//!   interval, from the beat before it, is its phase's.
//!
//! - [`run`]: all of it for one run, as the supervisor feeds it.
//!
//! Fed in the file's order, one beat at a time (a repeat of the beat before dropped, counted):
//! [`clock::BeatClock::time`] → `StepClock::step` (inside [`summary::SampleSummary::add`],
//! which returns it) → [`steps::RunSteps::add`], and [`goodput::GoodputClock::beat`].

pub(crate) mod beat;
pub(crate) mod clock;
mod flat;
pub(crate) mod goodput;
pub(crate) mod limits;
pub(crate) mod numbers;
pub(crate) mod parse;
pub(crate) mod reader;
pub(crate) mod run;
pub(crate) mod sketch;
pub(crate) mod steps;
pub(crate) mod summary;
