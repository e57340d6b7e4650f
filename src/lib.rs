//! unilab: user-owned CUDA MPS daemons and soak supervision on shared GPU hosts, with an
//! event-sourced record of both.
//!
//! The binary is a thin shell over [`commands::run`]; everything else lives here:
//! - [`log`]: the event log (store, codec, chain, migrations) and [`projection`]s over it;
//! - the domain: [`gpu`] (discovery, visibility mask, selectors), [`mps`] (daemons), [`soak`]
//!   (supervision, sampling, artifacts), [`snapshot`] (runtime provenance), [`process`] (identity
//!   and the only way unilab signals);
//! - [`commands`]: one module per verb group, on top of the [`cli`] definitions;
//! - [`paths`], [`mod@env`], [`tool`], [`duration`], [`output`], [`error`]: where state lives, the
//!   variables that steer unilab, external tools under timeouts, and how results are shown.
#![forbid(unsafe_code)]

pub mod cli;
pub mod commands;
pub mod diagnostic;
pub mod duration;
pub mod env;
pub mod error;
pub mod event;
pub mod gpu;
pub mod log;
pub mod mps;
pub mod output;
pub mod paths;
pub mod process;
pub mod projection;
pub mod redact;
pub mod snapshot;
pub mod soak;
pub mod time;
pub mod tool;
