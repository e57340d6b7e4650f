//! A soak sample stored against the one before it (schema 8).
//!
//! A training tree changes little between two samples: the same processes, with the same names,
//! parents and thread counts, and counters that move by small steps. A [`CompactSample`] keeps
//! what a [`Sample`] and its [`Measures`] hold apart from the processes as they are, and packs
//! the processes into bytes that say only what changed since the soak's previous sample.
//!
//! The packed bytes are part of the frozen schema; their layout is described at [`pack`].

use serde::{Deserialize, Serialize};

use super::{Measures, Sample};

/// One sample of a soak with its processes packed against the soak's previous sample.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactSample {
    /// The index of the sample the processes are packed against: the soak's previous sample.
    /// `None` when they are packed against nothing (the first sample, or one stored whole every
    /// so often so that a reader never walks far back).
    pub base: Option<u64>,
    /// The sample, its `processes` left empty.
    pub sample: Sample,
    /// Its measures, `pss_bytes` left empty.
    pub measures: Measures,
    /// Whether the measures held a proportional set size for each process.
    pub pss: bool,
    /// The processes, packed.
    pub processes: Vec<u8>,
}
