//! A command refused: it ends with the exit code its class of failure is given (DESIGN.md, "Exit
//! codes") and says why on standard error. One helper for the many tests that check no more than
//! that, so that each failure shows the command and its whole output.

use std::borrow::BorrowMut;

/// Runs `cmd`, which must exit with `exit` and say each of `saying` on standard error, and gives
/// its standard error back for further checks. When it does not, the test fails showing the
/// command, its exit status, what it printed on both streams and which fragments were missing.
#[track_caller]
pub fn refused(mut cmd: impl BorrowMut<assert_cmd::Command>, exit: i32, saying: &[&str]) -> String {
    let cmd = cmd.borrow_mut();
    let output = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?} could not be run: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let missing: Vec<&&str> = saying.iter().filter(|s| !stderr.contains(**s)).collect();
    assert!(
        output.status.code() == Some(exit) && missing.is_empty(),
        "expected exit {exit} saying {saying:?}\ncommand: {cmd:?}\nstatus: {}\nmissing from \
         stderr: {missing:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status,
    );
    stderr
}
