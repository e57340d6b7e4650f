//! `log verify` and the readers against an archive damaged, truncated, resealed around, taken
//! from another log, or missing: each is caught and named.

use std::path::Path;

use super::*;

/// The records of an archive file, decompressed; and the file written back from them.
fn unpacked(path: &Path) -> Vec<u8> {
    zstd::decode_all(std::fs::File::open(path).unwrap()).unwrap()
}

fn repack(path: &Path, bytes: &[u8]) {
    std::fs::write(path, zstd::encode_all(bytes, 1).unwrap()).unwrap();
}

/// Where the first record's body starts in an unpacked archive: after the magic line, its
/// sequence and length, and its two hashes.
const FIRST_BODY: usize = 22 + 12 + 64;

#[test]
fn a_byte_changed_in_an_archive_fails_verification_and_reading() {
    let root = root_with_v1_archived();
    let file = archive_of(&root, V1_SOAK);
    let good = std::fs::read(&file).unwrap();
    let mut bytes = unpacked(&file);
    bytes[FIRST_BODY + 5] ^= 0x40;
    repack(&file, &bytes);
    refused(
        root.unilab().args(["log", "verify"]),
        5,
        &[
            &format!(
                "the archive `{}` does not hold what the event log committed to",
                file.display()
            ),
            "its contents do not match its hash",
        ],
    );
    root.unilab()
        .args(["soak", "export", V1_SOAK])
        .assert()
        .code(5);
    // A byte of the compressed file itself.
    let mut raw = good.clone();
    let middle = raw.len() / 2;
    raw[middle] ^= 0x01;
    std::fs::write(&file, &raw).unwrap();
    root.unilab().args(["log", "verify"]).assert().code(5);
    // A record's hash and body changed together, so that it holds: the digest catches it.
    let mut bytes = unpacked_from(&good);
    bytes[FIRST_BODY + 5] ^= 0x40;
    let (prev, rest) = bytes[22 + 12..].split_at(32);
    let len = u32::from_le_bytes(bytes[22 + 8..22 + 12].try_into().unwrap()) as usize;
    let body = rest[32..len - 32].to_vec();
    let (stored, _) = unilab::testing::chain::seal(prev.try_into().unwrap(), &body);
    bytes[22 + 12..22 + 12 + len].copy_from_slice(&stored);
    repack(&file, &bytes);
    refused(
        root.unilab().args(["log", "verify"]),
        5,
        &["does not hold what the event log committed to"],
    );
    // Back as it was, it verifies again.
    std::fs::write(&file, &good).unwrap();
    root.unilab().args(["log", "verify"]).assert().success();
}

fn unpacked_from(compressed: &[u8]) -> Vec<u8> {
    zstd::decode_all(compressed).unwrap()
}

/// An archive cut short, or emptied, is caught as well as a changed one.
#[test]
fn a_truncated_archive_fails_verification() {
    let root = root_with_v1_archived();
    root.damaged_on_purpose();
    let file = archive_of(&root, V1_SOAK);
    let bytes = unpacked(&file);
    repack(&file, &bytes[..bytes.len() - 10]);
    refused(
        root.unilab().args(["log", "verify"]),
        5,
        &["ends in the middle of a record"],
    );
    std::fs::write(&file, b"").unwrap();
    refused(
        root.unilab().args(["log", "verify"]),
        5,
        &["not a unilab soak archive"],
    );
}

/// Removed by something other than `log archive`, a record leaves a gap no `soak_archived`
/// event accounts for: beside an archived gap or anywhere else, `log verify` names it.
#[test]
fn a_record_removed_without_an_archive_event_fails_verification() {
    for beside_the_gap in [true, false] {
        let root = root_with_v1_archived();
        let history = stdout_of(&root, &["--json", "history"]);
        let seqs: Vec<u64> = String::from_utf8(history)
            .unwrap()
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["seq"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        // The first record after the first gap, or one in the middle of the live records.
        let gone = if beside_the_gap {
            seqs.windows(2).find(|w| w[1] > w[0] + 1).unwrap()[1]
        } else {
            seqs[seqs.len() - 3]
        };
        raw_write(&root, |txn| {
            let mut events = txn.open_table(unilab::testing::tables::EVENTS).unwrap();
            events.remove(gone).unwrap();
        });
        let verified = json_of(&root, &["log", "verify"]);
        assert_eq!(verified["ok"], false, "{verified}");
        assert_eq!(verified["first_bad_seq"], gone, "{verified}");
        refused(
            root.unilab().args(["log", "verify"]),
            5,
            &[&format!("expected sequence {gone}"), "a record is missing"],
        );
    }
}

/// A record beside an archived gap, changed and sealed again so that its own hash holds: no
/// live record links to it, but the gaps the `soak_archived` event committed to still name its
/// hash — with its archive gone as well.
#[test]
fn a_record_beside_an_archived_gap_resealed_fails_verification() {
    let root = root_with_v1_archived();
    std::fs::remove_file(archive_of(&root, V1_SOAK)).unwrap();
    let verified = json_of(&root, &["log", "verify"]);
    assert_eq!(
        verified["ok"], true,
        "a missing archive is no damage: {verified}"
    );
    assert_eq!(verified["archives"][0]["checked"], false);
    let history = stdout_of(&root, &["--json", "history"]);
    let seqs: Vec<u64> = String::from_utf8(history)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    // The last record before the first gap: the archived record after it linked to it.
    let before_gap = seqs.windows(2).find(|w| w[1] > w[0] + 1).unwrap()[0];
    raw_write(&root, |txn| {
        use redb::ReadableTable;
        let mut events = txn.open_table(unilab::testing::tables::EVENTS).unwrap();
        let stored = events.get(before_gap).unwrap().unwrap().value().to_vec();
        let prev: [u8; 32] = stored[..32].try_into().unwrap();
        let mut envelope: unilab::StoredEnvelope =
            unilab::testing::codec::decode(&stored[64..]).unwrap();
        envelope.recorded_at_us += 1;
        let body = unilab::testing::codec::encode(&envelope).unwrap();
        let (resealed, _) = unilab::testing::chain::seal(&prev, &body);
        events.insert(before_gap, resealed.as_slice()).unwrap();
    });
    refused(
        root.unilab().args(["log", "verify"]),
        5,
        &[
            "the records beside the archived gaps are not those this `soak_archived` event committed to",
        ],
    );
}

/// The same soak archived in two logs (recorded at other times, so its records differ): one's
/// archive copied over the other's is caught, by verification and by every reader.
#[test]
fn another_logs_archive_of_the_same_soak_fails_verification() {
    let ours = root_with_every_kind(1_000_000);
    let theirs = root_with_every_kind(2_000_000);
    ours.damaged_on_purpose();
    for root in [&ours, &theirs] {
        root.unilab()
            .args(["log", "archive", "--soak", V4_SOAK])
            .assert()
            .success();
    }
    std::fs::copy(archive_of(&theirs, V4_SOAK), archive_of(&ours, V4_SOAK)).unwrap();
    theirs.unilab().args(["log", "verify"]).assert().success();
    refused(
        ours.unilab().args(["log", "verify"]),
        5,
        &[&format!(
            "the archive `{}` does not hold what the event log committed to",
            archive_of(&ours, V4_SOAK).display()
        )],
    );
    for command in [
        &["soak", "export", V4_SOAK][..],
        &["history", "--soak", V4_SOAK],
        &["soak", "show", V4_SOAK],
    ] {
        ours.unilab().args(command).assert().code(5);
    }
}

/// A soak whose archive is gone cannot be read, and says where its file should be; the rest of
/// the log reads and verifies, with a warning.
#[test]
fn a_missing_archive_is_named_by_readers_and_verify_warns() {
    let root = root_with_v1_archived();
    let file = archive_of(&root, V1_SOAK);
    std::fs::remove_file(&file).unwrap();
    refused(
        root.unilab().args(["soak", "export", V1_SOAK]),
        5,
        &[
            &format!(
                "the records of soak `{V1_SOAK}` were moved to the archive `{}`, which is missing",
                file.display()
            ),
            "hint: put the archive file back",
        ],
    );
    root.unilab()
        .args(["soak", "export", V4_SOAK])
        .assert()
        .success();
    root.unilab()
        .args(["soak", "list"])
        .assert()
        .success()
        .stdout(predicate::str::contains(V1_SOAK));
    root.unilab()
        .args(["log", "verify"])
        .assert()
        .success()
        .stderr(predicate::str::contains(format!(
            "warning: the archive `{}` of soak {V1_SOAK} is missing",
            file.display()
        )));
}
