//! The one route from a transcript's bytes to the text its parsers read.
//!
//! Two kinds of damage are repaired on it, and only there, so detection,
//! both passes of a streamed import and a whole-document import all read
//! the same text:
//! - invalid UTF-8 becomes U+FFFD ([`String::from_utf8_lossy`]);
//! - a `\uXXXX` escape of a UTF-16 surrogate that is not half of a pair
//!   becomes `\uFFFD`. JavaScript's `JSON.stringify` and Python's
//!   `json.dumps` write such escapes when a string was cut inside an
//!   emoji; serde_json refuses them, which cost the whole line (or the
//!   whole file of a one-document format). The replacement is as long as
//!   the escape, so offsets and columns in later errors still point at the
//!   file.

use std::borrow::Cow;
use std::fmt;

/// Lone surrogate escapes replaced in an imported file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoneSurrogates {
    /// Byte offset of the first one in the file.
    pub first_offset: u64,
    /// How many were replaced.
    pub replaced: u64,
}

impl LoneSurrogates {
    /// Adds `found` (offsets relative to `base`) to `total`.
    pub(crate) fn add(
        total: &mut Option<LoneSurrogates>,
        base: u64,
        found: Option<LoneSurrogates>,
    ) {
        let Some(found) = found else {
            return;
        };
        total
            .get_or_insert(LoneSurrogates {
                first_offset: base + found.first_offset,
                replaced: 0,
            })
            .replaced += found.replaced;
    }
}

impl fmt::Display for LoneSurrogates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (escapes, were) = if self.replaced == 1 {
            ("escape", "was")
        } else {
            ("escapes", "were")
        };
        write!(
            f,
            "{} unpaired UTF-16 surrogate {escapes} (\\uD800-\\uDFFF, as a string cut inside an emoji leaves) {were} replaced by U+FFFD, the first at byte offset {}; the rest of each string was imported",
            self.replaced, self.first_offset
        )
    }
}

/// Decodes `bytes` as the importers read them: invalid UTF-8 and lone
/// surrogate escapes replaced (see the module docs).
pub(crate) fn decode(bytes: &[u8]) -> Cow<'_, str> {
    repair_lossy(String::from_utf8_lossy(bytes)).0
}

/// [`repair_surrogates`] on text that may already be owned.
pub(crate) fn repair_lossy(text: Cow<'_, str>) -> (Cow<'_, str>, Option<LoneSurrogates>) {
    match text {
        Cow::Borrowed(text) => repair_surrogates(text),
        Cow::Owned(text) => {
            let (repaired, found) = repair_surrogates(&text);
            let repaired = match repaired {
                Cow::Owned(repaired) => repaired,
                Cow::Borrowed(_) => text,
            };
            (Cow::Owned(repaired), found)
        }
    }
}

/// Returns `text` with every lone surrogate escape replaced by `\uFFFD`,
/// and where and how many were; borrowed when there was none (the usual
/// case: one `memchr` pass when the text has no backslash).
pub(crate) fn repair_surrogates(text: &str) -> (Cow<'_, str>, Option<LoneSurrogates>) {
    let bytes = text.as_bytes();
    let mut repaired: Option<Vec<u8>> = None;
    let mut found: Option<LoneSurrogates> = None;
    let mut pos = 0usize;
    // `pos` may step past the end after a trailing backslash.
    while let Some(next) = bytes
        .get(pos..)
        .and_then(|rest| memchr::memchr(b'\\', rest))
    {
        let at = pos + next;
        let Some(unit) = escaped_unit(bytes, at) else {
            // Any other escape, `\\` included: skip the escaped byte.
            pos = at + 2;
            continue;
        };
        pos = at + 6;
        let lone = match unit {
            0xD800..=0xDBFF => match escaped_unit(bytes, at + 6) {
                Some(0xDC00..=0xDFFF) => {
                    pos = at + 12;
                    false
                }
                _ => true,
            },
            0xDC00..=0xDFFF => true,
            _ => false,
        };
        if lone {
            LoneSurrogates::add(
                &mut found,
                0,
                Some(LoneSurrogates {
                    first_offset: at as u64,
                    replaced: 1,
                }),
            );
            let out = repaired.get_or_insert_with(|| bytes.to_vec());
            out[at..at + 6].copy_from_slice(b"\\uFFFD");
        }
    }
    match repaired {
        // Only ASCII bytes were replaced by ASCII bytes.
        Some(out) => (
            Cow::Owned(String::from_utf8(out).unwrap_or_else(|_| text.to_owned())),
            found,
        ),
        None => (Cow::Borrowed(text), None),
    }
}

/// The code unit of a `\uXXXX` escape at `at`, if one is there.
fn escaped_unit(bytes: &[u8], at: usize) -> Option<u16> {
    let escape = bytes.get(at..at + 6)?;
    if escape[0] != b'\\' || escape[1] != b'u' {
        return None;
    }
    let hex = std::str::from_utf8(&escape[2..]).ok()?;
    if !hex.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return None;
    }
    u16::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repaired(text: &str) -> (String, u64) {
        let (text, found) = repair_surrogates(text);
        (text.into_owned(), found.map_or(0, |found| found.replaced))
    }

    #[test]
    fn lone_surrogates_become_replacement_characters_and_pairs_stay() {
        // A cut emoji: the high half alone, at the end of a string.
        assert_eq!(
            repaired(r#"{"a":"x\ud83d"}"#),
            (r#"{"a":"x\uFFFD"}"#.to_owned(), 1)
        );
        // A low half alone, and a high half followed by something else.
        assert_eq!(
            repaired(r#"["\uDE00", "\uD83D\u0041"]"#),
            (r#"["\uFFFD", "\uFFFD\u0041"]"#.to_owned(), 2)
        );
        // A whole pair, other escapes and an escaped backslash before `u`
        // are left as they are.
        for kept in [
            r#"{"a":"\ud83d\ude00 \n \" \u00e9"}"#,
            r#"{"a":"\\ud83d"}"#,
            r#"{"a":"\\\\ud83d"}"#,
            "no escapes at all",
            r#"{"a":"\ud83"}"#,
            "trailing \\",
        ] {
            assert_eq!(repaired(kept), (kept.to_owned(), 0), "{kept}");
            assert!(matches!(repair_surrogates(kept).0, Cow::Borrowed(_)));
        }
        // An escaped backslash, then a real lone escape, found where it is.
        assert_eq!(repaired(r#""\\\ud800""#), (r#""\\\uFFFD""#.to_owned(), 1));
        assert_eq!(
            repair_surrogates(r#"["\ud800", "\udc00"]"#).1,
            Some(LoneSurrogates {
                first_offset: 2,
                replaced: 2
            })
        );
    }

    #[test]
    fn repaired_text_parses_with_the_replacement_character() {
        let (text, count) = repaired(r#"{"text":"cut 🎉 here \ud83c","pair":"\ud83c\udf89"}"#);
        assert_eq!(count, 1);
        let value: serde_json::Value = serde_json::from_str(&text).expect("parses");
        assert_eq!(value["text"], "cut 🎉 here \u{fffd}");
        assert_eq!(value["pair"], "🎉");
    }

    #[test]
    fn decoding_repairs_both_kinds_of_damage() {
        assert_eq!(
            decode(b"{\"a\":\"\xff \\udc00\"}"),
            "{\"a\":\"\u{fffd} \\uFFFD\"}"
        );
        assert!(matches!(decode(b"{\"a\":1}"), Cow::Borrowed(_)));
    }
}
