use super::*;

#[test]
fn credential_names_are_recognised() {
    for name in [
        "WANDB_API_KEY",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_REGION",
        "GITHUB_TOKEN",
        "DB_PASSWORD",
        "OPENAI_API_KEY",
        "MY_KEY",
        "slack_webhook_secret",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "SENTRY_DSN",
        "GH_PAT",
        "MYSQL_PWD",
        "GPG_PASSPHRASE",
        "SESSION_JWT",
        "SSH_PRIVATE_KEY_PATH",
        "DATABASE_URL",
        "PGPASS",
        "STRIPE_SK",
        "GCP_PRIVATEKEY",
        "SMTP_PASS",
    ] {
        assert!(is_credential(name), "{name}");
    }
    for name in [
        "CUDA_VISIBLE_DEVICES",
        "NCCL_DEBUG",
        "OMP_NUM_THREADS",
        "KEYBOARD",
        "PATH",
        "PWD",
        "OLDPWD",
    ] {
        assert!(!is_credential(name), "{name}");
    }
    assert_eq!(redact("HF_TOKEN", "hf_abc"), REDACTED);
    assert_eq!(redact("NCCL_DEBUG", "INFO"), "INFO");
}

fn secrets() -> Secrets {
    Secrets::of(
        [
            ("HF_TOKEN", "hf_abcdef123"),
            ("API_KEY", "abc"),
            ("NCCL_DEBUG", "INFO"),
            ("AWS_SECRET_ACCESS_KEY", "hf_abcdef123-longer"),
        ],
        &[],
    )
}

fn argv(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| (*a).to_owned()).collect()
}

/// A command line kept its credentials: `python3 train.py --token=tok_abc…` and a child's
/// `--password hunter2` reached the log, the artifact and every view of them, as only
/// variables' values and URL passwords were masked.
#[test]
fn credential_flags_lose_their_values_in_every_form() {
    let none = Secrets::default();
    let masked = none.mask_command_line(&argv(&[
        "python3",
        "train.py",
        "--token=tok_abc123",
        "--password",
        "hunter2",
        "--api-key=k1",
        "--api_key",
        "k2",
        "--hf-token",
        "hf_x",
        "--use-auth-token",
        "--lr",
        "3e-4",
        "--secret",
        "-dash-first",
        "-token",
        "go-style",
        "-Dpassword=java",
        "env",
        "HF_TOKEN=from-env",
        "+db.password=hydra",
        "wandb.api_key=hydra2",
        "-p",
        "8080",
        "--token=",
        "--token",
    ]));
    assert_eq!(
        masked,
        argv(&[
            "python3",
            "train.py",
            "--token=[redacted]",
            "--password",
            "[redacted]",
            "--api-key=[redacted]",
            "--api_key",
            "[redacted]",
            "--hf-token",
            "[redacted]",
            "--use-auth-token",
            "--lr",
            "3e-4",
            "--secret",
            "[redacted]",
            "-token",
            "[redacted]",
            "-Dpassword=[redacted]",
            "env",
            "HF_TOKEN=[redacted]",
            "+db.password=[redacted]",
            "wandb.api_key=[redacted]",
            "-p",
            "8080",
            "--token=",
            "--token",
        ])
    );
    // Not flags: a URL's query and free text name none, though a `token=` pair written in them
    // is masked as a pair (see `credentials_written_into_an_argument_are_masked`).
    assert_eq!(
        none.mask_command_line(&argv(&[
            "curl",
            "https://h/x?token=abc",
            "say token=x y",
            "--lr=1",
            "--",
        ])),
        argv(&[
            "curl",
            "https://h/x?token=[redacted]",
            "say token=[redacted] y",
            "--lr=1",
            "--",
        ])
    );
}

/// Flags that merely contain a credential's word were masked as credentials:
/// `--max-tokens 4096` lost its figure, and the figure was then masked wherever it appeared
/// in the output (`step 4096` became `step [redacted]`); `TOKENIZERS_PARALLELISM=true` made
/// every `true` of the output a secret.
#[test]
fn flags_that_merely_contain_a_credentials_word_keep_their_values() {
    let kept = argv(&[
        "torchrun",
        "train.py",
        "--max-tokens",
        "4096",
        "--tokenizer=gpt2",
        "--num_tokens_per_batch",
        "8192",
        "--password-file",
        "/run/secrets/db",
        "--author",
        "someone",
        "--sort-key",
        "loss",
        "--bypass-cache",
        "TOKENIZERS_PARALLELISM=true",
    ]);
    let secrets = Secrets::of([("TOKENIZERS_PARALLELISM", "true")], &kept);
    assert_eq!(secrets.mask_command_line(&kept), kept);
    assert_eq!(secrets.mask("step 4096: true"), "step 4096: true");
    // Their neighbours that do name one are still masked.
    let masked = secrets.mask_command_line(&argv(&[
        "--keyStorePassword=abcd",
        "--aws-secret-access-key",
        "AKIAXYZ",
        "--wandb-apikey=k",
    ]));
    assert_eq!(
        masked,
        argv(&[
            "--keyStorePassword=[redacted]",
            "--aws-secret-access-key",
            "[redacted]",
            "--wandb-apikey=[redacted]",
        ])
    );
}

#[test]
fn the_values_of_the_commands_credential_flags_are_masked_wherever_they_appear() {
    let s = Secrets::of(
        [],
        &argv(&["train", "--token", "tok_abc123", "--lr=0.1", "--pw=abc"]),
    );
    assert_eq!(
        s.mask("args: token=tok_abc123 lr=0.1"),
        "args: token=[redacted] lr=0.1"
    );
    assert_eq!(
        s.mask_command_line(&argv(&["worker", "tok_abc123"])),
        argv(&["worker", "[redacted]"])
    );
}

#[test]
fn credential_values_are_masked_wherever_they_appear() {
    let s = secrets();
    assert_eq!(
        s.mask("token hf_abcdef123, key hf_abcdef123-longer, INFO abc"),
        "token [redacted], key [redacted], INFO abc",
        "the longer secret whole; short values and other variables alone"
    );
    assert!(matches!(s.mask("nothing here"), Cow::Borrowed(_)));
    assert_eq!(
        s.mask("git clone https://me:ghp_x1@github.com/o/r and ftp://anon@host/"),
        "git clone https://me:[redacted]@github.com/o/r and ftp://anon@host/"
    );
    assert_eq!(
        s.mask("\"postgres://u:p%40ss@db:5432/x\""),
        "\"postgres://u:[redacted]@db:5432/x\""
    );
}

#[test]
fn a_tail_that_begins_inside_a_secret_is_masked_too() {
    let s = secrets();
    assert_eq!(s.mask_tail(b"def123\nstep 2\n"), b"[redacted]\nstep 2\n");
    assert_eq!(s.mask_tail(b"f123\n"), b"[redacted]\n");
    // Fewer than four characters of it: too little to tell from ordinary output.
    assert_eq!(s.mask_tail(b"123\n"), b"123\n");
}

/// The argument's text, masked by the rule of every command line.
fn masked(text: &str) -> String {
    mask_argument(text).into_owned()
}

/// Credentials written into an argument reached the log and every view raw: `curl -H
/// 'Authorization: Bearer …'`, a JSON argument `'{"password": "…"}'`, `password=…` in a `sh -c`
/// script and `--conf spark.password=…`, as only credential-named flags, variables' values and
/// URL passwords were masked.
#[test]
fn credentials_written_into_an_argument_are_masked() {
    for (given, shown) in [
        // Authorizations: the credentials after the scheme, or the whole value without one.
        (
            "Authorization: Bearer s3cr3t-abc.def",
            "Authorization: Bearer [redacted]",
        ),
        (
            "authorization:Basic dXNlcjpwYXNz",
            "authorization:Basic [redacted]",
        ),
        (
            "Authorization: token ghp_abc123",
            "Authorization: token [redacted]",
        ),
        (
            "Proxy-Authorization: abc123",
            "Proxy-Authorization: [redacted]",
        ),
        (
            "curl -H \"Authorization: Bearer abc\" https://h/v1",
            "curl -H \"Authorization: Bearer [redacted]\" https://h/v1",
        ),
        (
            "X-Upstream: Bearer eyJhbGciOi.e30.sig",
            "X-Upstream: Bearer [redacted]",
        ),
        // JSON members whose keys look like credentials', at any depth, whatever their type.
        (
            r#"{"password": "hunter2x"}"#,
            r#"{"password": "[redacted]"}"#,
        ),
        (
            r#"{"db": {"user": "bob", "api_token": "t0k"}, "lr": 0.1}"#,
            r#"{"db": {"user": "bob", "api_token": "[redacted]"}, "lr": 0.1}"#,
        ),
        (
            r#"{"credentials": {"a": [1, "x"]}, "n": 2}"#,
            r#"{"credentials": "[redacted]", "n": 2}"#,
        ),
        (r#"{"secret":123456}"#, r#"{"secret":"[redacted]"}"#),
        (r#"{"secret": "a\"b"}"#, r#"{"secret": "[redacted]"}"#),
        (
            r#"{"pass\u0077ord": "x"}"#,
            r#"{"pass\u0077ord": "[redacted]"}"#,
        ),
        (
            r#"curl -d '{"password":"p1"}' https://h"#,
            r#"curl -d '{"password":"[redacted]"}' https://h"#,
        ),
        (
            r#"{"authorization": "Bearer abcdefgh12"}"#,
            r#"{"authorization": "[redacted]"}"#,
        ),
        // JSON cut short, or broken by a shell's quoting.
        (r#"{"token": "abc"#, r#"{"token": "[redacted]""#),
        (
            r#"{"token": x1, "n": 1}"#,
            r#"{"token": "[redacted]", "n": 1}"#,
        ),
        // Pairs whose keys name credentials.
        ("user=bob password=xyz", "user=bob password=[redacted]"),
        ("spark.password=abc", "spark.password=[redacted]"),
        (
            "--conf=spark.password=abc",
            "--conf=spark.password=[redacted]",
        ),
        (
            "password: xyz, user: bob",
            "password: [redacted], user: bob",
        ),
        ("{'db_password': 'p4ss'}", "{'db_password': '[redacted]'}"),
        (
            "export HF_TOKEN=\"a b\"; run",
            "export HF_TOKEN=\"[redacted]\"; run",
        ),
        ("token = 'x' # python", "token = '[redacted]' # python"),
        ("X-Api-Key: k3y", "X-Api-Key: [redacted]"),
        (
            "https://h/x?token=abc&n=1",
            "https://h/x?token=[redacted]&n=1",
        ),
        // A URL's password, and a user that is a token.
        (
            "git clone https://ghp_abcdefghij1234567890@github.com/o/r",
            "git clone https://[redacted]@github.com/o/r",
        ),
        (
            "HF_ENDPOINT=https://bob:pw12345@host",
            "HF_ENDPOINT=https://bob:[redacted]@host",
        ),
    ] {
        assert_eq!(masked(given), shown, "{given}");
        assert_eq!(
            masked(shown),
            shown,
            "masking again changes nothing: {shown}"
        );
    }
}

/// What only looks like a credential is left as written: settings whose names merely contain a
/// credential's word, comparisons, empty assignments, prose, names in URLs.
#[test]
fn text_that_only_looks_like_a_credential_is_kept() {
    for kept in [
        "max_tokens=4096 tokenizer=gpt2 num_tokens: 8192",
        "password_file=/run/secrets/db --password-file=/x",
        "model.name=llama data.path=/d optimizer.lr=3e-4",
        r#"[ "$token" == "x" ] && [ "$token" != y ] && a := token"#,
        "TOKEN= ./run.sh",
        "the bearer of news",
        "Authorization header required",
        "ssh://git@github.com/o/r ftp://anon@host/ https://first.last@h/",
        r#"{"lr": 3e-4, "name": "token", "batch": 32}"#,
        "std::env::var(\"X\"); time 12:30",
        "echo step: 1",
        "docker run -v /run/token:/token -e /etc/password=x img",
    ] {
        assert_eq!(masked(kept), kept);
    }
    // A JSON member named by the wider rule of variables loses a string, never a figure: a
    // config's `max_tokens` stays readable; a string under it is masked where it stands, but
    // searched for nowhere else. One named by the narrow rule of flags loses any value.
    let config = argv(&[
        "train",
        r#"{"max_tokens": 4096, "tokenizer": "gpt2x", "password": 12345678}"#,
    ]);
    assert_eq!(
        Secrets::default().mask_command_line(&config)[1],
        r#"{"max_tokens": 4096, "tokenizer": "[redacted]", "password": "[redacted]"}"#
    );
    assert_eq!(
        Secrets::of([], &config).mask("step 4096 gpt2x"),
        "step 4096 gpt2x"
    );
}

/// A credential written into the command's arguments is masked wherever else it appears (the
/// output, a child's command line), as a credential flag's value is.
#[test]
fn credentials_written_into_the_command_are_masked_wherever_they_appear() {
    let command = argv(&[
        "sh",
        "-c",
        "curl -H 'Authorization: Bearer abcdefgh123' -d '{\"password\": \"hunter2x\"}' https://h",
    ]);
    let s = Secrets::of([], &command);
    assert_eq!(
        s.mask("sent abcdefgh123 and hunter2x"),
        "sent [redacted] and [redacted]"
    );
    assert_eq!(
        s.mask_command_line(&argv(&["curl", "abcdefgh123"])),
        argv(&["curl", "[redacted]"])
    );
}

proptest::proptest! {
    /// Any text, however its quotes, keys and separators fall, is masked without a panic, and
    /// masking it again changes nothing: a view masks what the record masked already.
    #[test]
    fn masking_any_text_holds_and_masking_again_changes_nothing(
        parts in proptest::collection::vec(proptest::sample::select(vec![
            "password", "Authorization", "bearer ", "Basic ", "token", "\"", "'", ":", "=", " ",
            "{", "}", "[", "]", ",", "\\", "x1", "abcdefgh12", "é", "https://", "u:p@h", "-",
            "[redacted]", "4096", "/", "&", "?",
        ]), 0..24)
    ) {
        let text: String = parts.concat();
        let once = mask_argument(&text).into_owned();
        proptest::prop_assert_eq!(mask_argument(&once).into_owned(), once.clone(), "{}", text);
    }

    /// Nor does any text at all make it panic.
    #[test]
    fn masking_arbitrary_text_holds(text in "\\PC*") {
        let _ = mask_argv(&[text]);
    }
}

/// The first `keep` bytes of `argv`, each argument ended by a NUL (as /proc writes them).
fn first_bytes(argv: &[String], keep: usize) -> Vec<u8> {
    let mut joined: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    joined.truncate(keep);
    joined
}

/// Masking only what a record keeps gives the same kept bytes as masking the whole command
/// line, wherever the credentials lie — inside, straddling its end, or so many near the start
/// that masking shrinks the part below it — and leaves what lies far past it untouched, its
/// arguments counted.
#[test]
fn the_part_a_record_keeps_is_masked_as_the_whole_is() {
    let keep = 1000;
    let filler = |n: usize| "x".repeat(n);
    let secrets = Secrets::of([("HF_TOKEN", "hf_0123456789abcdef")], &[]);
    let far = "password=farfarfarfar".to_owned();
    let cases: Vec<Vec<String>> = vec![
        vec![
            "train".into(),
            "--password".into(),
            "hunter2hunter2".into(),
            filler(40_000),
            far.clone(),
        ],
        vec![
            filler(990),
            "--api-key".into(),
            "k".repeat(40),
            filler(40_000),
            far.clone(),
        ],
        vec![
            format!("{}Authorization: Bearer {}", filler(985), "b".repeat(30)),
            filler(40_000),
            far.clone(),
        ],
        vec![
            format!(
                "{} https://u:pw1234567@host/x {}",
                filler(995),
                filler(40_000)
            ),
            far.clone(),
        ],
        (0..60)
            .map(|i| format!("password={}", "s".repeat(200 + i)))
            .chain([filler(80_000), far.clone()])
            .collect(),
        vec![
            format!("{}hf_0123456789abcdef{}", filler(998), filler(40_000)),
            far.clone(),
        ],
        vec!["short".into(), "--password".into(), "hunter2hunter2".into()],
    ];
    for argv in &cases {
        let whole = secrets.mask_command_line(argv);
        let kept = secrets.mask_command_line_kept(argv, keep);
        assert_eq!(
            first_bytes(&kept, keep),
            first_bytes(&whole, keep),
            "{argv:.60?}"
        );
        assert_eq!(kept.len(), argv.len(), "every argument counted");
        if argv.last() == Some(&far) {
            assert_eq!(
                kept.last(),
                Some(&far),
                "past the margin, left as it was: {argv:.60?}"
            );
            assert_ne!(whole.last(), Some(&far), "the whole masks it");
        } else {
            assert_eq!(kept, whole);
        }
    }
}
