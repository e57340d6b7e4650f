//! Standard output carries data only; diagnostics go to standard error.
//!
//! `-q` silences notes and warnings, `-v` adds detail; errors are always shown. Output is
//! buffered and flushed at the end of a command (and after each batch of `--follow`). A closed
//! standard error is ignored rather than allowed to abort the command.

use std::io::{BufWriter, Stdout, Write};

use crate::error::{Error, stdout_error};
use crate::style::{ColorChoice, Palette, Tone};
use crate::time::{Clock, SystemClock, unix_seconds};

/// Times and sizes as people read them: they live in [`crate::text`], which the layers below
/// the commands (the soak report) may use too.
pub(crate) use crate::text::{bytes, duration, human_time};

pub(crate) struct Output {
    pub json: bool,
    quiet: bool,
    /// Colours for standard output (never under `--json`).
    pub paint: Palette,
    /// Colours for standard error.
    pub paint_stderr: Palette,
    stdout: BufWriter<Stdout>,
}

impl Output {
    pub(crate) fn new(json: bool, quiet: bool, color: ColorChoice) -> Self {
        let paint = if json {
            Palette::PLAIN
        } else {
            Palette::stdout(color)
        };
        Self {
            json,
            quiet,
            paint,
            paint_stderr: Palette::stderr(color),
            stdout: BufWriter::new(std::io::stdout()),
        }
    }

    /// One line of data on standard output, guarded for a terminal (see [`guarded`]): the values
    /// in it escaped already by [`crate::text::foreign`].
    pub(crate) fn line(&mut self, text: &str) -> Result<(), Error> {
        self.stdout
            .write_all(guarded(text).as_bytes())
            .and_then(|()| self.stdout.write_all(b"\n"))
            .map_err(stdout_error)
    }

    /// One JSON value, on one line.
    pub(crate) fn json_line(&mut self, value: &serde_json::Value) -> Result<(), Error> {
        serde_json::to_writer(&mut self.stdout, value).map_err(|e| stdout_error(e.into()))?;
        self.stdout.write_all(b"\n").map_err(stdout_error)
    }

    /// What `write` writes, on standard output.
    pub(crate) fn stream<T, E>(
        &mut self,
        write: impl FnOnce(&mut BufWriter<Stdout>) -> Result<T, E>,
    ) -> Result<T, E> {
        write(&mut self.stdout)
    }

    /// Bytes exactly as given, on standard output.
    pub(crate) fn raw(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.stdout.write_all(bytes).map_err(stdout_error)
    }

    pub(crate) fn is_quiet(&self) -> bool {
        self.quiet
    }

    pub(crate) fn flush(&mut self) -> Result<(), Error> {
        self.stdout.flush().map_err(stdout_error)
    }

    /// Something a person may want to know; silenced by `-q`.
    pub(crate) fn note(&self, text: &str) {
        if !self.quiet {
            let _ = writeln!(std::io::stderr(), "{}", crate::text::composed(text, &[]));
        }
    }

    pub(crate) fn warn(&self, text: &str) {
        if !self.quiet {
            let _ = writeln!(
                std::io::stderr(),
                "{} {}",
                self.paint_stderr.paint(Tone::Warn, "warning:"),
                crate::text::composed(text, &[])
            );
        }
    }
}

/// Rows as a table whose columns are as wide as their widest cell (two spaces apart), so that a
/// long name never shifts the others. Cells must not hold tabs or newlines.
pub(crate) fn table<R: AsRef<[String]>>(header: &[&str], rows: &[R]) -> Vec<String> {
    use std::io::Write as _;
    // Colour codes in a cell take no columns.
    let mut writer = tabwriter::TabWriter::new(Vec::new()).padding(2).ansi(true);
    let line = |cells: Vec<&str>| cells.join("\t");
    let _ = writeln!(writer, "{}", line(header.to_vec()));
    for row in rows {
        let cells: Vec<std::borrow::Cow<'_, str>> = row.as_ref().iter().map(|c| cell(c)).collect();
        let _ = writeln!(
            writer,
            "{}",
            line(cells.iter().map(AsRef::as_ref).collect())
        );
    }
    let _ = writer.flush();
    let bytes = writer.into_inner().unwrap_or_default();
    String::from_utf8_lossy(&bytes)
        .lines()
        .map(|l| l.trim_end().to_owned())
        .collect()
}

/// A cell without the characters that would break its table's layout, its control
/// characters escaped before the columns are measured.
fn cell(text: &str) -> std::borrow::Cow<'_, str> {
    guarded(text.split(['\t', '\n']).next().unwrap_or(""))
}

/// A line unilab composed, on its way to the terminal: its own colour codes, line breaks and
/// tabs kept, every other control character escaped (see [`crate::text::composed`]; a value is
/// escaped where it is put into the line, by [`crate::text::foreign`]).
fn guarded(text: &str) -> std::borrow::Cow<'_, str> {
    crate::text::composed(text, crate::style::own_codes())
}

pub(crate) use crate::text::shell_command;

/// How long ago a Unix-seconds time was, as [`duration`] writes it.
pub(crate) fn age(since_unix_seconds: f64) -> String {
    duration(unix_seconds(SystemClock.now_us()) - since_unix_seconds)
}

#[cfg(test)]
mod tests {
    use super::{guarded, shell_command, table};

    #[test]
    fn commands_are_shown_as_a_shell_takes_them_back() {
        let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            shell_command(&args(&["python3", "train.py"])),
            "python3 train.py"
        );
        assert_eq!(
            shell_command(&args(&["sh", "-c", "echo $HOME; exit 1"])),
            "sh -c 'echo $HOME; exit 1'"
        );
    }

    #[test]
    fn only_the_palettes_own_codes_reach_the_terminal() {
        let red = crate::style::Palette::colored(true).status("failed");
        assert_eq!(guarded(&red), red, "unilab's colours are kept");
        assert_eq!(
            guarded("a\tb\n\u{1b}[2J\u{1b}]0;title\u{7}\u{1b}]52;c;aGk=\u{7}\r"),
            "a\tb\n\\u{1b}[2J\\u{1b}]0;title\\u{7}\\u{1b}]52;c;aGk=\\u{7}\\r"
        );
        let cells = table(
            &["CMD", "N"],
            &[vec!["x\u{1b}[2Jy".to_owned(), "1".to_owned()]],
        );
        assert_eq!(cells[1], "x\\u{1b}[2Jy  1");
    }

    #[test]
    fn table_columns_fit_their_widest_cell() {
        let rows = vec![
            vec!["a".to_owned(), "1".to_owned()],
            vec!["a-much-longer-name".to_owned(), "22".to_owned()],
        ];
        let lines = table(&["NAME", "N"], &rows);
        let at: Vec<usize> = lines
            .iter()
            .map(|l| l.rfind(' ').map_or(0, |i| i + 1))
            .collect();
        assert!(at.windows(2).all(|w| w[0] == w[1]), "{lines:?}");
    }
}
