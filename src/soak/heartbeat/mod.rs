//! Heartbeats: what a trainer says of its own steps, read from outside it.
//!
//! `soak run` creates a file and names it in `UNILAB_HEARTBEAT`; the trainer appends one JSON
//! line a step (the rules of a line: [`beat`]). Here, apart from the supervisor and the log:
//! - [`reader`]: the file read as it grows, bounded in memory and in work a poll;

pub(crate) mod beat;
pub(crate) mod limits;
pub(crate) mod reader;
pub(crate) mod sketch;
pub(crate) mod steps;
pub(crate) mod summary;
