//! The watches over a progress directory, and what they keep of it: every entry the last walk
//! met (its kind, size and time) by path, and the directory each watch is on. An event names
//! what changed — a file appended to, an entry made or removed — so the signature is brought up
//! to date by a look at that entry and its directory alone, not a walk; what the events cannot
//! say for sure (a directory made, moved or removed, a watch gone, the queue overflowed) calls
//! for a walk instead.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

use crate::event::soak::ProgressSignature;

/// The most entries kept: a larger directory is walked at each change instead (its index would
/// take tens of megabytes).
const MAX_ENTRIES: usize = 200_000;

/// What is kept of one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    dir: bool,
    bytes: u64,
    mtime_ns: i64,
}

/// Inotify watches over the directory and every directory under it, added as walks meet them,
/// and the index the last complete walk left.
#[derive(Debug)]
pub(super) struct Watches {
    inotify: Inotify,
    /// Whether every directory the walk under way or the last met is watched.
    pub complete: bool,
    /// The directory walked.
    root: PathBuf,
    dirs: HashMap<WatchDescriptor, PathBuf>,
    entries: HashMap<PathBuf, Entry>,
    /// Whether `entries` holds the last complete walk's every entry.
    indexed: bool,
}

/// What the events since the last look call for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum News {
    Nothing,
    /// The index is brought up to date: here is the signature.
    Updated(ProgressSignature),
    Walk,
}

impl Watches {
    pub(super) fn new() -> Option<Self> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).ok()?;
        Some(Self {
            inotify,
            complete: true,
            root: PathBuf::new(),
            dirs: HashMap::new(),
            entries: HashMap::new(),
            indexed: false,
        })
    }

    /// A walk of `root` begins: what is kept is the walk's from now on.
    pub(super) fn walk_begins(&mut self, root: &Path) {
        root.clone_into(&mut self.root);
        self.complete = true;
        self.dirs.clear();
        self.entries.clear();
        self.indexed = false;
    }

    /// The walk completed: its entries are the index, when it could keep them all.
    pub(super) fn walk_completed(&mut self) {
        self.indexed = self.complete && self.entries.len() < MAX_ENTRIES;
    }

    /// Watches `dir` (before it is listed); a watch that cannot be had leaves the set incomplete.
    pub(super) fn add(&mut self, dir: &Path) {
        let flags = AddWatchFlags::IN_MODIFY
            | AddWatchFlags::IN_ATTRIB
            | AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_DELETE_SELF
            | AddWatchFlags::IN_MOVE_SELF
            | AddWatchFlags::IN_ONLYDIR;
        match self.inotify.add_watch(dir, flags) {
            Ok(wd) => {
                self.dirs.insert(wd, dir.to_owned());
            }
            Err(_) => self.complete = false,
        }
    }

    /// Keeps what the walk met of `path` (the directory itself, a file, a directory).
    pub(super) fn met(&mut self, path: &Path, meta: &std::fs::Metadata) {
        if self.entries.len() < MAX_ENTRIES {
            self.entries.insert(path.to_owned(), entry(meta));
        }
    }

    /// Takes the events since the last look, and brings the index up to date by them where it
    /// can.
    pub(super) fn take_events(&mut self) -> News {
        let mut any = false;
        let mut walk = !self.indexed;
        while let Ok(events) = self.inotify.read_events() {
            if events.is_empty() {
                break;
            }
            any = true;
            for event in &events {
                walk = walk || !self.apply(event.wd, event.mask, event.name.as_deref());
            }
        }
        match (any, walk) {
            (false, _) => News::Nothing,
            (true, true) => {
                self.indexed = false;
                News::Walk
            }
            (true, false) => News::Updated(self.signature()),
        }
    }

    /// Takes one event into the index; `false` when only a walk can tell what it did.
    fn apply(
        &mut self,
        wd: WatchDescriptor,
        mask: AddWatchFlags,
        name: Option<&std::ffi::OsStr>,
    ) -> bool {
        let self_gone = AddWatchFlags::IN_DELETE_SELF
            | AddWatchFlags::IN_MOVE_SELF
            | AddWatchFlags::IN_IGNORED
            | AddWatchFlags::IN_Q_OVERFLOW;
        if mask.intersects(self_gone) {
            return false;
        }
        let Some(dir) = self.dirs.get(&wd).cloned() else {
            return false;
        };
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            return self.look(&dir);
        };
        let path = dir.join(name);
        let was_dir = self.entries.get(&path).is_some_and(|e| e.dir);
        // A directory made or moved in: its entries are the walk's to find.
        if std::fs::symlink_metadata(&path).is_ok_and(|meta| meta.is_dir()) && !was_dir {
            return false;
        }
        self.look(&path) && self.look(&dir)
    }

    /// Looks at `path` again: kept as it is now, or forgotten once gone; `false` when a
    /// directory is gone (what was under it is the walk's to forget).
    fn look(&mut self, path: &Path) -> bool {
        // The held directory is named through its descriptor's link, which is followed.
        let meta = if path == self.root {
            std::fs::metadata(path)
        } else {
            std::fs::symlink_metadata(path)
        };
        match meta {
            Ok(meta) if meta.is_dir() || meta.is_file() => {
                self.entries.insert(path.to_owned(), entry(&meta));
                true
            }
            // Neither a file nor a directory (a link, a socket): not counted.
            Ok(_) => self.entries.remove(path).is_none_or(|e| !e.dir),
            Err(_) => self.entries.remove(path).is_none_or(|e| !e.dir),
        }
    }

    /// The signature of what the index holds.
    fn signature(&self) -> ProgressSignature {
        let mut signature = ProgressSignature::default();
        for entry in self.entries.values() {
            if !entry.dir {
                signature.files += 1;
                signature.bytes += entry.bytes;
            }
            let newest = &mut signature.newest_mtime_ns;
            *newest = Some(newest.map_or(entry.mtime_ns, |n| n.max(entry.mtime_ns)));
        }
        signature
    }
}

fn entry(meta: &std::fs::Metadata) -> Entry {
    Entry {
        dir: meta.is_dir(),
        bytes: if meta.is_dir() { 0 } else { meta.len() },
        mtime_ns: meta
            .mtime()
            .saturating_mul(1_000_000_000)
            .saturating_add(meta.mtime_nsec()),
    }
}
