//! Keeping credentials out of the log and the artifacts.
//!
//! A variable whose name looks like a credential keeps its name but loses its value.

/// What replaces a credential's value.
pub(crate) const REDACTED: &str = "[redacted]";

const CONTAINS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "API_KEY",
    "APIKEY",
    "ACCESS_KEY",
    "PRIVATE_KEY",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "SESSION_KEY",
];

/// Whether a variable's name looks like it holds a credential.
pub(crate) fn is_credential(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper.starts_with("AWS_")
        || upper.ends_with("_KEY")
        || upper.ends_with("_PASS")
        || CONTAINS.iter().any(|word| upper.contains(word))
}

/// The value to record for a variable.
pub(crate) fn redact<'a>(name: &str, value: &'a str) -> &'a str {
    if is_credential(name) { REDACTED } else { value }
}

#[cfg(test)]
mod tests {
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
        ] {
            assert!(is_credential(name), "{name}");
        }
        for name in [
            "CUDA_VISIBLE_DEVICES",
            "NCCL_DEBUG",
            "OMP_NUM_THREADS",
            "KEYBOARD",
            "PATH",
        ] {
            assert!(!is_credential(name), "{name}");
        }
        assert_eq!(redact("HF_TOKEN", "hf_abc"), REDACTED);
        assert_eq!(redact("NCCL_DEBUG", "INFO"), "INFO");
    }
}
