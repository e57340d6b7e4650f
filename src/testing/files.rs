//! Small fixtures the crate's unit tests share: a directory only its owner may write to, and an
//! environment given as pairs.

use std::ffi::OsString;

/// A temporary directory only its owner may write to, whatever the umask: unilab refuses a log,
/// a state root or a job directory in any other.
pub(crate) fn private_tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new()
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .unwrap()
}

/// An environment holding `pairs` and nothing else, as the functions that read one by name take
/// it.
pub(crate) fn fake_env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> + use<> {
    let pairs: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| OsString::from(v))
    }
}
