use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::Instant;

use super::*;

fn uid() -> u32 {
    nix::unistd::getuid().as_raw()
}

fn now() -> f64 {
    crate::time::unix_seconds(jiff::Timestamp::now().as_microsecond())
}

/// Heartbeats of soak `s` under the runtime directory `runtime`.
fn heartbeats(runtime: &Path) -> Heartbeats {
    Heartbeats::create(Some(runtime), uid(), "s", StepLimits::default()).unwrap()
}

fn appending(path: &Path) -> File {
    File::options().append(true).open(path).unwrap()
}

/// Polls until `beats` beats were taken in, or 20 s pass: the beats of every poll.
fn beats_until(heartbeats: &mut Heartbeats, beats: u32) -> Vec<SampleBeats> {
    let began = Instant::now();
    let mut taken = Vec::new();
    while taken.iter().map(|s: &SampleBeats| s.beats).sum::<u32>() < beats
        && began.elapsed() < Duration::from_secs(20)
    {
        std::thread::sleep(Duration::from_millis(50));
        let now_us = jiff::Timestamp::now().as_microsecond();
        taken.extend(heartbeats.poll(now_us).beats);
    }
    taken
}

#[test]
fn the_file_is_the_users_alone_in_the_runtime_directory_and_what_was_read_is_given_back() {
    let runtime = crate::testing::files::private_tempdir();
    let mut beats = heartbeats(runtime.path());
    let path = beats.path().unwrap();
    assert_eq!(path, runtime.path().join("unilab/soaks/s/heartbeat"));
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert!(
        Heartbeats::create(Some(runtime.path()), uid(), "s", StepLimits::default()).is_err(),
        "never reused"
    );
    beats.start(now() - 1.0);
    let mut writer = appending(&path);
    for step in 0..2_000 {
        writeln!(writer, r#"{{"step": {step}, "loss": 0.5}}"#).unwrap();
    }
    let polled = beats.poll(jiff::Timestamp::now().as_microsecond());
    let taken = polled.beats.into_iter().chain(beats_until(&mut beats, 0));
    assert_eq!(taken.map(|s| s.beats).sum::<u32>(), 2_000);
    let meta = std::fs::metadata(&path).unwrap();
    assert!(meta.len() > 40_000, "the size stays: {}", meta.len());
    // Where the file system punches holes (tmpfs, ext4, xfs), the pages read are gone.
    if lock(&beats.placed.as_ref().unwrap().1).punched > 0 {
        assert!(meta.blocks() * 512 < meta.len(), "{} blocks", meta.blocks());
    }
    // And beats appended after the holes are read as before.
    writeln!(writer, r#"{{"step": 2000, "phase": "eval"}}"#).unwrap();
    let sample = beats_until(&mut beats, 1).pop().unwrap();
    assert_eq!((sample.beats, sample.phase.as_deref()), (1, Some("eval")));
    // The last read, at the end: a beat since the last sample is the run's, and no sample's
    // yet; a line left without its newline is malformed.
    write!(writer, "{{\"step\": 2001}}\n{{\"step\": 2002, \"lo").unwrap();
    let found = beats.finish(Duration::from_secs(3), false);
    let run = found.run.unwrap();
    assert_eq!(run.steps["train"].count, 2_001);
    assert_eq!(run.errors.malformed, 1);
    let (unsampled, _) = found.unsampled.unwrap();
    assert_eq!((unsampled.beats, unsampled.step), (1, Some(2001)));
    beats.remove();
    assert!(!runtime.path().join("unilab/soaks/s").exists());
}

/// Beats read in one poll all had the poll's time: a trainer stepping every 50 ms read a
/// median step of 995 ms at `--sample-interval 1`. Read as they arrive, they are timed within
/// about 10 ms; with inotify and without (a hundred reads a second).
#[test]
fn beats_without_t_are_timed_by_their_arrival_between_samples() {
    for inotify in [true, false] {
        let runtime = crate::testing::files::private_tempdir();
        let mut beats = heartbeats(runtime.path());
        let path = beats.path().unwrap();
        let watch = if inotify {
            reading::watch(path.parent().unwrap())
        } else {
            Err(Errno::ENOSPC)
        };
        beats.start_reading(now(), watch);
        let mut writer = appending(&path);
        for step in 0..20 {
            std::thread::sleep(Duration::from_millis(50));
            writeln!(writer, r#"{{"step": {step}}}"#).unwrap();
        }
        // One sample for the whole second.
        let polled = beats.poll(jiff::Timestamp::now().as_microsecond());
        let sample = polled.beats.unwrap();
        assert_eq!(sample.beats, 20);
        let median = sample.step_seconds_median.unwrap();
        // 50 ms steps (and the sleeps' own lateness); a loaded host may stamp some late.
        assert!(
            (0.04..0.2).contains(&median),
            "inotify {inotify}: median {median}"
        );
        let said = polled.news.join("; ");
        assert_eq!(said.contains("polled every 10 ms"), !inotify, "{said}");
        let run = beats.finish(Duration::from_secs(2), false).run.unwrap();
        assert_eq!(run.steps["train"].timed, 19);
    }
}

/// A trainer that opens the file with `open(path, "w")` at each beat: read once, then never
/// again (the same size), and the soak failed stale while it beat ten times a second.
#[test]
fn a_file_rewritten_at_each_beat_or_replaced_is_read_from_its_start_each_time() {
    let runtime = crate::testing::files::private_tempdir();
    let mut beats = heartbeats(runtime.path());
    let path = beats.path().unwrap();
    beats.start(now());
    for step in 10..20 {
        std::fs::write(&path, format!("{{\"step\": {step}}}\n")).unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    let taken = beats_until(&mut beats, 10);
    // A beat rewritten before it was read is lost (the writer's doing); a loaded host may
    // lose a few, never most.
    let read = taken.iter().map(|s| s.beats).sum::<u32>();
    assert!(read >= 5, "{taken:?}");
    assert_eq!(taken.last().and_then(|s| s.step), Some(19), "{taken:?}");
    // Another file renamed over it, as an atomic writer does.
    let aside = path.with_file_name("heartbeat.new");
    std::fs::write(&aside, "{\"step\": 30}\n{\"step\": 31}\n").unwrap();
    std::fs::rename(&aside, &path).unwrap();
    let taken = beats_until(&mut beats, 2);
    assert_eq!(taken.last().and_then(|s| s.step), Some(31), "{taken:?}");
    let run = beats.finish(Duration::from_secs(2), false).run.unwrap();
    assert_eq!(run.steps["train"].count, u64::from(read) + 2);
    assert!(run.errors.truncations >= 5, "{:?}", run.errors);
}

/// Beats read together all had the read's time: a host too loaded to wake the reading thread
/// for each beat made one step of several and dropped the rest from the step times (a test
/// saw 9 steps timed of 19). Beats of one read are spread over the time since the last read.
#[test]
fn beats_read_together_are_spread_over_the_time_since_the_last_read() {
    let runtime = crate::testing::files::private_tempdir();
    let beats = heartbeats(runtime.path());
    let path = beats.path().unwrap();
    let (_, state) = beats.placed.as_ref().unwrap();
    let mut state = lock(state);
    let t0 = 1_800_000_000.0;
    state.run = Some((t0, HeartbeatRun::new(t0, StepLimits::default())));
    let mut writer = appending(&path);
    writeln!(writer, r#"{{"step": 0}}"#).unwrap();
    assert_eq!(state.read(t0 + 0.1, None, false), Read::Stamped);
    // Three steps of 0.1 s each, read at once 0.3 s later.
    write!(
        writer,
        "{{\"step\": 1}}\n{{\"step\": 2}}\n{{\"step\": 3}}\n"
    )
    .unwrap();
    assert_eq!(state.read(t0 + 0.4, None, false), Read::Stamped);
    let run = &state.run.as_ref().unwrap().1;
    let (timed, seconds) = run.timed();
    assert_eq!(timed, 3);
    assert!((seconds - 0.3).abs() < 1e-6, "{seconds}");
    // Woken by the first of two beats: they came after the wake, not since the last read.
    write!(writer, "{{\"step\": 4}}\n{{\"step\": 5}}\n").unwrap();
    assert_eq!(state.read(t0 + 10.2, Some(t0 + 10.0), false), Read::Stamped);
    let run = &state.run.as_ref().unwrap().1;
    let (timed, seconds) = run.timed();
    assert_eq!(timed, 5);
    // 4 arrived at 10.1 (9.7 s after step 3), 5 at 10.2.
    assert!((seconds - (0.3 + 9.7 + 0.1)).abs() < 1e-6, "{seconds}");
}
