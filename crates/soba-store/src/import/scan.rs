//! The first pass of a tree-shaped JSONL import reads only a few top-level
//! keys of each line (its type, id and parent), not the whole object: the
//! rest of the line is validated and skipped, never built into a value.
//!
//! A line is read through the same `serde_json` parser the second pass uses
//! to build the whole object, by the same route (every value through
//! `deserialize_any`, every string unescaped and checked), so the two
//! passes agree on which lines are JSON objects and say the same thing
//! about those that are not.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// A wanted top-level value, as far as a first pass reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Top {
    Null,
    Bool(bool),
    Str(String),
    /// A number, an array or an object.
    Other,
}

/// The wanted top-level values of one line that is a JSON object.
#[derive(Debug, Clone)]
pub(crate) struct TopLevel {
    keys: &'static [&'static str],
    /// By the position of the key in `keys`; `None` when absent.
    values: Vec<Option<Top>>,
}

impl TopLevel {
    /// Returns the value of `key` (one of the keys scanned for).
    pub fn get(&self, key: &str) -> Option<&Top> {
        let pos = self.keys.iter().position(|&wanted| wanted == key)?;
        self.values[pos].as_ref()
    }

    /// Returns whether the object has `key` (one of the keys scanned for).
    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Returns the string value of `key`.
    pub fn str(&self, key: &str) -> Option<&str> {
        match self.get(key) {
            Some(Top::Str(text)) => Some(text),
            _ => None,
        }
    }
}

/// What one line held.
#[derive(Debug)]
pub(crate) enum Scan {
    /// A JSON object: its wanted top-level values.
    Object(TopLevel),
    /// Valid JSON that is not an object.
    NotObject,
}

/// Reads `line` (already trimmed, not blank) as one JSON value, keeping the
/// top-level values of `keys` when it is an object.
pub(crate) fn scan_line(line: &str, keys: &'static [&'static str]) -> serde_json::Result<Scan> {
    let mut de = serde_json::Deserializer::from_str(line);
    let scan = de.deserialize_any(TopVisitor { keys })?;
    de.end()?;
    Ok(scan)
}

struct TopVisitor {
    keys: &'static [&'static str],
}

impl<'de> Visitor<'de> for TopVisitor {
    type Value = Scan;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Scan, E> {
        Ok(Scan::NotObject)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Scan, E> {
        Ok(Scan::NotObject)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Scan, E> {
        Ok(Scan::NotObject)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Scan, E> {
        Ok(Scan::NotObject)
    }

    fn visit_str<E>(self, _: &str) -> Result<Scan, E> {
        Ok(Scan::NotObject)
    }

    fn visit_unit<E>(self) -> Result<Scan, E> {
        Ok(Scan::NotObject)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Scan, A::Error> {
        Skip.visit_seq(seq)?;
        Ok(Scan::NotObject)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scan, A::Error> {
        let mut values = vec![None; self.keys.len()];
        while let Some(wanted) = map.next_key_seed(KeySeed { keys: self.keys })? {
            match wanted {
                // A repeated key keeps its last value, as a parsed object does.
                Some(pos) => values[pos] = Some(map.next_value_seed(TopValue)?),
                None => {
                    map.next_value_seed(Skip)?;
                }
            }
        }
        Ok(Scan::Object(TopLevel {
            keys: self.keys,
            values,
        }))
    }
}

/// Reads a key as the position of a wanted key, or `None`.
struct KeySeed {
    keys: &'static [&'static str],
}

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Option<usize>, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E>(self, key: &str) -> Result<Option<usize>, E> {
        Ok(self.keys.iter().position(|&wanted| wanted == key))
    }
}

/// Reads a wanted value.
struct TopValue;

impl<'de> DeserializeSeed<'de> for TopValue {
    type Value = Top;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Top, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TopValue {
    type Value = Top;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Top, E> {
        Ok(Top::Bool(value))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Top, E> {
        Ok(Top::Other)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Top, E> {
        Ok(Top::Other)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Top, E> {
        Ok(Top::Other)
    }

    fn visit_str<E>(self, value: &str) -> Result<Top, E> {
        Ok(Top::Str(value.to_owned()))
    }

    fn visit_unit<E>(self) -> Result<Top, E> {
        Ok(Top::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Top, A::Error> {
        Skip.visit_seq(seq)?;
        Ok(Top::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Top, A::Error> {
        Skip.visit_map(map)?;
        Ok(Top::Other)
    }
}

/// Reads and drops any value, checking it as building it would.
#[derive(Clone, Copy)]
struct Skip;

impl<'de> DeserializeSeed<'de> for Skip {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Skip {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Skip)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_key_seed(Skip)?.is_some() {
            map.next_value_seed(Skip)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::Value;

    use super::*;

    const KEYS: &[&str] = &["type", "id", "parentId"];

    /// Whether a full parse sees the line as an object, and the error text.
    fn full(line: &str) -> Result<bool, String> {
        serde_json::from_str::<Value>(line)
            .map(|value| value.is_object())
            .map_err(|err| err.to_string())
    }

    fn scanned(line: &str) -> Result<bool, String> {
        scan_line(line, KEYS)
            .map(|scan| matches!(scan, Scan::Object(_)))
            .map_err(|err| err.to_string())
    }

    #[test]
    fn wanted_keys_are_read_and_the_rest_skipped() {
        let line = r#"{"type":"message","message":{"id":"inner","content":[1,2.5,null,{"a":"\u00e9"}]},"id":"a\"b","parentId":null,"n":-3}"#;
        let Scan::Object(top) = scan_line(line, KEYS).unwrap() else {
            panic!("an object");
        };
        assert_eq!(top.str("type"), Some("message"));
        assert_eq!(top.str("id"), Some("a\"b"));
        assert_eq!(top.get("parentId"), Some(&Top::Null));
        assert!(top.has("parentId"));
        assert_eq!(top.get("missing"), None);
    }

    #[test]
    fn a_repeated_key_keeps_its_last_value() {
        let Scan::Object(top) = scan_line(r#"{"id":"a","id":7,"id":"c"}"#, KEYS).unwrap() else {
            panic!("an object");
        };
        assert_eq!(top.str("id"), Some("c"));
    }

    #[test]
    fn the_scan_and_a_full_parse_agree_on_every_line() {
        let lines = [
            r#"{"id":"a"}"#,
            r#"[1,{"id":"a"}]"#,
            r#""text""#,
            "null",
            "3",
            r#"{"id":"a"} x"#,
            r#"{"id":"a",}"#,
            r#"{"id":"a""#,
            r#"{"x":"\ud800"}"#,
            r#"{"x":"\ud800\u0041"}"#,
            r#"{"x":"\udc00"}"#,
            r#"{"x":"\ud83d\ude00"}"#,
            r#"{"x":"\q"}"#,
            "{\"x\":\"a\u{1}b\"}",
            r#"{"x":1e999}"#,
            r#"{"x":-0.0,"y":123456789012345678901234567890}"#,
            r#"{"x":01}"#,
            r#"{"x":tru}"#,
            r#"{1:2}"#,
            r#"{"\ud800":1}"#,
            &format!("{}{}", "[".repeat(200), "]".repeat(200)),
            &format!(r#"{{"x":{}{}}}"#, "[".repeat(126), "]".repeat(126)),
            &format!(r#"{{"x":{}{}}}"#, "[".repeat(127), "]".repeat(127)),
        ];
        for line in lines {
            assert_eq!(scanned(line), full(line), "{line}");
        }
    }

    proptest! {
        /// Lines built from JSON's own pieces, joined at random (mostly not
        /// JSON at all): the scan takes exactly the lines a full parse
        /// takes as objects, and fails with the same words on the rest.
        #[test]
        fn the_scan_agrees_with_a_full_parse_on_random_lines(
            pieces in proptest::collection::vec(
                prop_oneof![
                    Just("{"), Just("}"), Just("["), Just("]"), Just(","), Just(":"),
                    Just("\"id\""), Just("\"parentId\""), Just("\"type\""), Just("\"x\""),
                    Just("null"), Just("true"), Just("false"), Just("-1.5e3"), Just("1e999"),
                    Just("0"), Just("\"\\ud800\""), Just("\"\\u00e9\""), Just("\"\\n\""),
                    Just("\""), Just(" "), Just("\u{1}"), Just("é"),
                ],
                0..24,
            )
        ) {
            let line = pieces.concat();
            prop_assert_eq!(scanned(&line), full(&line), "{}", line);
        }
    }
}
