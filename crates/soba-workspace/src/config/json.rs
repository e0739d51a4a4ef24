//! The one JSON parser for configuration text: config files, and the JSON
//! form of `SOBA_*` and `--set` values. It differs from `serde_json`'s in
//! two ways: a leading UTF-8 byte-order mark is skipped (editors on Windows
//! write one, and the log reader accepts it too), and an object that names
//! a key twice is an error naming the key's path and line, where
//! `serde_json` would silently keep the last value and drop the first.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// The byte-order mark some editors put first in a UTF-8 file.
const BOM: char = '\u{feff}';

/// Why configuration text is not acceptable JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonError {
    /// Not JSON at all.
    Syntax {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// An object names the same key twice.
    DuplicateKey {
        /// The path of the repeated key, root first (array items are
        /// their index).
        path: Vec<String>,
        /// The 1-based line of the second occurrence.
        line: usize,
    },
}

/// Parses `text` (a leading byte-order mark skipped) as one JSON value,
/// refusing an object that repeats a key.
pub fn parse(text: &str) -> Result<Value, JsonError> {
    let text = text.strip_prefix(BOM).unwrap_or(text);
    let state = RefCell::new(State::default());
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let parsed = StrictValue { state: &state }
        .deserialize(&mut deserializer)
        .and_then(|value| deserializer.end().map(|()| value));
    parsed.map_err(|err| match state.into_inner().duplicate {
        Some(path) => JsonError::DuplicateKey {
            path,
            line: err.line(),
        },
        None => JsonError::Syntax {
            line: err.line(),
            column: err.column(),
            message: err.to_string(),
        },
    })
}

/// Where the walk is, and the duplicate found, if any.
#[derive(Debug, Default)]
struct State {
    path: Vec<String>,
    duplicate: Option<Vec<String>>,
}

/// Deserializes one [`Value`], tracking the key path.
#[derive(Clone, Copy)]
struct StrictValue<'a> {
    state: &'a RefCell<State>,
}

impl<'de> DeserializeSeed<'de> for StrictValue<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictValue<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Value, E> {
        // JSON text cannot spell NaN or an infinity, so this is always Some.
        Ok(Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            self.state.borrow_mut().path.push(items.len().to_string());
            let item = seq.next_element_seed(self)?;
            self.state.borrow_mut().path.pop();
            match item {
                Some(item) => items.push(item),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut map = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            if map.contains_key(&key) {
                let mut state = self.state.borrow_mut();
                let mut path = state.path.clone();
                path.push(key);
                state.duplicate = Some(path);
                return Err(de::Error::custom("duplicate key"));
            }
            self.state.borrow_mut().path.push(key.clone());
            let value = access.next_value_seed(self)?;
            self.state.borrow_mut().path.pop();
            map.insert(key, value);
        }
        Ok(Value::Object(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(text: &str, expected: Result<Value, JsonError>) {
        assert_eq!(parse(text), expected, "{text:?}");
    }

    fn duplicate(path: &[&str], line: usize) -> Result<Value, JsonError> {
        Err(JsonError::DuplicateKey {
            path: path.iter().map(|s| (*s).to_owned()).collect(),
            line,
        })
    }

    #[test]
    fn parses_what_serde_json_parses() {
        let text = r#"{"a": [1, -2, 2.5, "x", null, true, {"b": {}}], "c": 18446744073709551615}"#;
        check(text, Ok(serde_json::from_str(text).unwrap()));
        check("  7 ", Ok(json!(7)));
    }

    #[test]
    fn a_leading_byte_order_mark_is_skipped() {
        check("\u{feff}{\"model\": \"x\"}", Ok(json!({"model": "x"})));
        // Only one, and only first.
        assert!(matches!(
            parse("\u{feff}\u{feff}{}"),
            Err(JsonError::Syntax { .. })
        ));
        assert!(matches!(parse("{}\u{feff}"), Err(JsonError::Syntax { .. })));
    }

    #[test]
    fn a_repeated_key_is_named_with_its_path_and_line() {
        check(r#"{"model": "a", "model": "b"}"#, duplicate(&["model"], 1));
        check(
            "{\n  \"compaction\": {\"keepRecentTokens\": 1},\n  \"compaction\": {\"auto\": false}\n}",
            duplicate(&["compaction"], 3),
        );
        check(
            "{\"models\": {\"ollama/x\": {\n\"contextWindow\": 1,\n\"contextWindow\": 2}}}",
            duplicate(&["models", "ollama/x", "contextWindow"], 3),
        );
        check(r#"[{"a": 1}, {"a": 1, "a": 2}]"#, duplicate(&["1", "a"], 1));
        // The same key in sibling objects is fine.
        check(
            r#"{"a": {"x": 1}, "b": {"x": 2}}"#,
            Ok(json!({"a": {"x": 1}, "b": {"x": 2}})),
        );
    }

    #[test]
    fn syntax_errors_keep_serde_jsons_position_and_message() {
        let text = "{\"a\": 1,,}";
        let serde = serde_json::from_str::<Value>(text).unwrap_err();
        check(
            text,
            Err(JsonError::Syntax {
                line: serde.line(),
                column: serde.column(),
                message: serde.to_string(),
            }),
        );
        assert!(matches!(
            parse("{} trailing"),
            Err(JsonError::Syntax { line: 1, .. })
        ));
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let text = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(matches!(parse(&text), Err(JsonError::Syntax { .. })));
    }
}
