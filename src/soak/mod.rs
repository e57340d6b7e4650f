//! Soak supervision: a long training command, its process tree, its GPUs and its progress.
//!
//! The rules that decide a soak — liveness by progress, the startup and stale limits, the
//! verdict — are a pure core in `watch`. Around it:
//! - running one: `request` (a [`SoakRequest`], in the soak's own types, checked into the spec
//!   a soak runs from: its job and rank decided, its job joined),
//!   `supervise` (the I/O shell: its phases, schedule, recording, the child, the status line),
//!   `guard` (the process between supervisor and command), `launch` (where the soak sits in a
//!   launcher's job: Slurm's or torchrun's ranks), `console` (the terminal it shares with the
//!   command), `retention` (warnings about the room its record needs);
//! - what a sample reads: [`sampler`] (the tree from `/proc`, the GPUs), `progress` (the
//!   progress directory's signature) and [`heartbeat`] (the trainer's own beats: its steps,
//!   phases and goodput, from the file `UNILAB_HEARTBEAT` names);
//! - judging it: `growth` and `trend` (memory growth by a robust slope), `release` (whether
//!   its GPUs came back), `error` (the soak commands' errors);
//! - what explains a failure: `capture` (each process's threads, stacks and wait channels
//!   before the first signal), `signature` (a process's innermost frames as a short signature,
//!   and ranks grouped by it, the odd ones named), `straggler` (a job's ranks slower than its
//!   median step, and what their GPUs say of why), [`job_view`] (a job's ranks side by side and
//!   its verdict, for `job show`), `kernel` (the memory cgroup, kernel stacks), `oom` (the OOM
//!   killer's victims), `witnesses` (what watches from outside the tree: the kernel's log),
//!   `teardown` (which processes are the soak's, and how they are stopped);
//! - what is left: [`artifact`] (the canonical JSON rendered from the log; the frozen forms of
//!   older soaks apart), `report` (the HTML page), [`metrics`] (the running soak as Prometheus
//!   text, for `--metrics-file`), `abandon` (soaks whose supervisor vanished) and `archive`
//!   (finished soaks' records moved out of the live log).

pub(crate) mod abandon;
pub(crate) mod archive;
pub(crate) mod artifact;
mod capture;
pub(crate) mod console;
pub(crate) mod ended;
pub(crate) mod error;
pub(crate) mod growth;
pub(crate) mod guard;
pub(crate) mod heartbeat;
pub(crate) mod job_view;
pub(crate) mod kernel;
pub(crate) mod launch;
pub(crate) mod metrics;
mod oom;
mod progress;
mod release;
pub(crate) mod report;
pub(crate) mod request;
pub(crate) mod retention;
pub(crate) mod sampler;
pub(crate) mod signature;
pub(crate) mod straggler;
pub(crate) mod supervise;
mod teardown;
pub(crate) mod trend;
pub(crate) mod watch;
mod witnesses;

pub(crate) use request::SoakRequest;
