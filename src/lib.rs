//! unilab: user-owned CUDA MPS daemons and soak supervision on shared GPU hosts, with an
//! event-sourced record of both.
//!
//! The binary is a thin shell over [`run`]. The layers, each depending only on those below it:
//! - `commands` (one module per verb group, on top of the `cli` definitions), `output`, [`error`];
//! - the domain: `mps` (daemons), [`soak`] (supervision, sampling, artifacts), `snapshot`
//!   (runtime provenance), `gpu` (nvidia-smi, visibility mask, selectors), [`paths`];
//! - [`projection`]s over the [`log`] (store, codec, chain, migrations) of [`event`]s;
//! - leaves: [`process`] (identity, and how unilab signals what it did not spawn), `tool`
//!   (external tools under one timeout), [`time`], `env`, `redact`, `duration`, [`diagnostic`].
//!
//! # Public surface
//! What tests, benchmarks and tools outside the crate use, and nothing more: the record itself
//! ([`event`], [`log`], [`projection`]), process identity, state paths, the clock, the soak
//! artifact and sampler, and what the binary needs ([`run`], [`Cli`], [`error`],
//! [`diagnostic`]). Everything else is crate-private, so the compiler reports dead code.
//!
//! # Lint policy
//! - `unsafe` is forbidden.
//! - Items are `pub(crate)` unless they are part of the public surface (`unreachable_pub`).
//! - No function over 100 lines (`clippy::too_many_lines`); CI denies every warning.
#![forbid(unsafe_code)]
#![warn(unreachable_pub, clippy::too_many_lines)]

mod cli;
mod commands;
pub mod diagnostic;
mod duration;
mod env;
pub mod error;
pub mod event;
mod gpu;
pub mod log;
mod mps;
mod output;
pub mod paths;
pub mod process;
pub mod projection;
mod redact;
mod snapshot;
pub mod soak;
pub mod style;
mod text;
pub mod time;
mod tool;
mod trace;

pub use cli::Cli;
pub use commands::run;
