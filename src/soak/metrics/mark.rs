//! Whose metrics file it is: its first line, a comment the text format's parsers skip, names
//! the soak, its host and its supervisor (pid and start time):
//!
//! ```text
//! # unilab soak="20261206T120000-ab12",host="node-7",supervisor_pid="4242",supervisor_start_ticks="987654"
//! ```
//!
//! A later soak given the same `--metrics-file` reads it back ([`read`]) to tell a file whose
//! soak no longer runs — its `unilab_soak_running` 0, or its supervisor gone — which it may
//! rewrite, from a running soak's, which it must leave. A file of an earlier unilab, without
//! the line, is still told by its `unilab_soak_running` series; anything else is not unilab's.

use super::label;
use crate::process::ProcessIdentity;

/// What starts the line, before its labels.
const PREFIX: &str = "# unilab ";

/// The first line of the file of soak `soak` on `host`, supervised by `supervisor`.
pub(crate) fn line(soak: &str, host: &str, supervisor: ProcessIdentity) -> String {
    format!(
        "{PREFIX}{},{},{},{}",
        label("soak", soak),
        label("host", host),
        label("supervisor_pid", &supervisor.pid.to_string()),
        label(
            "supervisor_start_ticks",
            &supervisor.start_ticks.to_string()
        )
    )
}

/// A unilab metrics file, as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mark {
    pub soak: String,
    /// Its host and supervisor, where the file names them (an earlier unilab's does not).
    pub supervised: Option<(String, ProcessIdentity)>,
    /// What its `unilab_soak_running` says.
    pub running: bool,
}

/// The mark of the metrics file whose text is `text`, if it is one unilab wrote.
pub(crate) fn read(text: &str) -> Option<Mark> {
    let mut lines = text.lines();
    let first = lines.next()?;
    let supervised = match first.strip_prefix(PREFIX) {
        Some(labels) => {
            let labels = parse_labels(labels)?;
            let get = |name: &str| {
                labels
                    .iter()
                    .find(|(key, _)| key == name)
                    .map(|(_, value)| value.as_str())
            };
            let identity = ProcessIdentity {
                pid: get("supervisor_pid")?.parse().ok()?,
                start_ticks: get("supervisor_start_ticks")?.parse().ok()?,
            };
            Some((get("soak")?.to_owned(), get("host")?.to_owned(), identity))
        }
        // An earlier unilab's file starts with its first family.
        None if first.starts_with("# HELP unilab_soak_info ") => None,
        None => return None,
    };
    let (soak, running) = text.lines().find_map(|line| {
        let rest = line.strip_prefix("unilab_soak_running{")?;
        let (labels, value) = rest.rsplit_once("} ")?;
        let labels = parse_labels(labels)?;
        let [(key, soak)] = <[_; 1]>::try_from(labels).ok()?;
        let running = match value {
            "0" => false,
            "1" => true,
            _ => return None,
        };
        (key == "soak").then_some((soak, running))
    })?;
    let supervised = match supervised {
        Some((marked, host, identity)) if marked == soak => Some((host, identity)),
        Some(_) => return None,
        None => None,
    };
    Some(Mark {
        soak,
        supervised,
        running,
    })
}

/// `name="value",...` as the text format writes labels, the values unescaped; `None` when it is
/// not that.
fn parse_labels(text: &str) -> Option<Vec<(String, String)>> {
    let mut labels = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (name, after) = rest.split_once("=\"")?;
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return None;
        }
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (at, '"') => break at,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c @ ('\\' | '"') => value.push(c),
                    _ => return None,
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((name.to_owned(), value));
        rest = &after[end + 1..];
        if let Some(next) = rest.strip_prefix(',') {
            rest = next;
            if rest.is_empty() {
                return None;
            }
        } else if !rest.is_empty() {
            return None;
        }
    }
    Some(labels)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::metrics::{SoakLabels, SoakMetrics};

    fn labels(host: &str) -> SoakLabels {
        SoakLabels {
            soak: "20261206T120000-ab12".into(),
            host: host.into(),
            job: None,
            rank: None,
            command: "python train.py".into(),
        }
    }

    const ME: ProcessIdentity = ProcessIdentity {
        pid: 4242,
        start_ticks: 987_654,
    };

    #[test]
    fn a_marked_file_reads_back_whose_it_is_running_and_after_its_verdict() {
        let host = "node \"7\"\\\nb";
        let mut metrics = SoakMetrics::new(&labels(host), 100).marked(&labels(host), ME);
        let mut text = String::new();
        metrics.render(&mut text);
        assert!(text.starts_with("# unilab soak=\""), "{text}");
        let mark = read(&text).unwrap();
        assert_eq!(
            mark,
            Mark {
                soak: "20261206T120000-ab12".into(),
                supervised: Some((host.into(), ME)),
                running: true,
            }
        );
        metrics.finish(true, 1.0);
        metrics.render(&mut text);
        assert!(!read(&text).unwrap().running);
    }

    #[test]
    fn an_earlier_unilabs_file_is_told_by_its_running_series_alone() {
        let mut metrics = SoakMetrics::new(&labels("n"), 100);
        let mut text = String::new();
        metrics.render(&mut text);
        let mark = read(&text).unwrap();
        assert_eq!((mark.supervised, mark.running), (None, true));
        metrics.finish(false, 1.0);
        metrics.render(&mut text);
        assert!(!read(&text).unwrap().running);
    }

    #[test]
    fn what_unilab_did_not_write_has_no_mark() {
        let marked = line("a", "h", ME);
        for text in [
            String::new(),
            "# old\n".into(),
            "node_load1 0.5\n# EOF\n".into(),
            // Marked, but no running series, or another soak's, or a value not 0 or 1.
            format!("{marked}\n# EOF\n"),
            format!("{marked}\nunilab_soak_running{{soak=\"b\"}} 0\n"),
            format!("{marked}\nunilab_soak_running{{soak=\"a\"}} 2\n"),
            // A line that only looks like the mark.
            "# unilab soak=\"a\",host=\"h\",supervisor_pid=\"x\",supervisor_start_ticks=\"1\"\nunilab_soak_running{soak=\"a\"} 1\n".into(),
            "# unilab soak=\"a\nunilab_soak_running{soak=\"a\"} 1\n".into(),
        ] {
            assert_eq!(read(&text), None, "{text}");
        }
        assert_eq!(
            parse_labels("a=\"1\",b=\"x\\\"y\""),
            Some(vec![("a".into(), "1".into()), ("b".into(), "x\"y".into())])
        );
        for bad in ["a=\"1\",", "=\"1\"", "a=\"1", "a=\"\\t\"", "a=\"1\"b"] {
            assert_eq!(parse_labels(bad), None, "{bad}");
        }
    }
}
