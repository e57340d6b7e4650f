//! Keeping credentials out of the log and the artifacts.
//!
//! A variable whose name looks like a credential keeps its name but loses its value. And since a
//! command may print or pass on what it was given, [`Secrets`] masks the *values* of every such
//! variable unilab hands a command (its own environment and `--env`) wherever they appear in what
//! unilab records — output tails, command lines, metadata — as well as the password of any URL
//! with `user:password@`.

use std::borrow::Cow;

/// What replaces a credential's value.
pub(crate) const REDACTED: &str = "[redacted]";

const CONTAINS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "JWT",
    "PRIVATE",
    "API_KEY",
    "APIKEY",
    "ACCESS_KEY",
    "PRIVATE_KEY",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "SESSION_KEY",
    "DATABASE_URL",
];

/// Name endings of credentials. (`PWD` and `OLDPWD` are the shell's directories, not passwords.)
const ENDS: &[&str] = &["_KEY", "PASS", "PWD", "_PAT", "DSN", "_SK"];

/// Whether a variable's name looks like it holds a credential.
pub(crate) fn is_credential(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    if upper == "PWD" || upper == "OLDPWD" {
        return false;
    }
    upper.starts_with("AWS_")
        || ENDS.iter().any(|end| upper.ends_with(end))
        || CONTAINS.iter().any(|word| upper.contains(word))
}

/// Values shorter than this are not searched for in free text: masking every `1` or `true` would
/// mangle the record without protecting anything.
const MIN_SECRET_LEN: usize = 4;

/// The credential values a command was handed, to be masked wherever they appear. Its `Debug`
/// shows how many, never what.
#[derive(Clone, Default)]
pub(crate) struct Secrets {
    /// Longest first, so that a secret containing another is masked whole.
    values: Vec<String>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} values)", self.values.len())
    }
}

impl Secrets {
    /// The values of the credential-like variables among `variables`.
    pub(crate) fn of<'a>(variables: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut values: Vec<String> = variables
            .into_iter()
            .filter(|(name, value)| is_credential(name) && value.len() >= MIN_SECRET_LEN)
            .map(|(_, value)| value.to_owned())
            .collect();
        values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        values.dedup();
        Self { values }
    }

    /// The credentials of this process's environment and of `extra` (`--env`): everything the
    /// command will see.
    pub(crate) fn handed_to_command(extra: &[(String, String)]) -> Self {
        let inherited: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        Self::of(
            inherited
                .iter()
                .chain(extra)
                .map(|(k, v)| (k.as_str(), v.as_str())),
        )
    }

    /// `text` with every secret and every URL password replaced by the marker.
    pub(crate) fn mask<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let mut masked = Cow::Borrowed(text);
        for value in &self.values {
            if masked.contains(value.as_str()) {
                masked = Cow::Owned(masked.replace(value.as_str(), REDACTED));
            }
        }
        match mask_url_passwords(&masked) {
            Some(text) => Cow::Owned(text),
            None => masked,
        }
    }

    /// [`mask`](Self::mask) for the end of an output stream, which may begin in the middle of a
    /// secret: a leading remainder of one is masked too.
    pub(crate) fn mask_tail(&self, tail: &[u8]) -> Vec<u8> {
        let text = String::from_utf8_lossy(tail);
        let mut masked = self.mask(&text).into_owned();
        for value in &self.values {
            let cut = (1..value.len().saturating_sub(MIN_SECRET_LEN - 1))
                .filter(|at| value.is_char_boundary(*at))
                .find(|at| masked.starts_with(&value[*at..]));
            if let Some(at) = cut {
                masked.replace_range(..value.len() - at, REDACTED);
            }
        }
        masked.into_bytes()
    }
}

/// `text` with the password of every `scheme://user:password@host` replaced; `None` if it has
/// none.
fn mask_url_passwords(text: &str) -> Option<String> {
    let mut out = String::new();
    let mut rest = text;
    let mut changed = false;
    while let Some(at) = rest.find("://") {
        let authority_start = at + 3;
        let authority_len = rest[authority_start..]
            .find(|c: char| c == '/' || c.is_whitespace() || "\"'<>".contains(c))
            .unwrap_or(rest.len() - authority_start);
        let authority = &rest[authority_start..authority_start + authority_len];
        out.push_str(&rest[..authority_start]);
        match authority
            .rfind('@')
            .and_then(|userinfo_end| Some((userinfo_end, authority[..userinfo_end].find(':')?)))
        {
            Some((userinfo_end, colon)) if colon + 1 < userinfo_end => {
                out.push_str(&authority[..=colon]);
                out.push_str(REDACTED);
                out.push_str(&authority[userinfo_end..]);
                changed = true;
            }
            _ => out.push_str(authority),
        }
        rest = &rest[authority_start + authority_len..];
    }
    out.push_str(rest);
    changed.then_some(out)
}

/// The value to record for a variable.
pub(crate) fn redact<'a>(name: &str, value: &'a str) -> &'a str {
    if is_credential(name) { REDACTED } else { value }
}

/// Every value in `value` under a credential-like name replaced by the marker, at any depth.
pub(crate) fn redact_json(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            for (name, inner) in map.iter_mut() {
                if is_credential(name) {
                    *inner = serde_json::Value::String(REDACTED.into());
                } else {
                    redact_json(inner);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(redact_json),
        _ => {}
    }
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
        Secrets::of([
            ("HF_TOKEN", "hf_abcdef123"),
            ("API_KEY", "abc"),
            ("NCCL_DEBUG", "INFO"),
            ("AWS_SECRET_ACCESS_KEY", "hf_abcdef123-longer"),
        ])
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
}
