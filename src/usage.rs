//! A command line clap could not parse, as unilab shows it (exit 2): clap's message, a tip when
//! the command to run was given without the `--` before it, and the help of the subcommand the
//! line was for (`unilab soak run --help`), not the top level's.

use std::ffi::OsString;

use clap::error::{ContextKind, ContextValue, ErrorKind};

use crate::diagnostic::Exit;
use crate::style::{ColorChoice, Palette};
use crate::text::composed;

/// A usage error, with the subcommand it was made in.
pub(crate) struct UsageError {
    error: clap::Error,
    /// The subcommand the line reached, as typed before its options: `unilab soak run`.
    command: String,
}

impl UsageError {
    /// `error`, from parsing `args` (the program's name first) against `top`.
    pub(crate) fn new(mut error: clap::Error, mut top: clap::Command, args: &[OsString]) -> Self {
        // Built, so that the global options are every subcommand's too.
        top.build();
        let path = subcommand_path(&top, args);
        let command = path
            .iter()
            .map(|c| c.get_name())
            .collect::<Vec<_>>()
            .join(" ");
        if let Some(leaf) = path.last()
            && missed_separator(&error, leaf)
        {
            let tip = format!(
                "put `--` before the command to run: `{command} [OPTIONS] -- CMD [ARGS]...`"
            );
            let mut tips = match error.get(ContextKind::Suggested) {
                Some(ContextValue::StyledStrs(tips)) => tips.clone(),
                _ => Vec::new(),
            };
            tips.push(tip.into());
            error.insert(ContextKind::Suggested, ContextValue::StyledStrs(tips));
        }
        UsageError { error, command }
    }

    /// The text shown on standard error: in unilab's colours when standard error takes them,
    /// with the control characters of what the user typed escaped like every other message
    /// (plain text when there are any: escaping would break clap's styling).
    pub(crate) fn render(&self, color: ColorChoice) -> String {
        let styled = self.error.render();
        let plain = styled.to_string();
        let text = if Palette::stderr(color).is_on() && composed(&plain, &[]) == plain {
            // clap's styles are unilab's (`style::clap_styles`).
            styled.ansi().to_string()
        } else {
            composed(&plain, &[]).into_owned()
        };
        self.subcommand_help(text)
    }

    /// clap ends with "For more information, try '--help'.": which `--help` is said in full.
    fn subcommand_help(&self, text: String) -> String {
        const TRY: &str = "For more information, try '";
        let Some(at) = text.rfind(TRY) else {
            return text;
        };
        let start = at + TRY.len();
        let Some(len) = text[start..].find("'.") else {
            return text;
        };
        let said = &text[start..start + len];
        let full = said.replacen("--help", &format!("{} --help", self.command), 1);
        format!("{}{full}{}", &text[..start], &text[start + len..])
    }

    /// The error as one JSON object, for `--json`: `error` names what was missing or wrong (the
    /// arguments clap lists on the lines below its first), `hint` gives clap's tips and the
    /// subcommand's help.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        let text = self.error.render().to_string();
        let mut lines = text.lines();
        let first = lines
            .next()
            .unwrap_or_default()
            .trim_start_matches("error: ")
            .to_owned();
        let rest: Vec<&str> = lines
            .by_ref()
            .take_while(|line| !line.trim().is_empty())
            .map(str::trim)
            .collect();
        let message = match (rest.is_empty(), first.ends_with(':')) {
            (true, _) => first,
            (false, true) => format!("{first} {}", rest.join(", ")),
            (false, false) => format!("{first} {}", rest.join(" ")),
        };
        let mut hints: Vec<String> = text
            .lines()
            .filter_map(|line| line.trim().strip_prefix("tip: "))
            .map(str::to_owned)
            .collect();
        hints.push(format!("see `{} --help`", self.command));
        serde_json::json!({
            "error": composed(&message, &[]),
            "causes": [],
            "hint": composed(&hints.join("; "), &[]),
            "exit_code": Exit::Usage.code(),
        })
    }
}

/// The commands `args` goes through from `top`: `[unilab, soak, run]`. Options are stepped over
/// (with their values when they take one, as a separate argument); the walk stops at `--`.
fn subcommand_path<'a>(top: &'a clap::Command, args: &[OsString]) -> Vec<&'a clap::Command> {
    let mut path = vec![top];
    let mut current = top;
    let mut args = args.iter().skip(1);
    while let Some(arg) = args.next() {
        let Some(arg) = arg.to_str() else {
            continue;
        };
        let takes_value = |matches: &dyn Fn(&clap::Arg) -> bool| {
            current
                .get_arguments()
                .find(|a| matches(a))
                .is_some_and(|a| a.get_action().takes_values())
        };
        if arg == "--" {
            break;
        } else if let Some(long) = arg.strip_prefix("--") {
            if !long.contains('=') && takes_value(&|a| a.get_long() == Some(long)) {
                args.next();
            }
        } else if let Some(shorts) = arg.strip_prefix('-').filter(|s| !s.is_empty()) {
            let mut chars = shorts.chars();
            if let (Some(short), None) = (chars.next(), chars.next())
                && takes_value(&|a| a.get_short() == Some(short))
            {
                args.next();
            }
        } else if let Some(sub) = current.find_subcommand(arg) {
            path.push(sub);
            current = sub;
        }
    }
    path
}

/// Whether `error` comes from a command to run given without the `--` before it, to a
/// subcommand that takes one after `--` (`soak run`, `mps exec`): a word where none is expected,
/// or the command missing altogether.
fn missed_separator(error: &clap::Error, command: &clap::Command) -> bool {
    let Some(last) = command.get_arguments().find(|a| a.is_last_set()) else {
        return false;
    };
    match (error.kind(), error.get(ContextKind::InvalidArg)) {
        (ErrorKind::UnknownArgument, Some(ContextValue::String(arg))) => !arg.starts_with('-'),
        (ErrorKind::MissingRequiredArgument, Some(ContextValue::Strings(missing))) => {
            let Some(name) = last.get_value_names().and_then(|names| names.first()) else {
                return false;
            };
            let shown = format!("<{name}>");
            missing.iter().any(|m| m.starts_with(&shown))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn usage(line: &[&str]) -> UsageError {
        let args: Vec<OsString> = line.iter().map(OsString::from).collect();
        let error = crate::cli::Cli::command()
            .try_get_matches_from(&args)
            .expect_err("the line is wrong");
        UsageError::new(error, crate::cli::Cli::command(), &args)
    }

    #[test]
    fn the_subcommand_is_found_past_global_options_and_their_values() {
        let error = usage(&[
            "unilab", "--root", "soak", "--color", "never", "soak", "show",
        ]);
        assert_eq!(error.command, "unilab soak show");
        assert_eq!(
            usage(&["unilab", "-q", "mps", "nosuch"]).command,
            "unilab mps"
        );
        assert_eq!(usage(&["unilab", "nosuch"]).command, "unilab");
    }

    #[test]
    fn clap_still_ends_with_the_sentence_that_names_the_help() {
        // If clap rewords its last line, the subcommand's help is no longer named: this fails.
        let text = usage(&["unilab", "soak", "show"]).render(ColorChoice::Never);
        assert!(
            text.ends_with("For more information, try 'unilab soak show --help'.\n"),
            "{text}"
        );
    }
}
