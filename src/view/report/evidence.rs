//! What tells why, on the page: the evidence captured before the tree was signalled, what the
//! verdict found and the last lines of the output, laid out from what `soak show` says of them
//! ([`Explained`]).

use std::fmt::Write as _;

use super::html::{escape, list_html, pre_html, warnings_html};
use crate::read::record::SoakRecord;
use crate::view::explained::{EvidenceExplained, Excerpt, Explained, last_lines};

/// What tells why, right after the verdict: the evidence captured before the tree was signalled,
/// what the verdict found, GPUs not given back, and the last lines of the output — the lines
/// `soak show` prints first. Nothing for a soak with nothing to tell that did not fail.
pub(super) fn evidence(record: &SoakRecord) -> String {
    let explained = record
        .found
        .as_ref()
        .map(Explained::of)
        .filter(|e| !e.is_empty());
    if explained.is_none() && record.outcome.status != "failed" {
        return String::new();
    }
    let mut html = String::from("<section class=\"evidence\"><h2>Evidence</h2>");
    if let Some(explained) = &explained {
        explained_html(&mut html, explained);
    }
    let tails = &record.output_tail;
    for (key, tail) in [("stdout", &tails.stdout), ("stderr", &tails.stderr)] {
        let tail = last_lines(tail);
        if !tail.is_empty() {
            let title = format!(
                "last {} of {key}",
                crate::text::count(tail.len() as u64, "line")
            );
            let lines = tail.iter().map(|l| (*l).to_owned()).collect();
            pre_html(
                &mut html,
                &title,
                &Excerpt {
                    lines,
                    left_out: None,
                },
            );
        }
    }
    html.push_str("</section>");
    html
}

/// The evidence (each process in a box: its threads, its stacks pre-formatted), the findings
/// and the warnings, each line escaped.
fn explained_html(html: &mut String, explained: &Explained) {
    // The job alarm's capture first: it was made first.
    for evidence in [&explained.job_evidence, &explained.evidence]
        .into_iter()
        .flatten()
    {
        evidence_html(html, evidence);
    }
    if !explained.findings.is_empty() {
        html.push_str("<div class=\"findings\">");
        list_html(
            html,
            explained.findings.iter().map(|(l, f)| (*l, f.as_str())),
        );
        html.push_str("</div>");
    }
    warnings_html(html, &explained.warnings);
}

/// One capture: its summary, where its ranks stood, each process in a box (its threads, its
/// stacks pre-formatted), then the cgroup, the kernel's lines and what could not be captured.
fn evidence_html(html: &mut String, evidence: &EvidenceExplained) {
    let _ = write!(html, "<p>{}</p>", escape(&evidence.summary));
    if let Some(ranks) = &evidence.ranks {
        let _ = write!(html, "<p class=\"ranks\">{}</p>", escape(ranks));
    }
    for process in &evidence.processes {
        let _ = write!(
            html,
            "<div class=\"process\"><h3>{}</h3>",
            escape(&process.title)
        );
        if !process.command.is_empty() {
            let _ = write!(html, "<code>$ {}</code>", escape(&process.command));
        }
        list_html(html, process.threads.iter().map(|t| ("", t.as_str())));
        if let Some(stack) = &process.kernel_stack {
            pre_html(html, "kernel stack", stack);
        }
        if let Some(stack) = &process.python_stack {
            pre_html(html, "python stack (py-spy)", stack);
        }
        html.push_str("</div>");
    }
    list_html(
        html,
        evidence
            .more_processes
            .iter()
            .map(|m| ("", m.as_str()))
            .chain(evidence.cgroup.iter().map(|c| ("cgroup", c.as_str())))
            .chain(
                evidence
                    .kernel_messages
                    .iter()
                    .map(|l| ("kernel", l.as_str())),
            )
            .chain(
                evidence
                    .unavailable
                    .iter()
                    .map(|u| ("not captured", u.as_str())),
            ),
    );
}
