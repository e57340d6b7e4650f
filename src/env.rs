//! Every environment variable unilab reads, and the defaults it falls back to.

/// Names of the environment variables unilab reads.
pub(crate) struct EnvVars;

impl EnvVars {
    /// The state root, when `--root` is not given.
    pub(crate) const UNILAB_ROOT: &'static str = "UNILAB_ROOT";
    /// XDG base directory for state; the state root defaults to `$XDG_STATE_HOME/unilab`.
    pub(crate) const XDG_STATE_HOME: &'static str = "XDG_STATE_HOME";
    /// The home directory; the state root falls back to `~/.local/state/unilab`.
    pub(crate) const HOME: &'static str = "HOME";
}

/// How often `history --follow` looks for new events, in milliseconds.
pub(crate) const FOLLOW_POLL_MS: u64 = 200;

impl EnvVars {
    /// Names the `nvidia-smi` binary explicitly.
    pub(crate) const UNILAB_NVIDIA_SMI: &'static str = "UNILAB_NVIDIA_SMI";
    /// Names the `nvidia-cuda-mps-control` binary explicitly.
    pub(crate) const UNILAB_MPS_CONTROL: &'static str = "UNILAB_MPS_CONTROL";
    /// Seconds an external tool may take before it is killed (default [`TOOL_TIMEOUT_SECS`]).
    pub(crate) const UNILAB_TOOL_TIMEOUT: &'static str = "UNILAB_TOOL_TIMEOUT";
    /// The kernel's log a soak reads for OOM kills and GPU faults (default `/dev/kmsg`); tests
    /// name a file standing in for it.
    pub(crate) const UNILAB_KMSG: &'static str = "UNILAB_KMSG";
    /// Where GPU device files are, for the evidence of a failed soak (default `/dev/nvidia`):
    /// a process holding a file whose path starts so holds a GPU.
    pub(crate) const UNILAB_GPU_DEVICE_PREFIX: &'static str = "UNILAB_GPU_DEVICE_PREFIX";
    /// The event log's size past which `soak run` warns at its start (a size: `2GiB`).
    pub(crate) const UNILAB_LOG_WARN_SIZE: &'static str = "UNILAB_LOG_WARN_SIZE";
    /// Where `soak run` writes where its CPU went, part by part (for the benchmark
    /// `supervisor_cost`); unset, nothing is kept.
    pub(crate) const UNILAB_COST_SPLIT: &'static str = "UNILAB_COST_SPLIT";
    /// The CUDA visibility mask; unilab applies it to what nvidia-smi lists.
    pub(crate) const CUDA_VISIBLE_DEVICES: &'static str = "CUDA_VISIBLE_DEVICES";
    /// CUDA's device order; `PCI_BUS_ID` makes CUDA ordinals match nvidia-smi's.
    pub(crate) const CUDA_DEVICE_ORDER: &'static str = "CUDA_DEVICE_ORDER";
    /// Where MPS clients look for a daemon's control socket.
    pub(crate) const CUDA_MPS_PIPE_DIRECTORY: &'static str = "CUDA_MPS_PIPE_DIRECTORY";
    /// Where an MPS daemon writes its logs.
    pub(crate) const CUDA_MPS_LOG_DIRECTORY: &'static str = "CUDA_MPS_LOG_DIRECTORY";
    /// The share of SMs an MPS client may use, in percent.
    pub(crate) const CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: &'static str =
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";
    /// The device memory an MPS client process may pin (`0=1G`: per device).
    pub(crate) const CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: &'static str =
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT";
    /// The user's runtime directory; MPS pipe directories go there when it is the user's.
    pub(crate) const XDG_RUNTIME_DIR: &'static str = "XDG_RUNTIME_DIR";
}

/// What launchers tell each process of a job: Slurm's variables, and torchrun's where there is
/// no Slurm.
impl EnvVars {
    pub(crate) const SLURM_JOB_ID: &'static str = "SLURM_JOB_ID";
    pub(crate) const SLURM_STEP_ID: &'static str = "SLURM_STEP_ID";
    /// How many times the job was requeued (0 or unset the first time): a job's run.
    pub(crate) const SLURM_RESTART_COUNT: &'static str = "SLURM_RESTART_COUNT";
    /// The task's rank in the step.
    pub(crate) const SLURM_PROCID: &'static str = "SLURM_PROCID";
    /// The task's rank on its node.
    pub(crate) const SLURM_LOCALID: &'static str = "SLURM_LOCALID";
    /// The name of the node Slurm runs a task on; a soak records it with its job and rank.
    pub(crate) const SLURMD_NODENAME: &'static str = "SLURMD_NODENAME";
    /// torchrun's global rank.
    pub(crate) const RANK: &'static str = "RANK";
    /// The Unix socket torch's worker server listens on, when the user set it (never unilab).
    pub(crate) const TORCH_WORKER_SERVER_SOCKET: &'static str = "TORCH_WORKER_SERVER_SOCKET";
    /// torchrun's rank on the node.
    pub(crate) const LOCAL_RANK: &'static str = "LOCAL_RANK";
    /// torchrun's run (`--rdzv-id`; `none` when not given): with the restart count, a job's run.
    pub(crate) const TORCHELASTIC_RUN_ID: &'static str = "TORCHELASTIC_RUN_ID";
    /// How many times torchrun restarted its workers.
    pub(crate) const TORCHELASTIC_RESTART_COUNT: &'static str = "TORCHELASTIC_RESTART_COUNT";
}

/// Default seconds an external tool may run.
pub(crate) const TOOL_TIMEOUT_SECS: f64 = 10.0;
/// NVIDIA's default pipe directory, which `mps status` inspects.
pub(crate) const DEFAULT_MPS_PIPE_DIRECTORY: &str = "/tmp/nvidia-mps";
/// How long `mps stop` waits after `quit`, and after SIGTERM, by default.
pub(crate) const STOP_GRACE_SECS: f64 = 5.0;
