//! Entry ids: a kind prefix plus a uuid v7 in hex, and their short forms.

use std::fmt;
use std::ops::Bound;

/// The kind of an entry id, which decides its prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdKind {
    /// `ck_…`: a capsule; its id is the checkpoint id.
    Capsule,
    /// `e_…`: every other entry.
    Entry,
}

impl IdKind {
    /// Returns the textual prefix, underscore included.
    pub fn prefix(self) -> &'static str {
        match self {
            IdKind::Capsule => "ck_",
            IdKind::Entry => "e_",
        }
    }
}

/// Length of a uuid in hex.
const UUID_HEX_LEN: usize = 32;
/// The first 13 hex digits of a uuid v7 are the 48-bit timestamp and the
/// version nibble; short ids are taken from the random bits after them.
const RANDOM_HEX_START: usize = 13;
/// Short ids never use fewer hex digits than this.
pub const MIN_SHORT_HEX: usize = 4;

/// Why a string is not an entry id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdError {
    /// The string has neither the `ck_` nor the `e_` prefix.
    #[error("entry id {0:?} has no `ck_` or `e_` prefix")]
    Prefix(String),
    /// The part after the prefix is not 32 lowercase hex digits.
    #[error("entry id {0:?} is not a prefix followed by 32 hex digits")]
    Hex(String),
}

/// The id of one session-log entry, e.g. `e_0190f3a2…` or `ck_0190f3a2…`.
///
/// Foreign ids are never used as entry ids: importers keep them in
/// `importedFrom` and mint SOBA ids.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryId(String);

impl EntryId {
    /// Builds an id from its kind and the 128 bits of a uuid (v7 in practice).
    pub fn from_uuid(kind: IdKind, uuid: u128) -> Self {
        EntryId(format!("{}{uuid:032x}", kind.prefix()))
    }

    /// Parses an id written by [`EntryId::as_str`], checking prefix and hex.
    pub fn parse(text: &str) -> Result<Self, IdError> {
        let hex = text
            .strip_prefix("ck_")
            .or_else(|| text.strip_prefix("e_"))
            .ok_or_else(|| IdError::Prefix(text.to_owned()))?;
        let is_hex = hex.len() == UUID_HEX_LEN
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !is_hex {
            return Err(IdError::Hex(text.to_owned()));
        }
        Ok(EntryId(text.to_owned()))
    }

    /// Returns the full id text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Returns the kind, read from the prefix.
    pub fn kind(&self) -> IdKind {
        if self.0.starts_with("ck_") {
            IdKind::Capsule
        } else {
            IdKind::Entry
        }
    }

    /// Returns the uuid hex digits after the prefix.
    pub fn hex(&self) -> &str {
        &self.0[self.kind().prefix().len()..]
    }

    /// Returns the random hex digits a short id is drawn from.
    pub fn random_hex(&self) -> &str {
        &self.hex()[RANDOM_HEX_START..]
    }

    /// Returns the short form `prefix + n random hex digits`.
    pub fn short_with(&self, n_hex: usize) -> String {
        let random = self.random_hex();
        let n_hex = n_hex.clamp(MIN_SHORT_HEX, random.len());
        format!("{}{}", self.kind().prefix(), &random[..n_hex])
    }

    /// Returns whether `short` (a full id, or a prefix plus leading random
    /// hex digits, at least [`MIN_SHORT_HEX`]) designates this id.
    pub fn matches_short(&self, short: &str) -> bool {
        if short == self.0 {
            return true;
        }
        let Some(digits) = short.strip_prefix(self.kind().prefix()) else {
            return false;
        };
        digits.len() >= MIN_SHORT_HEX && self.random_hex().starts_with(digits)
    }
}

/// Returns the number of random hex digits (at least [`MIN_SHORT_HEX`]) that
/// makes every id in `ids` distinct from every other one.
pub fn shortest_unique_len<'a>(ids: impl IntoIterator<Item = &'a EntryId>) -> usize {
    let mut randoms: Vec<&str> = ids.into_iter().map(EntryId::random_hex).collect();
    randoms.sort_unstable();
    let longest_shared = randoms
        .windows(2)
        .map(|pair| {
            pair[0]
                .bytes()
                .zip(pair[1].bytes())
                .take_while(|(a, b)| a == b)
                .count()
        })
        .max()
        .unwrap_or(0);
    (longest_shared + 1).max(MIN_SHORT_HEX)
}

/// [`shortest_unique_len`] kept up to date as ids are added: the random
/// digits of every id, sorted, so an insertion compares with its two
/// neighbours only (O(log n)).
#[derive(Debug, Clone, Default)]
pub struct ShortIds {
    randoms: std::collections::BTreeSet<String>,
    longest_shared: usize,
}

impl ShortIds {
    /// Returns the set of `ids`.
    pub fn new<'a>(ids: impl IntoIterator<Item = &'a EntryId>) -> Self {
        let mut short = ShortIds::default();
        for id in ids {
            short.insert(id);
        }
        short
    }

    /// Adds an id.
    pub fn insert(&mut self, id: &EntryId) {
        let random = id.random_hex();
        let shared = |other: &String| {
            other
                .bytes()
                .zip(random.bytes())
                .take_while(|(a, b)| a == b)
                .count()
        };
        let before = self
            .randoms
            .range::<str, _>((Bound::Unbounded, Bound::Excluded(random)))
            .next_back()
            .map(shared);
        let after = self
            .randoms
            .range::<str, _>((Bound::Excluded(random), Bound::Unbounded))
            .next()
            .map(shared);
        let inserted = self.randoms.insert(random.to_owned());
        // An id seen before (the same entry twice) shares all its digits
        // with itself, which says nothing about distinctness.
        if inserted {
            self.longest_shared = self
                .longest_shared
                .max(before.unwrap_or(0))
                .max(after.unwrap_or(0));
        }
    }

    /// Returns the number of random hex digits that keeps every id added
    /// distinct, as [`shortest_unique_len`] does.
    pub fn len(&self) -> usize {
        (self.longest_shared + 1).max(MIN_SHORT_HEX)
    }

    /// Returns whether no id was added.
    pub fn is_empty(&self) -> bool {
        self.randoms.is_empty()
    }
}

impl fmt::Debug for EntryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for EntryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_shortens() {
        let id = EntryId::from_uuid(IdKind::Capsule, 0x0190_f3a2_b4c5_77f3_a9d1_0000_0000_0001);
        assert_eq!(id.as_str(), "ck_0190f3a2b4c577f3a9d1000000000001");
        assert_eq!(EntryId::parse(id.as_str()), Ok(id.clone()));
        assert_eq!(id.random_hex(), "7f3a9d1000000000001");
        assert_eq!(id.short_with(4), "ck_7f3a");
        assert!(id.matches_short("ck_7f3a"));
        assert!(!id.matches_short("ck_7f3"));
        assert!(!id.matches_short("e_7f3a"));
    }

    #[test]
    fn rejects_bad_ids() {
        assert!(matches!(EntryId::parse("x_00"), Err(IdError::Prefix(_))));
        assert!(matches!(EntryId::parse("e_00"), Err(IdError::Hex(_))));
    }

    #[test]
    fn shortest_unique_grows_with_collisions() {
        let a = EntryId::from_uuid(IdKind::Entry, 0x0000_0000_0000_7abc_d100_0000_0000_0000);
        let b = EntryId::from_uuid(IdKind::Entry, 0x0000_0000_0000_7abc_d200_0000_0000_0000);
        assert_eq!(shortest_unique_len([&a, &b]), 5);
        assert_eq!(shortest_unique_len([&a]), 4);
    }

    proptest::proptest! {
        #[test]
        fn short_ids_grow_like_the_batch_computation(
            uuids in proptest::collection::vec(proptest::prelude::any::<u128>(), 0..60),
            narrow in proptest::prelude::any::<bool>(),
        ) {
            // Narrowed uuids share long prefixes, so the length moves.
            let ids: Vec<EntryId> = uuids
                .iter()
                .map(|&uuid| EntryId::from_uuid(IdKind::Entry, if narrow { uuid & 0xff0f } else { uuid }))
                .collect();
            let mut short = ShortIds::default();
            for (n, id) in ids.iter().enumerate() {
                short.insert(id);
                proptest::prop_assert_eq!(short.len(), shortest_unique_len(ids[..=n].iter().collect::<std::collections::BTreeSet<_>>()));
            }
            proptest::prop_assert_eq!(ShortIds::new(&ids).len(), shortest_unique_len(ids.iter().collect::<std::collections::BTreeSet<_>>()));
        }
    }
}
