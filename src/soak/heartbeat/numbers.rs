//! A beat's numbers, held in place: at most [`MAX_NUMBERS`], in their keys' byte order (as a
//! `BTreeMap<String, f64>` orders them), each key borrowed from its line unless it was spelled
//! with escapes. A thousand beats a second take no allocation for their numbers.

use std::borrow::Cow;
use std::fmt;

/// The most user numbers a beat keeps.
pub(crate) const MAX_NUMBERS: usize = 16;

/// Up to [`MAX_NUMBERS`] numbers by key, in the keys' byte order.
#[derive(Clone)]
pub struct Numbers<'a> {
    len: usize,
    pairs: [(Cow<'a, str>, f64); MAX_NUMBERS],
}

impl<'a> Numbers<'a> {
    pub fn new() -> Self {
        Numbers {
            len: 0,
            pairs: std::array::from_fn(|_| (Cow::Borrowed(""), 0.0)),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The numbers in their keys' order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, f64)> {
        self.pairs[..self.len]
            .iter()
            .map(|(key, value)| (&**key, *value))
    }

    pub fn get(&self, key: &str) -> Option<f64> {
        let at = self.find(key).ok()?;
        Some(self.pairs[at].1)
    }

    fn find(&self, key: &str) -> Result<usize, usize> {
        self.pairs[..self.len].binary_search_by(|(kept, _)| (**kept).cmp(key))
    }

    /// Sets `key` to `value`; `false`, changing nothing, when `key` is new and the numbers are
    /// full.
    pub(super) fn set(&mut self, key: Cow<'a, str>, value: f64) -> bool {
        match self.find(&key) {
            Ok(at) => self.pairs[at].1 = value,
            Err(_) if self.len == MAX_NUMBERS => return false,
            Err(at) => {
                self.pairs[at..=self.len].rotate_right(1);
                self.pairs[at] = (key, value);
                self.len += 1;
            }
        }
        true
    }

    /// Forgets every number.
    pub(super) fn clear(&mut self) {
        for pair in &mut self.pairs[..self.len] {
            *pair = (Cow::Borrowed(""), 0.0);
        }
        self.len = 0;
    }

    /// Forgets `key`, if it is kept.
    pub(super) fn remove(&mut self, key: &str) {
        if let Ok(at) = self.find(key) {
            self.pairs[at..self.len].rotate_left(1);
            self.len -= 1;
            self.pairs[self.len] = (Cow::Borrowed(""), 0.0);
        }
    }

    /// The same numbers, their keys owned.
    pub fn into_owned(self) -> Numbers<'static> {
        let mut owned = Numbers::new();
        owned.len = self.len;
        for (kept, (key, value)) in owned.pairs.iter_mut().zip(self.pairs) {
            *kept = (Cow::Owned(key.into_owned()), value);
        }
        owned
    }
}

impl Default for Numbers<'_> {
    fn default() -> Self {
        Numbers::new()
    }
}

impl PartialEq for Numbers<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl fmt::Debug for Numbers<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// The first [`MAX_NUMBERS`] keys in their order; a repeated key takes its last value.
impl<'a, K: Into<Cow<'a, str>>> FromIterator<(K, f64)> for Numbers<'a> {
    fn from_iter<I: IntoIterator<Item = (K, f64)>>(pairs: I) -> Self {
        let mut all: std::collections::BTreeMap<Cow<'a, str>, f64> = Default::default();
        for (key, value) in pairs {
            all.insert(key.into(), value);
        }
        let mut numbers = Numbers::new();
        for (key, value) in all.into_iter().take(MAX_NUMBERS) {
            numbers.set(key, value);
        }
        numbers
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    proptest::proptest! {
        /// Set and removed in any order, the numbers are a `BTreeMap`'s, but for the keys past
        /// the bound that were never let in.
        #[test]
        fn numbers_behave_as_a_bounded_map(ops in proptest::collection::vec((0u8..24, proptest::option::of(-5.0f64..5.0)), 0..80)) {
            let mut numbers = Numbers::new();
            let mut map = BTreeMap::new();
            for (key, value) in ops {
                let key = format!("k{key:02}");
                match value {
                    Some(v) => {
                        let fits = map.contains_key(&key) || map.len() < MAX_NUMBERS;
                        proptest::prop_assert_eq!(numbers.set(Cow::Owned(key.clone()), v), fits);
                        if fits {
                            map.insert(key, v);
                        }
                    }
                    None => {
                        numbers.remove(&key);
                        map.remove(&key);
                    }
                }
                let seen: Vec<(&str, f64)> = numbers.iter().collect();
                let expected: Vec<(&str, f64)> = map.iter().map(|(k, v)| (k.as_str(), *v)).collect();
                proptest::prop_assert_eq!(seen, expected);
            }
        }
    }

    #[test]
    fn collected_numbers_keep_the_first_keys() {
        let numbers: Numbers = (0..20).rev().map(|i| (format!("k{i:02}"), 1.0)).collect();
        assert_eq!(numbers.len(), MAX_NUMBERS);
        assert_eq!(numbers.iter().next().map(|(k, _)| k), Some("k00"));
        assert_eq!(numbers.iter().last().map(|(k, _)| k), Some("k15"));
        assert_eq!(numbers.get("k16"), None);
        assert_eq!(numbers.clone().into_owned(), numbers);
    }
}
