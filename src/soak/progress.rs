//! The progress directory's signature.
//!
//! Growth of the directory is the backend-independent liveness signal: any change of file count,
//! total size or newest modification time is progress.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::event::soak::ProgressSignature;

/// Walks the directory (not following symlinks) and sums it up. Unreadable entries are skipped:
/// a trainer may be replacing files while unilab looks.
pub(super) fn signature(dir: &Path) -> ProgressSignature {
    let mut sig = ProgressSignature::default();
    let mut stack = vec![dir.to_owned()];
    while let Some(current) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            let mtime_ns = meta
                .mtime()
                .saturating_mul(1_000_000_000)
                .saturating_add(meta.mtime_nsec());
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                sig.files += 1;
                sig.bytes += meta.len();
            } else {
                continue;
            }
            sig.newest_mtime_ns = Some(sig.newest_mtime_ns.map_or(mtime_ns, |n| n.max(mtime_ns)));
        }
    }
    sig
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_changes_with_files_sizes_and_times() {
        let dir = tempfile::tempdir().unwrap();
        let empty = signature(dir.path());
        assert_eq!(empty, ProgressSignature::default());
        std::fs::write(dir.path().join("a"), b"12345").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b"), b"1").unwrap();
        let two = signature(dir.path());
        assert_eq!((two.files, two.bytes), (2, 6));
        assert!(two.newest_mtime_ns.is_some());
        std::fs::write(dir.path().join("a"), b"123456").unwrap();
        assert_ne!(signature(dir.path()), two);
    }
}
