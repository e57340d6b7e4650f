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
    // Not names: a URL's query and free text are not flags.
    let kept = argv(&[
        "curl",
        "https://h/x?token=abc",
        "say token=x y",
        "--lr=1",
        "--",
    ]);
    assert_eq!(none.mask_command_line(&kept), kept);
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
