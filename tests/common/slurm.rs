//! A Slurm cluster of two nodes on this machine (`scripts/slurm-cluster.sh`): `slurmctld` and a
//! `slurmd` for `n1` and `n2`, each in its own UTS namespace, brought up for one test and down
//! (by pid) when it is dropped. `None`, with a message, where it cannot start (not root, no
//! Slurm and no apt).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::{path_with_fixtures, private_tempdir, unilab_bin};

/// A cluster brought up for one test, and brought down (by pid) when dropped. One at a time:
/// two clusters coming up at once could pick the same ports.
pub struct Cluster {
    dir: tempfile::TempDir,
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

static ONE_CLUSTER: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Cluster {
    fn script() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/slurm-cluster.sh")
    }

    /// `None` (and a message) where Slurm cannot run here.
    pub fn up() -> Option<Self> {
        let guard = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
        let dir = private_tempdir("unilab-slurm-");
        let out = Command::new(Self::script())
            .arg("up")
            .arg(dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        match out.status.code() {
            Some(0) => Some(Cluster {
                dir,
                _one_at_a_time: guard,
            }),
            Some(77) => {
                eprintln!(
                    "skipped the Slurm test: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                None
            }
            _ => panic!(
                "the Slurm cluster did not come up: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }

    pub fn conf(&self) -> PathBuf {
        self.dir.path().join("slurm.conf")
    }

    /// A Slurm client command (`srun`, `scancel`, `squeue`) against this cluster.
    pub fn client(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("SLURM_CONF", self.conf())
            .env("PATH", path_with_fixtures())
            .stdin(Stdio::null());
        cmd
    }

    pub fn srun(&self, args: &[&str]) -> Output {
        self.client("srun").args(args).output().unwrap()
    }

    /// `unilab ARGS` run on node `node` (as one task of a job of its own), with `env`.
    pub fn unilab_on(&self, node: &str, env: &[(&str, &Path)], args: &[&str]) -> Output {
        let mut cmd = self.client("srun");
        cmd.args(["-N1", "-n1", "-w", node]).arg(unilab_bin());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.args(args).output().unwrap()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(Self::script())
            .arg("down")
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .output();
    }
}
