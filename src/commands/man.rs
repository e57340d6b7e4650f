//! `unilab man`: the manual pages, rendered from the command-line definitions themselves — one
//! page a command, `unilab(1)` and every visible subcommand at every depth (`unilab-soak(1)`,
//! `unilab-soak-run(1)`), each page naming only pages that exist.

use std::path::{Path, PathBuf};

use crate::cli::Cli;
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::output::Output;

/// One manual page: its file name (`unilab-soak-run.1`) and its roff.
struct Page {
    file: String,
    roff: Vec<u8>,
}

/// Every page, the top-level one first. clap_mangen names a page and the subcommands it lists
/// by display name (`unilab-soak`); the help subcommand, which would be listed without a page
/// of its own, is left out, and so are hidden commands.
fn pages() -> Result<Vec<Page>, Error> {
    let mut top = <Cli as clap::CommandFactory>::command().disable_help_subcommand(true);
    top.build();
    let mut pages = Vec::new();
    add_pages(&top, &[], &mut pages)?;
    Ok(pages)
}

/// `command`'s page and its subcommands', `parents` being the display names above it (nearest
/// last).
fn add_pages(
    command: &clap::Command,
    parents: &[String],
    pages: &mut Vec<Page>,
) -> Result<(), Error> {
    let name = command
        .get_display_name()
        .unwrap_or_else(|| command.get_name())
        .to_owned();
    // Every page's footer names unilab, not the subcommand alone (`run 0.1.0`).
    let man = clap_mangen::Man::new(command.clone())
        .source(format!("unilab {}", env!("CARGO_PKG_VERSION")));
    let mut roff = Vec::new();
    man.render(&mut roff)
        .map_err(Error::environment("render the manual pages"))?;
    if !parents.is_empty() {
        // The pages above this one, nearest first: where a reader goes back to.
        let see_also: Vec<String> = parents
            .iter()
            .rev()
            .map(|parent| format!("\\fB{}\\fR(1)", parent.replace('-', "\\-")))
            .collect();
        roff.extend_from_slice(format!(".SH \"SEE ALSO\"\n{}\n", see_also.join(", ")).as_bytes());
    }
    pages.push(Page {
        file: man.get_filename(),
        roff,
    });
    let mut above = parents.to_vec();
    above.push(name);
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        add_pages(sub, &above, pages)?;
    }
    Ok(())
}

/// `unilab man`: the top-level page on standard output; with `--dir`, every page written into
/// that directory (created if need be), and their paths printed.
pub(crate) fn man(dir: Option<&Path>, out: &mut Output) -> Result<Exit, Error> {
    let pages = pages()?;
    let Some(dir) = dir else {
        if let Some(top) = pages.first() {
            out.raw(&top.roff)?;
        }
        return Ok(Exit::Success);
    };
    let write_to =
        |what: &Path| Error::environment(format!("write the manual pages to `{}`", what.display()));
    std::fs::create_dir_all(dir).map_err(write_to(dir))?;
    let mut written: Vec<PathBuf> = Vec::new();
    for page in &pages {
        let path = dir.join(&page.file);
        std::fs::write(&path, &page.roff).map_err(write_to(&path))?;
        written.push(path);
    }
    if out.json {
        let paths = written
            .iter()
            .map(|path| serde_json::Value::from(path.display().to_string()));
        out.json_line(&serde_json::Value::Array(paths.collect()))?;
    } else {
        for path in &written {
            out.line(&path.display().to_string())?;
        }
    }
    Ok(Exit::Success)
}
