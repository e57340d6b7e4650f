//! What a soak runs against — the state paths, the log, nvidia-smi, the guard's binary, the
//! console — and how often the supervisor looks again at what it waits for.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::written::Renderers;
use crate::log::EventLog;
use crate::paths::StatePaths;
use crate::soak::console::Console;
use crate::tool::Tool;

/// How often the supervisor looks again at what it waits for.
pub(super) const LOOK_EVERY: Duration = Duration::from_millis(20);

/// What a soak runs against.
pub(crate) struct SoakContext<'a> {
    pub paths: &'a StatePaths,
    pub log: &'a EventLog,
    pub smi: Tool,
    /// Whether there is a GPU tool to run ([`crate::tool::nvidia_smi_absent`]): without one the
    /// GPUs are not read at all, and their absence is no sampler error.
    pub gpu_tool_present: bool,
    /// The binary to run as the guard (`unilab` itself).
    pub guard_program: PathBuf,
    pub runtime_json: String,
    /// Where the command's output and the live status line go.
    pub console: Arc<Console>,
    /// How the artifact and the report are rendered from the log.
    pub render: Renderers,
}
