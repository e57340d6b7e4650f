//! The progress directory's signature.
//!
//! Growth of the directory is the backend-independent liveness signal: any change of file count,
//! total size or newest modification time is progress (`soak::watch::progress` decides it).
//! The newest modification time is taken among the directory itself and every file and
//! directory under it: an in-place append changes only its file's, an entry removed or renamed
//! only its directory's.
//!
//! A reading costs what the directory's change costs: the held directory and every directory
//! under it are watched with inotify (each watch added before the directory is listed, so a
//! change after the listing is an event), and what the last walk met is kept ([`index`]). A
//! reading with no event gives the last signature; one after events looks at what they name
//! (an append in place, an entry made or removed in a nested directory: that entry and its
//! directory) and counts it at once; only what events cannot tell (a directory made, moved or
//! removed, an overflow) calls for a walk. Where a directory cannot be watched (the user's watches or
//! instances ran out) every reading walks, as it would without inotify; and a walk is made at
//! least every [`WALK_AT_LEAST_EVERY`] readings whatever the events said (a change inotify
//! cannot see: a network file system written from another host).

use std::cell::RefCell;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod index;

use self::index::{News, Watches};
use crate::event::soak::ProgressSignature;

/// The most readings in a row that take the last walk's signature on the watches' word.
pub(crate) const WALK_AT_LEAST_EVERY: u32 = 30;

/// The progress directory, held open from the start of the soak. Its signature is read through
/// the held descriptor, so whoever could rename or replace the directory's path later cannot
/// change what the soak watches; each reading also says when the path no longer names it.
///
/// A reading may be given a time budget: a directory too large to walk within it (hundreds of
/// thousands of files) is walked over several readings, each resuming where the last stopped,
/// and the signature is the last *complete* walk's — a part of a walk never passes for progress.
#[derive(Debug)]
pub struct HeldDir {
    path: PathBuf,
    dir: std::fs::File,
    dev: u64,
    ino: u64,
    /// The walk under way, if one did not finish within its budget, and the last complete one.
    walks: RefCell<Walks>,
}

#[derive(Debug, Default)]
struct Walks {
    under_way: Option<Walk>,
    /// The signature of the last complete walk, and what it could not read.
    last: Option<(ProgressSignature, Vec<(PathBuf, std::io::Error)>)>,
    /// The directories' watches; `None` without inotify.
    watches: Option<Watches>,
    /// Walks completed, and readings since the last that took its signature unwalked.
    completed: u64,
    unwalked: u32,
}

impl HeldDir {
    /// Opens `path`, which must be a directory and not a symbolic link.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc_flags::O_DIRECTORY | libc_flags::O_NOFOLLOW)
            .open(path)?;
        let meta = dir.metadata()?;
        Ok(Self {
            path: path.to_owned(),
            dir,
            dev: meta.dev(),
            ino: meta.ino(),
            walks: RefCell::new(Walks {
                watches: Watches::new(),
                ..Walks::default()
            }),
        })
    }

    /// Without inotify, as where the user's watches ran out: every reading walks.
    #[cfg(test)]
    fn unwatched(self) -> Self {
        self.walks.borrow_mut().watches = None;
        self
    }

    /// How many walks completed so far.
    #[cfg(test)]
    fn walks_completed(&self) -> u64 {
        self.walks.borrow().completed
    }

    /// The signature of the held directory, walked whole, and what is wrong with it.
    pub(crate) fn signature(&self) -> (ProgressSignature, Vec<String>) {
        self.signature_within(None)
    }

    /// The signature of the held directory, and what is wrong with it: its path no longer
    /// naming it, subdirectories that cannot be read (their files count for nothing), a walk
    /// that takes more than one reading. With a `budget`, a walk goes on for at most about that
    /// long, and the signature is that of the last walk that completed.
    pub(crate) fn signature_within(
        &self,
        budget: Option<Duration>,
    ) -> (ProgressSignature, Vec<String>) {
        let mut problems = Vec::new();
        match std::fs::symlink_metadata(&self.path) {
            Ok(meta) if meta.dev() == self.dev && meta.ino() == self.ino => {}
            _ => problems.push(format!(
                "`{}` no longer names the directory the soak watches; the soak keeps watching the one it named at the start",
                self.path.display()
            )),
        }
        let held = self.held_path();
        let mut walks = self.walks.borrow_mut();
        let Walks {
            under_way,
            last,
            watches,
            completed,
            unwalked,
        } = &mut *walks;
        // Events are taken before the walk: one that comes during it calls for the next.
        let news = watches.as_mut().map_or(News::Walk, Watches::take_events);
        let trusted = under_way.is_none()
            && watches.as_ref().is_some_and(|w| w.complete)
            && *unwalked + 1 < WALK_AT_LEAST_EVERY;
        let unwalked_signature = match (news, &mut *last) {
            (News::Nothing, Some(_)) => Some(None),
            (News::Updated(signature), Some(_)) => Some(Some(signature)),
            _ => None,
        };
        if let Some(updated) = unwalked_signature.filter(|_| trusted) {
            if let (Some(signature), Some(last)) = (updated, last.as_mut()) {
                last.0 = signature;
            }
            *unwalked += 1;
        } else if let Some(done) = walk_on(under_way, &held, watches.as_mut(), budget) {
            *last = Some(done);
            *completed += 1;
            *unwalked = 0;
        } else {
            let walk = under_way.as_ref().map_or(0, |walk| walk.entries);
            problems.push(format!(
                "the progress directory is too large to walk within {:.0} ms: its walk goes on over several samples ({} so far), and progress is seen as each walk completes",
                budget.unwrap_or_default().as_secs_f64() * 1000.0,
                crate::text::count(walk, "entry")
            ));
        }
        let (signature, unreadable) = match &*last {
            Some((signature, unreadable)) => (*signature, unreadable.as_slice()),
            None => (ProgressSignature::default(), &[][..]),
        };
        if let Some((first, error)) = unreadable.first() {
            let within = first.strip_prefix(&held).unwrap_or(first);
            problems.push(format!(
                "cannot read {} of the progress directory (`{}`: {error}); what they hold is not counted as progress",
                crate::text::count(unreadable.len() as u64, "subdirectory"),
                self.path.join(within).display()
            ));
        }
        (signature, problems)
    }

    fn held_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.dir.as_raw_fd()))
    }
}

/// The signature of the last complete walk and what it could not read.
type Walked = (ProgressSignature, Vec<(PathBuf, std::io::Error)>);

/// Goes on with the walk `under_way` (a new one of `held` if none), watching each directory
/// before it is listed, until done or past `budget`: what it found; `None` while it goes on
/// (left `under_way`). Whether the watches are complete is what the last walk found.
fn walk_on(
    under_way: &mut Option<Walk>,
    held: &Path,
    mut watches: Option<&mut Watches>,
    budget: Option<Duration>,
) -> Option<Walked> {
    let mut walk = match under_way.take() {
        Some(walk) => walk,
        None => {
            let walk = Walk::new(held);
            if let Some(watches) = watches.as_deref_mut() {
                watches.walk_begins(held);
                if let Ok(meta) = std::fs::metadata(held) {
                    watches.met(held, &meta);
                }
            }
            walk
        }
    };
    let deadline = budget.map(|budget| Instant::now() + budget);
    if walk.advance(deadline, watches.as_deref_mut()) {
        if let Some(watches) = watches {
            watches.walk_completed();
        }
        return Some((walk.signature, walk.unreadable));
    }
    *under_way = Some(walk);
    None
}

/// The open(2) flags `std` does not name.
mod libc_flags {
    pub(super) const O_DIRECTORY: i32 = nix::fcntl::OFlag::O_DIRECTORY.bits();
    pub(super) const O_NOFOLLOW: i32 = nix::fcntl::OFlag::O_NOFOLLOW.bits();
}

/// A walk of a directory tree (not following symlinks) that sums it up, and can stop and resume.
#[derive(Debug)]
struct Walk {
    /// Directories still to list, and the one being listed.
    stack: Vec<PathBuf>,
    listing: Option<std::fs::ReadDir>,
    signature: ProgressSignature,
    /// Directories that could not be read, and why.
    unreadable: Vec<(PathBuf, std::io::Error)>,
    entries: u64,
}

/// How many entries a walk looks at between two looks at the clock.
const CLOCK_EVERY: u64 = 256;

impl Walk {
    fn new(dir: &Path) -> Self {
        let mut walk = Self {
            stack: vec![dir.to_owned()],
            listing: None,
            signature: ProgressSignature::default(),
            unreadable: Vec::new(),
            entries: 0,
        };
        if let Ok(meta) = std::fs::metadata(dir) {
            walk.newest(&meta);
        }
        walk
    }

    /// Walks on until done (`true`) or past `deadline` (`false`: call again to resume). An entry
    /// gone between the listing and its look is skipped: a trainer may be replacing files while
    /// unilab looks.
    fn advance(&mut self, deadline: Option<Instant>, mut watches: Option<&mut Watches>) -> bool {
        loop {
            let Some(listing) = &mut self.listing else {
                let Some(dir) = self.stack.pop() else {
                    return true;
                };
                if let Some(watches) = watches.as_deref_mut() {
                    watches.add(&dir);
                }
                match std::fs::read_dir(&dir) {
                    Ok(listing) => self.listing = Some(listing),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => self.unreadable.push((dir, e)),
                }
                continue;
            };
            let Some(entry) = listing.next() else {
                self.listing = None;
                continue;
            };
            self.entries += 1;
            if let Ok(entry) = entry {
                self.count(&entry, watches.as_deref_mut());
            }
            if self.entries.is_multiple_of(CLOCK_EVERY)
                && deadline.is_some_and(|deadline| Instant::now() >= deadline)
            {
                return false;
            }
        }
    }

    fn count(&mut self, entry: &std::fs::DirEntry, watches: Option<&mut Watches>) {
        let Ok(meta) = entry.metadata() else {
            return;
        };
        if meta.is_dir() {
            self.stack.push(entry.path());
        } else if meta.is_file() {
            self.signature.files += 1;
            self.signature.bytes += meta.len();
        } else {
            return;
        }
        if let Some(watches) = watches {
            watches.met(&entry.path(), &meta);
        }
        self.newest(&meta);
    }

    /// Takes `meta`'s modification time into the newest.
    fn newest(&mut self, meta: &std::fs::Metadata) {
        let mtime_ns = meta
            .mtime()
            .saturating_mul(1_000_000_000)
            .saturating_add(meta.mtime_nsec());
        let newest = &mut self.signature.newest_mtime_ns;
        *newest = Some(newest.map_or(mtime_ns, |n| n.max(mtime_ns)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The directory walked whole, with what could not be read.
    fn signature(dir: &Path) -> (ProgressSignature, Vec<(PathBuf, std::io::Error)>) {
        let mut walk = Walk::new(dir);
        walk.advance(None, None);
        (walk.signature, walk.unreadable)
    }

    #[test]
    fn the_signature_changes_with_files_sizes_and_times() {
        let dir = tempfile::tempdir().unwrap();
        let (empty, unreadable) = signature(dir.path());
        assert_eq!((empty.files, empty.bytes), (0, 0));
        assert!(unreadable.is_empty());
        std::fs::write(dir.path().join("a"), b"12345").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b"), b"1").unwrap();
        let (two, _) = signature(dir.path());
        assert_eq!((two.files, two.bytes), (2, 6));
        assert!(two.newest_mtime_ns.is_some());
        std::fs::write(dir.path().join("a"), b"123456").unwrap();
        assert_ne!(signature(dir.path()).0, two);
    }

    /// Sets the modification time of `path` (a file or a directory) to `at`.
    fn stamp(path: &Path, at: std::time::SystemTime) {
        std::fs::File::open(path).unwrap().set_modified(at).unwrap();
    }

    fn mtime_ns(path: &Path) -> i64 {
        let meta = std::fs::metadata(path).unwrap();
        meta.mtime() * 1_000_000_000 + meta.mtime_nsec()
    }

    /// The newest time is the newest among the directory, its files and its directories at any
    /// depth: an append in place moves only its file's, an entry added or removed deep down
    /// only its directory's, and a removal in the directory itself only the directory's.
    #[test]
    fn the_newest_time_is_what_changed_last_however_deep_and_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("run/ckpt");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join("log"), b"step 1\n").unwrap();
        std::fs::write(dir.path().join("old"), b"x").unwrap();
        let long_ago = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        for path in [deep.join("log"), dir.path().join("old"), deep.clone()] {
            stamp(&path, long_ago);
        }
        stamp(&dir.path().join("run"), long_ago);
        stamp(dir.path(), long_ago);
        let (before, _) = signature(dir.path());
        assert_eq!(before.newest_mtime_ns, Some(1_000_000_000 * 1_000_000_000));

        let mut log = std::fs::OpenOptions::new()
            .append(true)
            .open(deep.join("log"))
            .unwrap();
        std::io::Write::write_all(&mut log, b"step 2\n").unwrap();
        let (appended, _) = signature(dir.path());
        assert_eq!(appended.files, before.files, "no new file");
        assert_eq!(
            mtime_ns(&deep),
            1_000_000_000 * 1_000_000_000,
            "nor a new entry"
        );
        assert_eq!(appended.newest_mtime_ns, Some(mtime_ns(&deep.join("log"))));

        stamp(&deep.join("log"), long_ago);
        std::fs::write(deep.join("tmp"), b"").unwrap();
        std::fs::remove_file(deep.join("tmp")).unwrap();
        let (nested, _) = signature(dir.path());
        assert_eq!(
            (nested.files, nested.bytes),
            (appended.files, appended.bytes)
        );
        assert_eq!(nested.newest_mtime_ns, Some(mtime_ns(&deep)));
        assert_ne!(nested, appended);

        stamp(&deep, long_ago);
        std::fs::remove_file(dir.path().join("old")).unwrap();
        let (removed, _) = signature(dir.path());
        assert_eq!(removed.newest_mtime_ns, Some(mtime_ns(dir.path())));
    }

    fn append(path: &Path, line: &[u8]) {
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .unwrap();
        std::io::Write::write_all(&mut file, line).unwrap();
    }

    /// With every directory watched, a reading walks only when the events cannot say what
    /// changed: none while nothing changes, nor for an append in place deep down or an entry
    /// added and removed in a nested directory — each seen at the next reading all the same;
    /// one for a directory made, whose entries only a walk finds.
    #[test]
    fn a_watched_directory_is_walked_only_after_a_change_and_every_change_counts() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("run/ckpt");
        std::fs::create_dir_all(&deep).unwrap();
        append(&deep.join("log"), b"step 1\n");
        let held = HeldDir::open(dir.path()).unwrap();
        let (before, _) = held.signature();
        let walked = held.walks_completed();
        for _ in 0..5 {
            assert_eq!(held.signature_within(None).0, before);
        }
        assert_eq!(held.walks_completed(), walked, "nothing changed: no walk");

        append(&deep.join("log"), b"step 2\n");
        let (appended, _) = held.signature_within(None);
        assert_eq!(
            appended.bytes,
            before.bytes + 7,
            "the append counts at once"
        );
        assert_eq!(appended.newest_mtime_ns, Some(mtime_ns(&deep.join("log"))));
        assert_eq!(
            held.walks_completed(),
            walked,
            "the event said what changed"
        );

        std::fs::create_dir(deep.join(".tmp")).unwrap();
        std::fs::remove_dir(deep.join(".tmp")).unwrap();
        let (nested, _) = held.signature_within(None);
        assert_eq!(nested.newest_mtime_ns, Some(mtime_ns(&deep)));
        assert_eq!(held.walks_completed(), walked);
        // A directory made after the watches were set is watched from the walk that met it.
        std::fs::create_dir(deep.join("new")).unwrap();
        held.signature_within(None);
        assert_eq!(
            held.walks_completed(),
            walked + 1,
            "a directory made: a walk"
        );
        append(&deep.join("new/file"), b"x");
        let (later, _) = held.signature_within(None);
        assert_eq!(later.files, nested.files + 1);
        append(&deep.join("new/file"), b"y");
        assert_eq!(held.signature_within(None).0.bytes, later.bytes + 1);
    }

    /// Whatever happens in it, the signature a watched directory's readings give is what a
    /// walk of it gives: files made, appended to, truncated, renamed, removed; directories made
    /// with files in them, renamed, removed whole; a symbolic link (not counted).
    #[test]
    fn what_the_events_keep_is_what_a_walk_finds() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        append(&root.join("a/b/log"), b"1\n");
        append(&root.join("top"), b"top");
        let held = HeldDir::open(root).unwrap();
        held.signature();
        let changes: Vec<Box<dyn Fn()>> = vec![
            Box::new(|| append(&root.join("a/b/log"), b"2\n")),
            Box::new(|| append(&root.join("a/new"), b"new")),
            Box::new(|| std::fs::write(root.join("top"), b"t").unwrap()),
            Box::new(|| std::fs::rename(root.join("a/new"), root.join("a/b/moved")).unwrap()),
            Box::new(|| std::fs::remove_file(root.join("top")).unwrap()),
            Box::new(|| {
                std::fs::create_dir_all(root.join("c/d")).unwrap();
                append(&root.join("c/d/f"), b"ff");
            }),
            Box::new(|| append(&root.join("c/d/f"), b"g")),
            Box::new(|| std::fs::rename(root.join("c"), root.join("a/c")).unwrap()),
            Box::new(|| std::os::unix::fs::symlink("/etc", root.join("a/link")).unwrap()),
            Box::new(|| std::fs::remove_dir_all(root.join("a/c")).unwrap()),
            Box::new(|| append(&root.join("a/b/log"), b"3\n")),
        ];
        for (i, change) in changes.iter().enumerate() {
            change();
            let (read, _) = held.signature_within(None);
            assert_eq!(read, signature(root).0, "after change {i}");
        }
    }

    /// Without a watch for every directory (the user's watches ran out) every reading walks;
    /// with them, a walk still comes at least every [`WALK_AT_LEAST_EVERY`] readings.
    #[test]
    fn without_watches_every_reading_walks_and_with_them_one_in_so_many_still_does() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let held = HeldDir::open(dir.path()).unwrap().unwatched();
        let (before, _) = held.signature();
        append(&dir.path().join("sub/log"), b"x");
        let (after, _) = held.signature_within(None);
        assert_eq!(after.bytes, before.bytes + 1);
        let walked = held.walks_completed();
        for _ in 0..3 {
            held.signature_within(None);
        }
        assert_eq!(held.walks_completed(), walked + 3);

        let held = HeldDir::open(dir.path()).unwrap();
        held.signature();
        let walked = held.walks_completed();
        for _ in 0..WALK_AT_LEAST_EVERY {
            held.signature_within(None);
        }
        assert_eq!(held.walks_completed(), walked + 1);
    }

    #[test]
    fn a_walk_cut_short_by_its_budget_resumes_and_only_a_whole_walk_counts() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..3_000 {
            std::fs::write(dir.path().join(format!("f{i}")), b"x").unwrap();
        }
        // Unwatched: every reading walks, and no event brings the signature up to date.
        let held = HeldDir::open(dir.path()).unwrap().unwatched();
        let mut readings = 0;
        let signature = loop {
            readings += 1;
            // No time at all: each reading looks at one batch of entries, then stops.
            let (signature, problems) = held.signature_within(Some(Duration::ZERO));
            if problems.is_empty() {
                break signature;
            }
            assert!(problems[0].contains("too large to walk"), "{problems:?}");
            assert_eq!(
                signature,
                ProgressSignature::default(),
                "a part never counts"
            );
        };
        assert!(readings > 3_000 / CLOCK_EVERY as usize, "{readings}");
        assert_eq!((signature.files, signature.bytes), (3_000, 3_000));
        // The next walk starts afresh; until it completes, the last whole one stands.
        std::fs::write(dir.path().join("new"), b"y").unwrap();
        let (during, _) = held.signature_within(Some(Duration::ZERO));
        assert_eq!(during, signature);
    }
}
