//! The check of a request: what it decides of a soak's job, rank and metadata, and what it
//! refuses.

use std::os::unix::fs::DirBuilderExt;

use super::*;
use crate::diagnostic::Boundary;
use crate::job::{JobError, Membership};
use crate::testing::files::{fake_env, private_tempdir};

/// A request as a test writes it, without clap: `true` watched through `<dir>/progress`,
/// its artifact named after its job and rank, no `py-spy` looked for.
fn request(dir: &Path) -> SoakRequest {
    let progress_dir = dir.join("progress");
    if !progress_dir.exists() {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&progress_dir)
            .unwrap();
    }
    SoakRequest {
        command: vec!["true".into()],
        progress_dir,
        output: dir.join("soak-{job}-{rank}.json"),
        report: None,
        metrics_file: None,
        force: false,
        sample_interval: Duration::from_secs(5),
        startup_timeout: Duration::from_secs(600),
        stale_progress: Duration::from_secs(120),
        shutdown_grace: Duration::from_secs(5),
        min_duration: Duration::ZERO,
        step_timeout: None,
        phase_timeouts: Vec::new(),
        cwd: Some(dir.to_owned()),
        env: Vec::new(),
        env_clear: false,
        meta: Vec::new(),
        meta_json: Vec::new(),
        allow_no_progress: false,
        py_spy: Some("off".into()),
        dump_signal: None,
        dump_wait: Duration::from_secs(2),
        fail_fast: false,
        max_memory: None,
        max_gpu_memory: None,
        max_memory_growth: None,
        warmup: None,
        job: None,
        rank: None,
        run: None,
        on_job_alarm: OnJobAlarm::Capture,
    }
}

fn paths(root: &Path) -> StatePaths {
    StatePaths {
        root: root.to_owned(),
        host: "node".into(),
        uid: nix::unistd::getuid().as_raw(),
    }
}

fn job_dir(root: &Path, job: &str) -> PathBuf {
    crate::job::dir::job_dir_path(root, paths(root).uid, &JobId::parse(job).unwrap())
}

/// Under Slurm the job and rank are the launcher's; named in the request, they are the
/// request's. Either way the spec comes out of the check whole: the job joined (its
/// directory made), the artifact's name and the metadata filled with the same job and rank.
#[test]
fn the_job_and_rank_are_the_requests_else_the_launchers() {
    let dir = private_tempdir();
    let slurm = fake_env(&[
        ("SLURM_JOB_ID", "4242"),
        ("SLURM_PROCID", "3"),
        ("RANK", "9"),
    ]);
    let paths = paths(dir.path());
    let cases = [
        (None, None, ("4242", 3), "soak-4242-3.json"),
        (Some("llama"), None, ("llama", 3), "soak-llama-3.json"),
        (Some("llama"), Some(5), ("llama", 5), "soak-llama-5.json"),
    ];
    for (job, rank, (want_job, want_rank), artifact) in cases {
        let mut request = request(dir.path());
        request.job = job.map(|name| JobId::parse(name).unwrap());
        request.rank = rank;
        request.on_job_alarm = OnJobAlarm::Stop;
        let spec = SoakSpec::check(request, "soak-1".into(), &paths, &slurm).unwrap();
        let run = spec.job.as_ref().expect("a rank of a job");
        assert_eq!(
            run.member,
            Membership {
                job: JobId::parse(want_job).unwrap(),
                rank: want_rank,
                run: RunChoice::Counted,
            }
        );
        assert_eq!(run.on_alarm, OnJobAlarm::Stop);
        assert!(job_dir(dir.path(), want_job).is_dir(), "{want_job} joined");
        assert_eq!(spec.output.file_name().unwrap(), artifact);
        let rank = want_rank.to_string();
        assert_eq!(spec.metadata.get("job").map(String::as_str), Some(want_job));
        assert_eq!(spec.metadata.get("rank"), Some(&rank));
        // Both ranks of `llama` are in its first run, counted.
        assert_eq!(spec.metadata.get("run").map(String::as_str), Some("1"));
        assert_eq!(run.run.id.as_str(), "1");
    }
}

/// `--meta job=B --meta rank=7` moved a soak of job A's rank 3 to another job and rank in
/// the views, while the alarm it raised was job A's. What `--meta` says of the soak's job,
/// run, rank, step or local rank must be what it records: another value is refused (exit
/// 2) before anything is made, the same value taken.
#[test]
fn metadata_that_contradicts_the_soaks_job_run_or_rank_is_refused() {
    let dir = private_tempdir();
    let paths = paths(dir.path());
    let ask = |meta: &[(&str, &str)], json: &[(&str, serde_json::Value)]| {
        let mut request = request(dir.path());
        request.job = Some(JobId::parse("A").unwrap());
        request.rank = Some(3);
        request.run = Some(RunId::parse("r1").unwrap());
        request.meta = meta
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        request.meta_json = json
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        let launcher = fake_env(&[("SLURM_STEP_ID", "5"), ("LOCAL_RANK", "1")]);
        SoakSpec::check(request, "soak-1".into(), &paths, &launcher)
    };
    for (meta, json, key) in [
        (vec![("rank", "7")], vec![], "rank"),
        (vec![("job", "B")], vec![], "job"),
        (vec![("run", "r2")], vec![], "run"),
        (vec![("job_step", "0")], vec![], "job_step"),
        (
            vec![],
            vec![("local_rank", serde_json::json!(0))],
            "local_rank",
        ),
        (vec![], vec![("rank", serde_json::json!(7))], "rank"),
    ] {
        let err = ask(&meta, &json).unwrap_err();
        assert!(
            matches!(&err, SoakError::Job(JobError::MetaContradicts { key: k, .. }) if *k == key),
            "{err:?}"
        );
        assert_eq!(err.exit().code(), 2);
        assert!(
            !dir.path().join(crate::job::dir::JOBS).exists(),
            "nothing is made for a refused soak"
        );
    }
    let err = ask(&[("rank", "7")], &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "`--meta rank=7` contradicts the rank this soak records (`3`)"
    );
    let spec = ask(
        &[("rank", "3"), ("job", "A"), ("run", "r1"), ("team", "x")],
        &[("rank", serde_json::json!(3))],
    )
    .unwrap();
    assert_eq!(spec.metadata.get("rank").map(String::as_str), Some("3"));
    assert_eq!(spec.metadata.get("run").map(String::as_str), Some("r1"));
    assert_eq!(spec.metadata.get("team").map(String::as_str), Some("x"));
    // Outside a job, what unilab records nothing under is the user's to name.
    let mut label = request(dir.path());
    label.output = dir.path().join("soak.json");
    label.meta = vec![("run".into(), "nightly".into()), ("job".into(), "x".into())];
    let spec = SoakSpec::check(label, "soak-2".into(), &paths, &fake_env(&[])).unwrap();
    assert!(spec.job.is_none());
    assert_eq!(
        spec.metadata.get("run").map(String::as_str),
        Some("nightly")
    );
}

/// Outside a job there is no job to join, and a rank alone is refused as the usage error it
/// is (exit 2) before anything is made; a launcher's rank that is no number is refused
/// (exit 3) the same way. `{rank}` outside a job is still torchrun's.
#[test]
fn a_rank_without_a_job_or_a_launchers_bad_rank_is_refused_before_anything_is_made() {
    let dir = private_tempdir();
    let paths = paths(dir.path());
    let mut torchrun = request(dir.path());
    torchrun.output = dir.path().join("soak-{rank}.json");
    let spec = SoakSpec::check(
        torchrun,
        "soak-1".into(),
        &paths,
        &fake_env(&[("RANK", "2")]),
    )
    .unwrap();
    assert!(spec.job.is_none());
    assert_eq!(spec.output.file_name().unwrap(), "soak-2.json");

    let mut alone = request(dir.path());
    alone.rank = Some(1);
    let err = SoakSpec::check(alone, "soak-2".into(), &paths, &fake_env(&[])).unwrap_err();
    assert!(
        matches!(err, SoakError::Job(JobError::RankWithoutJob)),
        "{err:?}"
    );
    assert_eq!(err.exit().code(), 2);

    let bad = fake_env(&[("SLURM_JOB_ID", "4242"), ("SLURM_PROCID", "two")]);
    let err = SoakSpec::check(request(dir.path()), "soak-3".into(), &paths, &bad).unwrap_err();
    assert!(
        matches!(err, SoakError::Job(JobError::BadRank { .. })),
        "{err:?}"
    );
    assert_eq!(err.exit().code(), 3);
    assert!(
        !dir.path().join(crate::job::dir::JOBS).exists(),
        "no job directory is made for a refused soak"
    );
}
