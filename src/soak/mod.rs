//! Soak supervision: a long training command, its process tree, its GPUs and its progress.

pub mod artifact;
pub mod guard;
pub mod model;
pub mod progress;
pub mod redact;
pub mod sampler;
pub mod supervise;
