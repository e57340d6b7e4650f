//! Colour on a terminal: `--color auto|always|never` and `NO_COLOR`, with one palette for
//! unilab's own messages and clap's (errors, usage, help).
//!
//! `auto` colours a stream only when it is a terminal, `TERM` is not `dumb` and `NO_COLOR` is
//! unset or empty; `always` and `never` are what the user asked for, over `NO_COLOR` (as
//! no-color.org asks of command-line flags). Output under `--json` is never coloured.

use std::ffi::OsString;
use std::io::IsTerminal;

use anstyle::{AnsiColor, Effects, Style};

/// When to colour, as `--color` takes it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    /// On a terminal, unless `NO_COLOR` is set or `TERM=dumb`
    #[default]
    Auto,
    Always,
    Never,
}

impl ColorChoice {
    /// The last `--color` on a command line that clap has not parsed yet (it may not parse at
    /// all, and its error is to be styled as asked): `auto` when absent or not understood.
    pub(crate) fn in_args(args: impl IntoIterator<Item = OsString>) -> Self {
        let mut choice = Self::Auto;
        let mut args = args.into_iter().skip(1);
        while let Some(arg) = args.next() {
            let value = match arg.to_str() {
                Some("--") | None => break,
                Some("--color") => args.next(),
                Some(other) => other.strip_prefix("--color=").map(OsString::from),
            };
            match value.as_ref().and_then(|v| v.to_str()) {
                Some("always") => choice = Self::Always,
                Some("never") => choice = Self::Never,
                Some("auto") => choice = Self::Auto,
                _ => {}
            }
        }
        choice
    }

    /// The same choice for clap's own rendering (help, usage errors).
    pub(crate) fn for_clap(self) -> clap::ColorChoice {
        match self {
            Self::Auto if !auto_allowed() => clap::ColorChoice::Never,
            Self::Auto => clap::ColorChoice::Auto,
            Self::Always => clap::ColorChoice::Always,
            Self::Never => clap::ColorChoice::Never,
        }
    }
}

/// What `NO_COLOR` and `TERM` say about colouring when the user left it to unilab.
fn auto_allowed() -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let dumb = std::env::var_os("TERM").is_some_and(|t| t == "dumb");
    !no_color && !dumb
}

/// What a piece of text says, which decides its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tone {
    /// A failure: `error:`, `[FAIL]`, `failed`, a daemon record that went stale.
    Bad,
    /// A success: `passed`, `[ok]`, a live daemon.
    Good,
    /// Something to look at: `warning:`, `[warn]`, a running soak.
    Warn,
    /// Something aside: `hint:`, `[skip]`, `-v` detail.
    Aside,
}

impl Tone {
    fn style(self) -> Style {
        match self {
            Tone::Bad => AnsiColor::Red.on_default() | Effects::BOLD,
            Tone::Good => AnsiColor::Green.on_default(),
            Tone::Warn => AnsiColor::Yellow.on_default() | Effects::BOLD,
            Tone::Aside => AnsiColor::Cyan.on_default(),
        }
    }
}

/// Every escape sequence the palette writes: each tone's and the reset. Output written for a
/// terminal keeps these and escapes every other control character (see
/// `text::composed`).
pub(crate) fn own_codes() -> &'static [String] {
    static CODES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    CODES.get_or_init(|| {
        let mut codes: Vec<String> = [Tone::Bad, Tone::Good, Tone::Warn, Tone::Aside]
            .iter()
            .flat_map(|tone| {
                let style = tone.style();
                [style.render().to_string(), style.render_reset().to_string()]
            })
            .filter(|code| !code.is_empty())
            .collect();
        // Longest first, so that a code is never cut by a shorter one it starts with.
        codes.sort_by_key(|code| std::cmp::Reverse(code.len()));
        codes.dedup();
        codes
    })
}

/// Colours text for one stream, or leaves it as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Palette {
    on: bool,
}

impl Palette {
    pub const PLAIN: Palette = Palette { on: false };

    pub(crate) const fn colored(on: bool) -> Self {
        Self { on }
    }

    /// The palette for a stream that is (or is not) a terminal.
    pub(crate) fn new(choice: ColorChoice, terminal: bool) -> Self {
        let on = match choice {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => terminal && auto_allowed(),
        };
        Self { on }
    }

    pub(crate) fn stdout(choice: ColorChoice) -> Self {
        Self::new(choice, std::io::stdout().is_terminal())
    }

    pub fn stderr(choice: ColorChoice) -> Self {
        Self::new(choice, std::io::stderr().is_terminal())
    }

    pub(crate) fn is_on(self) -> bool {
        self.on
    }

    pub(crate) fn paint(self, tone: Tone, text: &str) -> String {
        if self.on {
            let style = tone.style();
            format!("{}{text}{}", style.render(), style.render_reset())
        } else {
            text.to_owned()
        }
    }

    /// A status word (`passed`, `failed (stale_progress)`, `live`, `FAIL`...) in its colour.
    pub(crate) fn status(self, word: &str) -> String {
        match tone_of(word) {
            Some(tone) => self.paint(tone, word),
            None => word.to_owned(),
        }
    }
}

/// The tone of a status word, by its first word.
fn tone_of(word: &str) -> Option<Tone> {
    let first = word.split([' ', '(']).next().unwrap_or_default();
    match first.trim() {
        "failed" | "FAIL" | "abandoned" | "interrupted" => Some(Tone::Bad),
        // A daemon record that is not the live process it names.
        "process_gone" | "pid_reused" | "not_owned" => Some(Tone::Bad),
        "passed" | "ok" | "live" => Some(Tone::Good),
        "warn" | "running" | "starting" => Some(Tone::Warn),
        "skip" => Some(Tone::Aside),
        _ => None,
    }
}

/// clap's styles in the same palette: its `error:` as red as unilab's.
pub(crate) fn clap_styles() -> clap::builder::Styles {
    clap::builder::Styles::styled()
        .error(Tone::Bad.style())
        .valid(Tone::Good.style())
        .invalid(Tone::Warn.style())
        .header(Style::new().bold().underline())
        .usage(Style::new().bold().underline())
        .literal(Style::new().bold())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &[&str]) -> Vec<OsString> {
        line.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_last_color_flag_before_the_command_counts() {
        let choice = |line: &[&str]| ColorChoice::in_args(args(line));
        assert_eq!(choice(&["unilab", "soak", "list"]), ColorChoice::Auto);
        assert_eq!(
            choice(&["unilab", "--color", "never", "x"]),
            ColorChoice::Never
        );
        assert_eq!(
            choice(&["unilab", "--color=never", "--color=always"]),
            ColorChoice::Always
        );
        assert_eq!(choice(&["unilab", "--color=sometimes"]), ColorChoice::Auto);
        // What follows `--` belongs to the user's command.
        assert_eq!(
            choice(&["unilab", "soak", "run", "--", "ls", "--color=always"]),
            ColorChoice::Auto
        );
    }

    #[test]
    fn an_explicit_choice_is_kept_and_plain_text_stays_plain() {
        assert!(Palette::new(ColorChoice::Always, false).is_on());
        assert!(!Palette::new(ColorChoice::Never, true).is_on());
        assert!(!Palette::new(ColorChoice::Auto, false).is_on());
        assert_eq!(
            Palette::PLAIN.status("failed (stale_progress)"),
            "failed (stale_progress)"
        );
        let red = Palette::new(ColorChoice::Always, false).status("failed (stale_progress)");
        assert!(red.starts_with("\u{1b}[") && red.contains("failed (stale_progress)"));
        assert_eq!(
            Palette::new(ColorChoice::Always, false).status("exited"),
            "exited"
        );
    }
}
