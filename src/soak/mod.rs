//! Soak supervision: a long training command, its process tree, its GPUs and its progress.

pub mod abandon;
pub mod artifact;
pub mod guard;
pub mod progress;
pub mod sampler;
pub mod supervise;
