//! Snapshots of what a person reads, from real runs: the filters that make them the same on any
//! machine, at any time, as root or as another user. What varies from run to run is replaced by a
//! placeholder in brackets: the state root and the trainer's path, the host and uid in the log's
//! path, soak ids, times, durations, pids, sizes, digests, counts of events and samples, and the
//! figures a soak's samples found.

use std::path::Path;

use super::TestRoot;

/// insta's settings for a snapshot of `root`'s commands: every filter of this module.
pub fn snapshot_settings(root: &TestRoot) -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    let literal = |path: &Path| regex_escape(&path.display().to_string());
    settings.add_filter(&literal(root.root()), "[ROOT]");
    settings.add_filter(&literal(&super::trainer()), "[TRAINER]");
    let scope = root.scope();
    settings.add_filter(
        &format!(r"\[ROOT\]/{}/{}\b", regex_escape(&scope.host), scope.uid),
        "[ROOT]/[HOST]/[UID]",
    );
    settings.add_filter(r"\b\d{8}T\d{6}-[0-9a-f]{4}\b", "[SOAK_ID]");
    settings.add_filter(r"\b[0-9a-f]{64}\b", "[DIGEST]");
    settings.add_filter(r"\b\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d{3})?", "[TIME]");
    settings.add_filter(r"\bpid \d+", "pid [PID]");
    settings.add_filter(r"\b\d+(\.\d+)? (B|KiB|MiB|GiB|TiB)\b", "[SIZE]");
    settings.add_filter(r"\b\d+[dhm] \d+[hms]\b", "[DURATION]");
    settings.add_filter(r"\b\d+(\.\d+)? ?(ms|s|m|h|d)\b", "[DURATION]");
    settings.add_filter(r"\b\d+ events\b", "[N] events");
    // A count is right-aligned in a column as wide as the largest.
    settings.add_filter(r" {2,}\[N\] events", "  [N] events");
    // `soak show`: what the samples found, and how many the run had time for. What is judged
    // over the run's time (a memory trend, GPU health, the progress rate and its slowing) is
    // there only if the readings came in time, for a soak as short as a test's.
    settings.add_filter(r"(?m)^(peaks: +).*$", "${1}[PEAKS]");
    settings.add_filter(r"(?m)^(samples: +)\d+$", "${1}[N]");
    settings.add_filter(r"(?m)^(memory|gpu|rate): .*\n", "");
    settings.add_filter(r"(?m)^warning: +progress slowed .*\n", "");
    settings
}

/// `history`'s timeline with each run of `soak_sampled` lines (as many as the run had time
/// for) made one line, and the sequence numbers, which follow from it, left out.
pub fn collapsed_timeline(text: &str) -> String {
    let mut lines: Vec<String> = Vec::new();
    for line in text.lines() {
        let sampled = line.contains(" soak_sampled ");
        if sampled && lines.last().is_some_and(|l| l.ends_with("[samples]")) {
            continue;
        }
        let line = line
            .trim_start()
            .trim_start_matches(|c: char| c.is_ascii_digit());
        lines.push(match line.find(" soak_sampled ") {
            Some(kind) if sampled => {
                let detail = kind + " soak_sampled ".len();
                let padding = line[detail..].len() - line[detail..].trim_start().len();
                format!("{}[samples]", &line[..detail + padding])
            }
            _ => line.to_owned(),
        });
    }
    lines.join("\n") + "\n"
}

/// `text` with regular expression syntax escaped, to match itself.
pub fn regex_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}
