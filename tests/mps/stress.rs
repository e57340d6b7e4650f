//! The races and kills of [`super::races`] and [`super::shared`] for many rounds, run by hand:
//! `cargo test --release --test integration mps::stress:: -- --ignored --nocapture`.

use super::races::{start_crash_loop, starts_and_stops_race};
use super::shared::shared_kill_rounds;

#[test]
#[ignore = "stress: cargo test --test integration mps::stress:: -- --ignored"]
fn stress_concurrent_starts_and_stops() {
    for n in [4, 8] {
        starts_and_stops_race(n, 20);
    }
}

#[test]
#[ignore = "stress: cargo test --test integration mps::stress:: -- --ignored --nocapture"]
fn stress_start_crash_loop() {
    let orphaned = start_crash_loop(60);
    eprintln!(
        "60 rounds: {orphaned} kills left a daemon with no record until the next command settled it"
    );
}

#[test]
#[ignore = "stress: cargo test --release --test integration mps::stress:: -- --ignored --nocapture"]
fn stress_shared_ranks_killed_at_random() {
    let left = shared_kill_rounds(25, 12);
    eprintln!("25 rounds of 12 ranks: {left} left a recorded daemon for the epilog to stop");
}
