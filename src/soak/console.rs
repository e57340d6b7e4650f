//! The supervisor's terminal, shared by the command's relayed output and the live status line.
//!
//! The status line is drawn on standard error only when that is a terminal that can take it (not
//! `TERM=dumb`) and unilab is not quiet. It is cleared before any of the command's output reaches
//! the terminal and redrawn after it, and drawn only while the cursor is at the start of a line,
//! so it never splices itself into the command's output. Under `--json` the command's standard
//! output goes to standard error, leaving standard output to unilab's one JSON object.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;

/// One of the command's output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

#[derive(Debug)]
pub(crate) struct Console {
    /// Whether the live status line is drawn at all.
    status_line: bool,
    /// Under `--json`: the command's standard output is relayed to standard error.
    stdout_to_stderr: bool,
    /// `-q`: no warnings of the supervisor's own.
    quiet: bool,
    stdout_is_terminal: bool,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// The terminal's cursor is at the start of a line (nothing relayed, or it ended in `\n`).
    at_line_start: bool,
    /// The status line is on the screen now.
    drawn: bool,
    /// The latest status text, redrawn after relayed output.
    latest: Option<String>,
}

const CLEAR_LINE: &[u8] = b"\r\x1b[2K";

impl Console {
    /// The console of this process: a status line only on a capable terminal, and not when
    /// `quiet`; the command's standard output kept off ours under `--json`.
    pub(crate) fn of_this_process(quiet: bool, json: bool) -> Self {
        let capable = std::env::var_os("TERM").is_none_or(|term| term != "dumb");
        Self {
            quiet,
            ..Self::new(
                std::io::stderr().is_terminal() && capable && !quiet,
                json,
                std::io::stdout().is_terminal(),
            )
        }
    }

    pub(crate) fn new(status_line: bool, stdout_to_stderr: bool, stdout_is_terminal: bool) -> Self {
        Self {
            status_line,
            stdout_to_stderr,
            quiet: false,
            stdout_is_terminal,
            state: Mutex::new(State {
                at_line_start: true,
                drawn: false,
                latest: None,
            }),
        }
    }

    pub(crate) fn shows_status(&self) -> bool {
        self.status_line
    }

    /// Passes a chunk of the command's output through. A closed or failing terminal is ignored:
    /// it must not stop the command.
    pub(crate) fn relay(&self, stream: Stream, bytes: &[u8]) {
        let to_stderr = stream == Stream::Stderr || self.stdout_to_stderr;
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let on_terminal = self.status_line && (to_stderr || self.stdout_is_terminal);
        if on_terminal {
            clear(&mut state);
        }
        let written = if to_stderr {
            let mut err = std::io::stderr().lock();
            err.write_all(bytes).and_then(|()| err.flush())
        } else {
            let mut out = std::io::stdout().lock();
            out.write_all(bytes).and_then(|()| out.flush())
        };
        let _ = written;
        if on_terminal {
            if let Some(last) = bytes.last() {
                state.at_line_start = *last == b'\n';
            }
            draw(&mut state);
        }
    }

    /// Shows `text` as the status line (when there is one).
    pub(crate) fn status(&self, text: String) {
        if !self.status_line {
            return;
        }
        if let Ok(mut state) = self.state.lock() {
            state.latest = Some(text);
            draw(&mut state);
        }
    }

    /// A warning of the supervisor's own, on standard error, between the command's lines
    /// (none under `-q`).
    pub(crate) fn warn(&self, text: &str) {
        self.say("warning", text);
    }

    /// What the supervisor is doing, when a person waits on it (stopping the tree), on standard
    /// error as [`warn`](Self::warn) (none under `-q`).
    pub(crate) fn note(&self, text: &str) {
        self.say("unilab", text);
    }

    fn say(&self, prefix: &str, text: &str) {
        if self.quiet {
            return;
        }
        let line = format!("{prefix}: {}\n", crate::text::foreign(text));
        if let Ok(mut state) = self.state.lock() {
            clear(&mut state);
            let mut err = std::io::stderr().lock();
            if !state.at_line_start {
                let _ = err.write_all(b"\n");
                state.at_line_start = true;
            }
            let _ = err.write_all(line.as_bytes()).and_then(|()| err.flush());
            draw(&mut state);
        }
    }

    /// Removes the status line for good.
    pub(crate) fn finish(&self) {
        if let Ok(mut state) = self.state.lock() {
            clear(&mut state);
            state.latest = None;
        }
    }
}

fn clear(state: &mut State) {
    if state.drawn {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(CLEAR_LINE).and_then(|()| err.flush());
        state.drawn = false;
    }
}

/// Draws the latest status, but only at the start of a line: never in the middle of the
/// command's own partial line.
fn draw(state: &mut State) {
    let Some(text) = &state.latest else {
        return;
    };
    if !state.at_line_start {
        return;
    }
    let mut err = std::io::stderr().lock();
    let _ = err
        .write_all(CLEAR_LINE)
        .and_then(|()| err.write_all(text.as_bytes()))
        .and_then(|()| err.flush());
    state.drawn = true;
}
