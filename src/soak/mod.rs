//! Soak supervision: a long training command, its process tree, its GPUs and its progress.
//!
//! The rules that decide a soak — liveness by progress, the startup and stale limits, the
//! verdict — are a pure core in `watch`. Around it: `request` (arguments to a checked spec),
//! `supervise` (the I/O shell: guard, schedule, teardown, recording), `guard` (the process
//! between supervisor and command), [`sampler`] and `progress` (what one sample reads),
//! [`artifact`] (the canonical JSON rendered from the log), `abandon` (soaks whose
//! supervisor vanished) and `archive` (finished soaks' records moved out of the live log).

pub(crate) mod abandon;
pub(crate) mod archive;
pub(crate) mod artifact;
mod capture;
pub(crate) mod console;
pub(crate) mod error;
pub(crate) mod growth;
pub(crate) mod guard;
pub(crate) mod kernel;
pub(crate) mod launch;
mod oom;
mod progress;
mod release;
pub(crate) mod report;
pub(crate) mod request;
pub(crate) mod retention;
pub(crate) mod sampler;
#[cfg_attr(
    not(test),
    expect(
        dead_code,
        reason = "the job view and `soak show` read signatures once they are wired (issue 36)"
    )
)]
pub(crate) mod signature;
pub(crate) mod supervise;
mod teardown;
pub(crate) mod trend;
pub(crate) mod watch;
mod witnesses;
