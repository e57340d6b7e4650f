//! Soak supervision: a long training command, its process tree, its GPUs and its progress.
//!
//! The rules that decide a soak — liveness by progress, the startup and stale limits, the
//! verdict — are a pure core in `watch`. Around it:
//! - running one: `request` (a [`SoakRequest`], in the soak's own types, checked into the spec
//!   a soak runs from: its job and rank decided, its job joined),
//!   `supervise` (the I/O shell: its phases, schedule, recording, the child, the status line),
//!   `guard` (the process between supervisor and command), `launch` (where the soak sits in a
//!   launcher's job: Slurm's or torchrun's ranks), `console` (the terminal it shares with the
//!   command), `retention` (warnings about the room its record needs), `runtime` (its
//!   node-local directory, where the heartbeat file goes);
//! - what a sample reads: [`sampler`] (the tree from `/proc`, the GPUs), `progress` (the
//!   progress directory's signature) and [`heartbeat`] (the trainer's own beats: its steps,
//!   phases and goodput, from the file `UNILAB_HEARTBEAT` names);
//! - judging it: `growth` and `trend` (memory growth by a robust slope), `release` (whether
//!   its GPUs came back), `error` (the soak commands' errors);
//! - what explains a failure: `capture` (each process's threads, stacks and wait channels
//!   before the first signal), `kernel` (the memory cgroup, kernel stacks),
//!   `oom` (the OOM killer's victims), `witnesses` (what watches from outside the tree: the
//!   kernel's log), `teardown` (which processes are the soak's, and how they are stopped);
//! - what is left: [`artifact`] (where the artifact and the report go, checked before and
//!   written atomically after; what they hold is rendered by the read layer, `read` and `view`,
//!   which the supervisor is handed and never imports), [`metrics`] (the running soak as
//!   Prometheus text, for `--metrics-file`), `abandon` (soaks whose supervisor vanished), `ended`
//!   (an abandoned soak's end, as every view has it) and `archive` (finished soaks' records
//!   moved out of the live log).

pub(crate) mod abandon;
pub(crate) mod archive;
pub(crate) mod artifact;
mod capture;
pub(crate) mod console;
mod cost;
pub(crate) mod ended;
pub(crate) mod error;
mod flight;
pub(crate) mod growth;
pub(crate) mod guard;
pub(crate) mod heartbeat;
pub(crate) mod kernel;
pub(crate) mod launch;
pub(crate) mod metrics;
mod oom;
mod progress;
mod release;
pub(crate) mod request;
pub(crate) mod retention;
mod runtime;
pub(crate) mod sampler;
pub(crate) mod supervise;
mod teardown;
pub(crate) mod trend;
pub(crate) mod watch;
mod witnesses;

pub(crate) use request::SoakRequest;
