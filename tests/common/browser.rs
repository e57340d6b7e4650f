//! A real browser for the HTML pages' tests: headless Chromium, if this host has one, run on a
//! page with a profile and `HOME` of the test's own.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A browser, if this host has one: `chromium`, or what `UNILAB_TEST_CHROMIUM` names. CI
/// installs it; there its absence fails the test rather than skipping it.
pub fn chromium() -> Option<PathBuf> {
    if let Some(named) = std::env::var_os("UNILAB_TEST_CHROMIUM") {
        return Some(PathBuf::from(named));
    }
    let found = ["chromium", "chromium-browser"].iter().find_map(|name| {
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    });
    assert!(
        found.is_some() || !super::under_ci(),
        "CI must install chromium for the report tests (apt-get install chromium)"
    );
    found
}

/// The page without its scripts: what a reader with script off gets.
pub fn strip_scripts(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut rest = html;
    while let Some(at) = rest.find("<script") {
        out.push_str(&rest[..at]);
        let end = rest[at..].find("</script>").expect("a closed script") + at;
        rest = &rest[end + "</script>".len()..];
    }
    out.push_str(rest);
    out
}

/// Headless Chromium on `page` with `args`, its log returned; it must succeed.
pub fn chromium_run(browser: &Path, home: &Path, page: &Path, args: &[String]) -> String {
    let profile = home.join("chromium-profile");
    let run = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--enable-logging=stderr",
        ])
        .args(args)
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("file://{}", page.display()))
        .env("HOME", home)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "chromium failed: {log}");
    log + &String::from_utf8_lossy(&run.stdout)
}

/// A screenshot of `page` in a window `width` × `height` pixels, into `shot`, with no error on
/// the page's console; the PNG's bytes.
pub fn screenshot(
    browser: &Path,
    home: &Path,
    page: &Path,
    (width, height): (u32, u32),
    shot: &Path,
) -> Vec<u8> {
    let log = chromium_run(
        browser,
        home,
        page,
        &[
            format!("--window-size={width},{height}"),
            format!("--screenshot={}", shot.display()),
        ],
    );
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("CONSOLE") && (l.contains("Uncaught") || l.contains("ERROR")))
        .collect();
    assert!(
        errors.is_empty(),
        "{} at {width} px: {errors:?}",
        page.display()
    );
    let png = std::fs::read(shot).expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG"), "{} bytes", png.len());
    png
}

/// The page's DOM once its scripts ran, in a window `width` pixels wide.
pub fn chromium_dom(browser: &Path, home: &Path, page: &Path, width: u32) -> String {
    chromium_run(
        browser,
        home,
        page,
        &[format!("--window-size={width},2400"), "--dump-dom".into()],
    )
}

/// Where a test keeps its screenshots: `name` in the target directory, else (a user who cannot
/// write there, as in CI's unprivileged run) in `fallback`.
pub fn screenshot_dir(name: &str, fallback: &Path) -> PathBuf {
    let kept = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    if std::fs::create_dir_all(&kept).is_ok() && is_writable(&kept) {
        return kept;
    }
    let fallback = fallback.join(name);
    std::fs::create_dir_all(&fallback).unwrap();
    fallback
}

fn is_writable(dir: &Path) -> bool {
    let probe = dir.join(format!(".probe-{}", std::process::id()));
    let written = std::fs::write(&probe, b"").is_ok();
    let _ = std::fs::remove_file(&probe);
    written
}
