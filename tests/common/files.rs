//! Files and directories as unilab keeps them (private, whatever the umask), and a small disk
//! to fill.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Copies a log to `to` as unilab keeps one: mode 0600, whatever the copy came with. A checkout
/// made under umask 002 holds the frozen fixtures group-writable, and a log others may write to
/// is rightly refused.
pub fn copy_log(from: &Path, to: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::copy(from, to)
        .unwrap_or_else(|e| panic!("copy {} to {}: {e}", from.display(), to.display()));
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// A temporary directory only its owner may write to, whatever the umask: under umask 002 (the
/// default on many distributions) a new directory is group-writable, and unilab rightly distrusts
/// what lies below one.
pub fn private_tempdir(prefix: &str) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new()
        .prefix(prefix)
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .expect("a temporary directory")
}

/// Creates `path` and the directories above it that are missing, each 0700 whatever the umask
/// (as unilab creates its own): unilab distrusts what lies below a directory others may write.
pub fn private_dir_all(path: &Path) {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
}

/// Writes `bytes` as a file at `path` with mode 0600 whatever the umask: a damaged or fake log
/// that unilab must judge by its contents, not refuse as writable by others.
pub fn write_private(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut file| file.write_all(bytes))
        .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// A small tmpfs of its own (root only), unmounted when dropped.
pub struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    pub fn mount(bytes: u64) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        mounted.then_some(Self { dir })
    }

    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Fills what is left of it with one file.
    pub fn fill(&self) -> PathBuf {
        use std::io::Write;
        let filler = self.path().join("filler");
        let mut file = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 4096];
        while file.write_all(&chunk).is_ok() {}
        let _ = file.sync_all();
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}
