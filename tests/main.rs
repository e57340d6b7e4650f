//! The integration tests, as one crate: one harness (`common`), one link, one binary.
//!
//! Each module is one area, driven through the real `unilab` binary or the library's public API.

mod common;

mod archive_files;
mod codec_props;
mod collectives;
mod compact;
mod docs;
mod evidence;
mod fakes;
mod forged;
mod framework;
mod gpu_health;
mod heartbeat;
mod heartbeat_arrival;
mod heartbeat_files;
mod heartbeat_views;
mod job;
mod job_barrier;
mod job_beats;
mod job_kept;
mod job_report;
mod job_runs;
mod job_straggler;
mod job_suspect;
mod log_append_path;
mod log_archive;
mod log_cli;
mod log_concurrency;
mod log_crash;
mod migrations;
mod mps;
mod parser_props;
mod progress;
mod record_bounds;
mod record_size;
mod resources;
mod ring;
mod shown;
mod slurm;
mod slurm_job;
mod soak;
mod soak_failures;
mod soak_outputs;
mod supervisor_waits;
