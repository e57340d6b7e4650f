//! Words for counts, so that every message says `1 sample` and `2 samples`.

/// `n` and `word`, in the plural unless `n` is one: `1 process`, `3 processes`, `0 GPUs`.
pub(crate) fn count(n: impl Into<u64>, word: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("1 {word}")
    } else if word.ends_with('s') || word.ends_with('x') {
        format!("{n} {word}es")
    } else {
        format!("{n} {word}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(count(1u32, "sample"), "1 sample");
        assert_eq!(count(2u32, "sample"), "2 samples");
        assert_eq!(count(0u32, "GPU"), "0 GPUs");
        assert_eq!(count(1u32, "process"), "1 process");
        assert_eq!(count(3u32, "process"), "3 processes");
        assert_eq!(count(2u32, "progress file"), "2 progress files");
    }
}
