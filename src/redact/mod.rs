//! Keeping credentials out of the log and the artifacts.
//!
//! A variable whose name looks like a credential keeps its name but loses its value. And since a
//! command may print or pass on what it was given, [`Secrets`] masks the *values* of every such
//! variable unilab hands a command (its own environment and `--env`) wherever they appear in what
//! unilab records — output tails, command lines, metadata — as well as the password of any URL
//! with `user:password@`.
//!
//! Every command line, wherever it is recorded or shown (the start, a child's in the evidence, a
//! leaked process's, the metrics file's label, every view of a record), and every value of a
//! printed runtime snapshot, is masked by one rule, [`mask_argv`] ([`mask_argument`] for one
//! value): the credentials written into an argument ([`argument`]: an authorization, a JSON
//! member or a pair whose key names a credential, a URL's password), then the values of the
//! credential-named flags. A record made before a form of it was masked is masked when it is
//! shown ([`shown`]); `soak export` gives the artifact as it was written.

mod argument;
pub(crate) mod shown;

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

/// Whether a credential's value is worth searching for in free text: long enough, and not a
/// word that a setting of a credential-named variable often holds and any text holds too
/// (`TOKENIZERS_PARALLELISM=true`).
fn worth_searching(value: &str) -> bool {
    const PLAIN: &[&str] = &["true", "false", "none", "null", "auto", "unset"];
    value.len() >= MIN_SECRET_LEN && !PLAIN.iter().any(|word| value.eq_ignore_ascii_case(word))
}

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
    /// The values of the credential-like variables among `variables`, of the credential-named
    /// flags of `command` and of the credentials written into its arguments (but the JSON
    /// members named only by the wider rule of variables, whose values are figures and names as
    /// often as secrets: `"max_tokens": 4096`).
    pub(crate) fn of<'a>(
        variables: impl IntoIterator<Item = (&'a str, &'a str)>,
        command: &[String],
    ) -> Self {
        let variables = variables
            .into_iter()
            .filter(|(name, _)| is_credential(name))
            .map(|(_, value)| value);
        let flags = credential_values(command)
            .into_iter()
            .map(|(arg, at)| &command[arg][at..]);
        let written = command.iter().flat_map(|arg| {
            argument::found(arg)
                .into_iter()
                .filter(|found| found.searched)
                .map(move |found| found.value(arg))
        });
        let mut values: Vec<String> = variables
            .chain(flags)
            .chain(written)
            .filter(|value| worth_searching(value))
            .map(str::to_owned)
            .collect();
        values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        values.dedup();
        Self { values }
    }

    /// The credentials of this process's environment, of `extra` (`--env`) and of `command`'s
    /// flags: everything the command will see.
    pub(crate) fn handed_to_command(extra: &[(String, String)], command: &[String]) -> Self {
        let inherited: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        Self::of(
            inherited
                .iter()
                .chain(extra)
                .map(|(k, v)| (k.as_str(), v.as_str())),
            command,
        )
    }

    /// `argv` as it is recorded: each argument [masked](Self::mask), then by the rule of every
    /// command line ([`mask_argv`]).
    pub(crate) fn mask_command_line(&self, argv: &[String]) -> Vec<String> {
        let masked: Vec<Cow<'_, str>> = argv.iter().map(|arg| self.mask(arg)).collect();
        mask_argv(&masked)
    }

    /// [`mask_command_line`](Self::mask_command_line) of the part of `argv` that a record can
    /// keep, `keep` bytes, which every record cuts a command line to: the arguments from the
    /// start to [`KEPT_MARGIN`] past what masking leaves of the first `keep` bytes are masked,
    /// and what lies beyond is left as it was, never to be recorded, its length kept so that the
    /// cut still says how much it cut. A launcher passes megabytes of config inline, and masking
    /// all of it for every process took the evidence capture's time. A secret shorter than the
    /// margin that straddles the masked part's end lies wholly past what is kept.
    pub(crate) fn mask_command_line_kept(&self, argv: &[String], keep: usize) -> Vec<String> {
        let mut window = keep.saturating_add(KEPT_MARGIN);
        loop {
            let Some((whole, rest_at)) = split_at_byte(argv, window) else {
                return self.mask_command_line(argv);
            };
            let mut head: Vec<String> = argv[..whole].to_vec();
            if let Some(at) = rest_at {
                head.push(argv[whole][..at].to_owned());
            }
            let mut masked = self.mask_command_line(&head);
            let length: usize = masked.iter().map(String::len).sum();
            if length >= keep.saturating_add(KEPT_MARGIN) {
                let mut tail_from = whole;
                if let Some(at) = rest_at {
                    if let Some(last) = masked.last_mut() {
                        last.push_str(&argv[whole][at..]);
                    }
                    tail_from += 1;
                }
                masked.extend_from_slice(&argv[tail_from..]);
                return masked;
            }
            // Masking shrank the part below what is kept and its margin: mask more.
            window = window.saturating_mul(2);
        }
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

/// How far past the bytes of a command line a record keeps
/// [`mask_command_line_kept`](Secrets::mask_command_line_kept) masks.
pub(crate) const KEPT_MARGIN: usize = 4 << 10;

/// Where `argv`'s first `bytes` bytes end, when they end before it does: the number of whole
/// arguments within them, and the char boundary at or below the end inside the argument that
/// straddles it (`None` when the end falls between two arguments).
fn split_at_byte(argv: &[String], bytes: usize) -> Option<(usize, Option<usize>)> {
    let mut room = bytes;
    for (i, arg) in argv.iter().enumerate() {
        if arg.len() <= room {
            room -= arg.len();
            continue;
        }
        let at = (0..=room).rev().find(|&at| arg.is_char_boundary(at));
        return Some((i, at.filter(|&at| at > 0)));
    }
    None
}

/// `argv` as every record and every view holds it: each argument [masked](mask_argument), then
/// the value of every credential-named flag replaced by the marker.
pub(crate) fn mask_argv<S: AsRef<str>>(argv: &[S]) -> Vec<String> {
    let mut masked: Vec<String> = argv
        .iter()
        .map(|arg| mask_argument(arg.as_ref()).into_owned())
        .collect();
    for (arg, at) in credential_values(argv) {
        masked[arg] = format!("{}{REDACTED}", &argv[arg].as_ref()[..at]);
    }
    masked
}

/// One argument of a command line, or one value of the environment, with every credential
/// written into it (see [`argument`]) and every URL's password replaced by the marker.
///
/// Masked again until nothing changes (a few passes at most): a marker put in place of a value
/// can join what was apart (a pair's value that held a URL's `/` no longer ends the URL's
/// authority), and a view masks what the record masked already, so the second look must find
/// nothing the first did not.
pub(crate) fn mask_argument(text: &str) -> Cow<'_, str> {
    const MAX_PASSES: usize = 8;
    let mut masked = mask_argument_once(text);
    for _ in 1..MAX_PASSES {
        match mask_argument_once(&masked) {
            Cow::Owned(again) if again != *masked => masked = Cow::Owned(again),
            _ => break,
        }
    }
    masked
}

fn mask_argument_once(text: &str) -> Cow<'_, str> {
    let urls = mask_url_passwords(text);
    let unmasked = urls.as_deref().unwrap_or(text);
    let found = argument::found(unmasked);
    if found.is_empty() {
        return urls.map_or(Cow::Borrowed(text), Cow::Owned);
    }
    Cow::Owned(argument::masked(unmasked, &found))
}

/// The values of `argv`'s credential-named flags, each as the index of the argument that holds
/// it and the byte where the value begins there: `--token=V`, `-token=V` and `NAME=V` carry it,
/// a bare `--token` or `-token` is followed by it (unless what follows is another `--` flag).
/// Empty values are left out. A single-letter flag (`-p`) never names a credential: no credential
/// name is that short, and `-p` means a port as often as a password.
fn credential_values(argv: &[impl AsRef<str>]) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    let mut args = argv.iter().map(AsRef::as_ref).enumerate().peekable();
    while let Some((index, arg)) = args.next() {
        if let Some((name, _)) = arg.split_once('=') {
            if arg.len() > name.len() + 1 && names_credential(name.trim_start_matches(['-', '+'])) {
                found.push((index, name.len() + 1));
            }
        } else if let Some(name) = arg.strip_prefix('-')
            && names_credential(name.strip_prefix('-').unwrap_or(name))
            && let Some((next, value)) = args.next_if(|(_, next)| !next.starts_with("--"))
            && !value.is_empty()
        {
            found.push((next, 0));
        }
    }
    found
}

/// Words that name a credential when a flag's name ends in them (`--hf-token`, `--db.password`).
const FLAG_ENDS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "JWT",
    "APIKEY",
    "CREDENTIAL",
    "CREDENTIALS",
    "COOKIE",
    "DSN",
];

/// Whether `name` (a flag's, without its dashes) is a name and names a credential: its last word
/// ends in one of [`FLAG_ENDS`] (`hf_token`, `Dpassword`, `keyStorePassword`), or it ends in a key of some kind (`api_key`, `access_key`,
/// `secret_key`, `private_key`, `session_key`; `aws_secret_access_key`). Narrower than the rule
/// for variables on purpose: training commands are full of flags that merely contain a
/// credential's word (`--max-tokens 4096`, `--tokenizer gpt2`, `--password-file PATH`), whose
/// values are figures, names and paths, not secrets.
fn names_credential(name: &str) -> bool {
    if !name.starts_with(|c: char| c.is_ascii_alphabetic())
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
    {
        return false;
    }
    let upper = name.replace(['-', '.'], "_").to_ascii_uppercase();
    let mut words = upper.rsplit('_');
    let last = words.next().unwrap_or_default();
    let before = words.next().unwrap_or_default();
    FLAG_ENDS.iter().any(|end| last.ends_with(end))
        || (last == "KEY" && ["API", "ACCESS", "SECRET", "PRIVATE", "SESSION"].contains(&before))
}

/// `text` with the password of every `scheme://user:password@host` replaced, and every user
/// that is a token (`https://ghp_…@github.com`: see [`looks_like_a_token`]); `None` if it has
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
        let userinfo_end = authority.rfind('@');
        let colon = userinfo_end.and_then(|end| authority[..end].find(':'));
        match (userinfo_end, colon) {
            (Some(end), Some(colon)) if colon + 1 < end => {
                out.push_str(&authority[..=colon]);
                out.push_str(REDACTED);
                out.push_str(&authority[end..]);
                changed = true;
            }
            (Some(end), None) if looks_like_a_token(&authority[..end]) => {
                out.push_str(REDACTED);
                out.push_str(&authority[end..]);
                changed = true;
            }
            _ => out.push_str(authority),
        }
        rest = &rest[authority_start + authority_len..];
    }
    out.push_str(rest);
    changed.then_some(out)
}

/// Whether a URL's user (with no password) is a token rather than a name: 16 characters or
/// more, letters and digits both among them (`git`, `anon` and `first.last` are names).
fn looks_like_a_token(user: &str) -> bool {
    user.len() >= 16
        && user
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
        && user.chars().any(|c| c.is_ascii_digit())
        && user.chars().any(|c| c.is_ascii_alphabetic())
}

/// The value to record for a variable.
pub(crate) fn redact<'a>(name: &str, value: &'a str) -> &'a str {
    if is_credential(name) { REDACTED } else { value }
}

/// Every value in `value` under a credential-like name replaced by the marker, at any depth: the
/// rule a JSON member within a command line is masked by too ([`argument`]).
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
mod tests;
