//! Soak supervision: a long training command, its process tree, its GPUs and its progress.

pub mod model;
