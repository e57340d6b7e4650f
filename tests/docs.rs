//! The README and the pages of `docs/`: what they tell a new user to run is what the project
//! runs, and every link between them leads somewhere.
//!
//! The README and the scripts it names are compiled in, so that these tests read no file of the
//! source tree at run time but the pages whose links they follow (and skip, saying so, where the
//! tree cannot be read: as `nobody` in CI).

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

const README: &str = include_str!("../README.md");
const QUICKSTART: &str = include_str!("../scripts/quickstart.sh");
const CI: &str = include_str!("../.ci/run");

/// The lines of the first fenced block after the line that starts with `marker`, without the
/// fences.
fn block_after<'a>(text: &'a str, marker: &str) -> Option<Vec<&'a str>> {
    let mut lines = text.lines().skip_while(|line| !line.starts_with(marker));
    lines.next()?;
    let mut lines = lines.skip_while(|line| !line.starts_with("```"));
    lines.next()?;
    Some(lines.take_while(|line| !line.starts_with("```")).collect())
}

/// The lines of `scripts/quickstart.sh` that run unilab (through the script's `unilab`
/// function, or in a `$(unilab ...)`), each with the lines that continue it, in order.
fn quickstart_commands(script: &str) -> Vec<&str> {
    let mut commands = Vec::new();
    let mut continued = false;
    for line in script.lines() {
        if continued || line.starts_with("unilab ") || line.contains("$(unilab ") {
            commands.push(line);
            continued = line.ends_with('\\');
        }
    }
    commands
}

/// The README's quick start showed a `soak run` that `scripts/quickstart.sh` did not run: the
/// artifact under the throw-away root where the script keeps it aside, and no `--report`, so
/// whoever typed it got something else than the script gave and no report to open. The README's
/// block is now the script's lines that run unilab, as the script writes them.
#[test]
fn the_readmes_quick_start_block_is_what_scripts_quickstart_sh_runs() {
    let block = block_after(README, "<!-- quickstart")
        .expect("the README has a block after a `<!-- quickstart` comment");
    let commands = quickstart_commands(QUICKSTART);
    assert!(
        commands
            .iter()
            .any(|line| line.starts_with("unilab soak run ")),
        "scripts/quickstart.sh runs no `unilab soak run`: {commands:#?}"
    );
    assert_eq!(
        block, commands,
        "the README's quick-start block differs from what scripts/quickstart.sh runs"
    );
    assert!(
        README.contains("`scripts/quickstart.sh`"),
        "the README names the script"
    );
}

#[test]
fn the_test_command_the_readme_gives_is_the_one_ci_runs() {
    let setup = block_after(README, "## Set-up: two commands")
        .expect("the README has its two commands in a block");
    assert!(
        setup
            .iter()
            .any(|line| line.starts_with("scripts/test.sh ")),
        "the README's two commands name `scripts/test.sh`: {setup:#?}"
    );
    assert!(
        CI.lines().any(|line| line == "scripts/test.sh"),
        ".ci/run runs `scripts/test.sh`, the README's test command"
    );
}

/// The README promises the suite passes under umask 002, but CI ran it under its own umask
/// (022), and a unit test that held only under 022 stopped the README's test command in a clone
/// made under 002. `.ci/run` sets umask 002 before the test command and the unprivileged run,
/// and changes it nowhere else.
#[test]
fn ci_runs_the_test_command_and_the_unprivileged_run_under_umask_002() {
    let line_of = |wanted: &str| CI.lines().position(|line| line == wanted);
    let umasks: Vec<(usize, &str)> = CI
        .lines()
        .enumerate()
        .filter(|(_, line)| line.trim_start().starts_with("umask"))
        .collect();
    let [(set, "umask 002")] = umasks[..] else {
        panic!(".ci/run sets the umask once, to 002: {umasks:?}");
    };
    for command in ["scripts/test.sh", "scripts/test-unprivileged.sh"] {
        let at = line_of(command).unwrap_or_else(|| panic!(".ci/run runs `{command}`"));
        assert!(set < at, ".ci/run sets umask 002 only after `{command}`");
    }
    assert!(
        README.contains("passes under umask 002"),
        "the README says what CI holds it to"
    );
}

#[test]
fn the_readme_starts_small() {
    let lines = README.lines().count();
    assert!(
        lines <= 250,
        "the README has {lines} lines: what is not a newcomer's belongs in docs/"
    );
}

/// GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings (outside code blocks), numbered as GitHub numbers a
/// repeated one.
fn anchors(page: &str) -> HashSet<String> {
    let mut found = HashSet::new();
    let mut fenced = false;
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let base = anchor(line.trim_start_matches('#'));
        let mut candidate = base.clone();
        let mut n = 0;
        while !found.insert(candidate.clone()) {
            n += 1;
            candidate = format!("{base}-{n}");
        }
    }
    found
}

/// Every `](target)` of a page that is neither a URL nor mail.
fn relative_links(page: &str) -> Vec<&str> {
    page.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &page[at + 2..];
            Some(&rest[..rest.find(')')?])
        })
        .filter(|target| !target.contains("://") && !target.starts_with("mailto:"))
        .collect()
}

#[test]
fn every_relative_link_of_the_readme_and_docs_leads_to_a_file_and_heading_that_exist() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let Ok(entries) = fs::read_dir(repo.join("docs")) else {
        eprintln!(
            "skipped: `{}` cannot be read here",
            repo.join("docs").display()
        );
        return;
    };
    let mut pages: Vec<PathBuf> = entries
        .filter_map(|entry| Some(entry.ok()?.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    pages.push(repo.join("README.md"));
    assert!(pages.len() > 1, "docs/ holds pages");
    let mut broken = Vec::new();
    let (mut checked, mut to_headings) = (0, 0);
    for page in &pages {
        let text = fs::read_to_string(page).expect("a page of the docs reads as text");
        for link in relative_links(&text) {
            checked += 1;
            let (file, heading) = link.split_once('#').unwrap_or((link, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                page.parent().expect("a page is in a directory").join(file)
            };
            if !target.exists() {
                broken.push(format!("{}: {link}: no such file", page.display()));
                continue;
            }
            if !heading.is_empty() && target.extension().is_some_and(|ext| ext == "md") {
                to_headings += 1;
                let target_text = fs::read_to_string(&target).expect("a linked page reads");
                if !anchors(&target_text).contains(heading) {
                    broken.push(format!("{}: {link}: no such heading", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(
        checked > 0 && to_headings > 0,
        "links found: {checked}, to a heading: {to_headings}"
    );
}

#[test]
fn a_headings_anchor_is_githubs() {
    assert_eq!(anchor(" `unilab snapshot [DIR]`"), "unilab-snapshot-dir");
    assert_eq!(anchor(" The original's usage"), "the-originals-usage");
    assert_eq!(
        anchor(" Where unilab departs from its design, and why"),
        "where-unilab-departs-from-its-design-and-why"
    );
    let page = "# A\n## B\n```sh\n# B\n```\n## B\n";
    assert_eq!(
        anchors(page),
        HashSet::from(["a".into(), "b".into(), "b-1".into()])
    );
}
