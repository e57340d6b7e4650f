//! The credentials inside one argument of a command line (or one value of the environment),
//! found where they stand in its text:
//!
//! - an authorization header's credentials (`Authorization: Bearer V`, `Basic V`, `token V`,
//!   `Proxy-Authorization: V`), and a bearer token anywhere (`Bearer V`, V of 8 characters or
//!   more);
//! - the value of a JSON member whose key looks like a credential's, at any depth: a string
//!   under a key of the wider rule of variables and `--meta-json` ([`is_credential`]), any value
//!   under a key of the narrow rule of flags ([`names_credential`]) — so that a figure under
//!   `max_tokens` or `num_tokens` stays a figure, while `{"password": 1234}` loses its value;
//! - the value of a `key=value`, `key = value`, `key: value` or `'key': value` pair whose key
//!   names a credential ([`names_credential`]: the rule of flags, so that `max_tokens=4096` and
//!   `tokenizer=gpt2` keep their values; a path's last part, `/run/token:`, is no key).
//!
//! Everything else of the text is kept as it was written: a script (`sh -c '…'`) or a JSON
//! argument still reads as itself, with the marker where each credential stood.

use std::ops::Range;

use super::{REDACTED, is_credential, names_credential};

/// A credential in an argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Found {
    /// Where it stands in the argument.
    pub range: Range<usize>,
    /// A JSON value, replaced by the marker as a JSON string so that the JSON stays JSON.
    pub json: bool,
    /// Whether its value is worth masking wherever else it appears (the output, a child's
    /// command line): named by the narrow rule of flags, or given as an authorization.
    pub searched: bool,
}

impl Found {
    /// The credential itself: a JSON string's without its quotes.
    pub(super) fn value<'a>(&self, text: &'a str) -> &'a str {
        let value = &text[self.range.clone()];
        match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
            Some(inner) if self.json => inner,
            _ => value,
        }
    }
}

/// Every credential in `text`, in order, none overlapping another (of two that overlap, the one
/// that starts first, else the longer, is kept: a JSON member's whole value over the bearer
/// token inside it).
pub(super) fn found(text: &str) -> Vec<Found> {
    let mut all: Vec<Found> = authorizations(text)
        .into_iter()
        .chain(bearer_tokens(text))
        .chain(json_members(text))
        .chain(pairs(text))
        .collect();
    all.sort_by_key(|f| (f.range.start, std::cmp::Reverse(f.range.end)));
    let mut kept: Vec<Found> = Vec::with_capacity(all.len());
    for found in all {
        if kept
            .last()
            .is_none_or(|last| found.range.start >= last.range.end)
        {
            kept.push(found);
        }
    }
    kept
}

/// `text` with each of `found` replaced by the marker.
pub(super) fn masked(text: &str, found: &[Found]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for f in found {
        out.push_str(&text[at..f.range.start]);
        if f.json {
            out.push('"');
            out.push_str(REDACTED);
            out.push('"');
        } else {
            out.push_str(REDACTED);
        }
        at = f.range.end;
    }
    out.push_str(&text[at..]);
    out
}

/// The schemes of an authorization whose credentials follow them after a blank.
const SCHEMES: &[&str] = &["bearer", "basic", "token", "digest", "negotiate", "ntlm"];

/// A bearer token standing alone is at least this long: shorter, `bearer` is a word of prose.
const MIN_BEARER_LEN: usize = 8;

/// What ends an unquoted value: a blank, a quote, and what separates the pairs of a URL's query,
/// a list, a cookie or a script, or closes a bracket.
fn ends_value(c: char) -> bool {
    c.is_whitespace() || "\"'&,;)]}".contains(c)
}

fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// The byte after the blanks from `at` on.
fn skip_blanks(text: &str, at: usize) -> usize {
    text[at..]
        .find(|c| !is_blank(c))
        .map_or(text.len(), |i| at + i)
}

/// The byte that ends the unquoted word at `at`: the marker is one word, though it holds a `]`.
fn word_end(text: &str, at: usize) -> usize {
    if text[at..].starts_with(REDACTED) {
        return at + REDACTED.len();
    }
    text[at..].find(ends_value).map_or(text.len(), |i| at + i)
}

/// Whether the byte before `at` does not continue a word (`Proxy-Authorization` is a header of
/// its own; `XAuthorization` is some other word).
fn starts_a_word(text: &str, at: usize) -> bool {
    !text[..at]
        .chars()
        .next_back()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The credential of a value that starts at `at`: what a quote there encloses (a `"` string's
/// escapes honoured; to the end if it is not closed), the marker, else the word after a scheme
/// (`Bearer V`), else the first word. `None` when it is empty.
fn credential_at(text: &str, at: usize) -> Option<Range<usize>> {
    let quote = text[at..]
        .chars()
        .next()
        .filter(|c| *c == '"' || *c == '\'');
    if let Some(quote) = quote {
        let inner = at + 1;
        let end = closing_quote(text, inner, quote).unwrap_or(text.len());
        return (end > inner).then_some(inner..end);
    }
    let first = at..word_end(text, at);
    if first.is_empty() {
        return None;
    }
    let scheme = &text[first.clone()];
    if SCHEMES.iter().any(|s| scheme.eq_ignore_ascii_case(s)) {
        let after = skip_blanks(text, first.end);
        let second = after..word_end(text, after);
        if after > first.end && !second.is_empty() {
            return Some(second);
        }
    }
    Some(first)
}

/// Where the quote that closes a string opened before `from` stands: a `"` after a backslash
/// is escaped, a `'` never is.
fn closing_quote(text: &str, from: usize, quote: char) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in text[from..].char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' && quote == '"' {
            escaped = true;
        } else if c == quote {
            return Some(from + i);
        }
    }
    None
}

/// `Authorization: V`, `authorization=V` and `Proxy-Authorization: V`: V's credentials.
fn authorizations(text: &str) -> Vec<Found> {
    const NAME: &str = "authorization";
    let lower = text.to_ascii_lowercase();
    lower
        .match_indices(NAME)
        .filter(|(at, _)| starts_a_word(text, *at))
        .filter_map(|(at, _)| {
            let sep = skip_blanks(text, at + NAME.len());
            if !text[sep..].starts_with([':', '=']) {
                return None;
            }
            let range = credential_at(text, skip_blanks(text, sep + 1))?;
            Some(Found {
                range,
                json: false,
                searched: true,
            })
        })
        .collect()
}

/// `Bearer V` wherever it stands: the token V (its characters those of RFC 6750's `b64token`).
fn bearer_tokens(text: &str) -> Vec<Found> {
    const NAME: &str = "bearer";
    let token_char = |c: char| c.is_ascii_alphanumeric() || "-._~+/=".contains(c);
    let lower = text.to_ascii_lowercase();
    lower
        .match_indices(NAME)
        .filter(|(at, _)| starts_a_word(text, *at))
        .filter_map(|(at, _)| {
            let start = skip_blanks(text, at + NAME.len());
            let end = text[start..]
                .find(|c| !token_char(c))
                .map_or(text.len(), |i| start + i);
            (start > at + NAME.len() && end - start >= MIN_BEARER_LEN).then_some(Found {
                range: start..end,
                json: false,
                searched: true,
            })
        })
        .collect()
}

/// The values of the JSON members whose keys look like credentials', at any depth, in a JSON
/// argument or in JSON within a script.
fn json_members(text: &str) -> Vec<Found> {
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(offset) = text[at..].find('"') {
        let start = at + offset;
        let Some(close) = closing_quote(text, start + 1, '"') else {
            break;
        };
        let end = close + 1;
        at = end;
        let colon = skip_whitespace(text, end);
        if !text[colon..].starts_with(':') {
            continue;
        }
        let Ok(key) = serde_json::from_str::<String>(&text[start..end]) else {
            continue;
        };
        let named = names_credential(&key);
        if !named && !is_credential(&key) {
            continue;
        }
        let value_at = skip_whitespace(text, colon + 1);
        if !named && !text[value_at..].starts_with('"') {
            continue;
        }
        if let Some(range) = json_value_at(text, value_at) {
            at = range.end;
            found.push(Found {
                range,
                json: true,
                searched: named,
            });
        }
    }
    found
}

fn skip_whitespace(text: &str, at: usize) -> usize {
    text[at..]
        .find(|c: char| !c.is_whitespace())
        .map_or(text.len(), |i| at + i)
}

/// Where the JSON value that starts at `at` ends: a string to its closing quote (or the end), any
/// other value as JSON reads it, or, where it does not read (JSON cut short, or broken by a
/// shell's quoting), its first word.
fn json_value_at(text: &str, at: usize) -> Option<Range<usize>> {
    if text[at..].starts_with('"') {
        let end = closing_quote(text, at + 1, '"').map_or(text.len(), |close| close + 1);
        return Some(at..end);
    }
    let mut values =
        serde_json::Deserializer::from_str(&text[at..]).into_iter::<serde::de::IgnoredAny>();
    let end = match values.next() {
        Some(Ok(_)) => at + values.byte_offset(),
        _ => word_end(text, at),
    };
    (end > at).then_some(at..end)
}

/// The characters of a pair's key.
fn key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_.-".contains(c)
}

/// The values of the `key=value`, `key = value`, `key: value`, `key:value` and `'key': value`
/// pairs whose keys name credentials (a key's leading `-` and `+`, a flag's and Hydra's, left
/// out). `==`, `!=`, `<=`, `>=`, `:=` and `::` make no pair.
fn pairs(text: &str) -> Vec<Found> {
    let mut found = Vec::new();
    for (at, sep) in text.char_indices().filter(|(_, c)| *c == '=' || *c == ':') {
        let next = text[at + 1..].chars().next();
        let previous = text[..at].chars().next_back();
        if next == Some('=')
            || (sep == ':' && next == Some(':'))
            || previous.is_some_and(|c| "=!<>:".contains(c))
        {
            continue;
        }
        let key_end = text[..at].trim_end_matches(is_blank).len();
        let spaced = key_end < at;
        let key = match text[..key_end].strip_suffix('\'') {
            Some(before) => before
                .rfind('\'')
                .map(|open| &before[open + 1..])
                .filter(|key| key.chars().all(key_char)),
            // The last part of a path names a file, not a credential (`-v /run/token:/token`).
            None => {
                let start = text[..key_end].trim_end_matches(key_char).len();
                Some(&text[start..key_end]).filter(|_| !text[..start].ends_with('/'))
            }
        };
        let Some(key) = key.map(|k| k.trim_start_matches(['-', '+'])) else {
            continue;
        };
        if !names_credential(key) {
            continue;
        }
        // `key= value` is a shell's empty assignment before a command, not a pair.
        let value_at = if sep == ':' || spaced {
            skip_blanks(text, at + 1)
        } else {
            at + 1
        };
        if let Some(range) = credential_at(text, value_at) {
            found.push(Found {
                range,
                json: false,
                searched: true,
            });
        }
    }
    found
}
