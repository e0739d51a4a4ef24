//! Typed access to a tool call's JSON arguments, with errors that tell the
//! model what to send.

use serde_json::Value;
use soba_core::ToolInput;

use super::ToolError;

/// One call's arguments, read on behalf of the named tool.
pub(crate) struct Args<'a> {
    tool: &'static str,
    input: &'a ToolInput,
}

impl<'a> Args<'a> {
    pub(crate) fn new(tool: &'static str, input: &'a ToolInput) -> Self {
        Args { tool, input }
    }

    fn invalid(&self, message: String) -> ToolError {
        ToolError::InvalidArguments {
            tool: self.tool,
            message,
        }
    }

    fn value(&self, key: &str) -> Option<&'a Value> {
        self.input
            .object()
            .get(key)
            .filter(|value| !value.is_null())
    }

    /// Returns a required string argument.
    pub(crate) fn string(&self, key: &str) -> Result<&'a str, ToolError> {
        self.optional_string(key)?
            .ok_or_else(|| self.invalid(format!("`{key}` is required")))
    }

    /// Returns an optional string argument.
    pub(crate) fn optional_string(&self, key: &str) -> Result<Option<&'a str>, ToolError> {
        match self.value(key) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(Some(text)),
            Some(other) => Err(self.invalid(format!("`{key}` must be a string, got {other}"))),
        }
    }

    /// Returns an optional positive integer; numeric strings are accepted
    /// because some models quote numbers.
    pub(crate) fn optional_positive(&self, key: &str) -> Result<Option<u64>, ToolError> {
        let number = match self.value(key) {
            None => return Ok(None),
            Some(Value::Number(number)) => number.as_u64(),
            Some(Value::String(text)) => text.trim().parse::<u64>().ok(),
            Some(_) => None,
        };
        match number {
            Some(n) if n >= 1 => Ok(Some(n)),
            _ => {
                let shown = self.value(key).map(Value::to_string).unwrap_or_default();
                Err(self.invalid(format!("`{key}` must be a positive integer, got {shown}")))
            }
        }
    }

    /// Returns an optional boolean (`true`/`false`, also as strings).
    pub(crate) fn optional_bool(&self, key: &str) -> Result<Option<bool>, ToolError> {
        match self.value(key) {
            None => Ok(None),
            Some(Value::Bool(flag)) => Ok(Some(*flag)),
            Some(Value::String(text)) if text == "true" => Ok(Some(true)),
            Some(Value::String(text)) if text == "false" => Ok(Some(false)),
            Some(other) => Err(self.invalid(format!("`{key}` must be true or false, got {other}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(value: Value) -> ToolInput {
        ToolInput::from_value(value)
    }

    #[test]
    fn reads_typed_arguments() {
        let input =
            args(json!({"path": "a", "offset": 3, "limit": "7", "all": "true", "none": null}));
        let args = Args::new("read_file", &input);
        assert_eq!(args.string("path").unwrap(), "a");
        assert_eq!(args.optional_positive("offset").unwrap(), Some(3));
        assert_eq!(args.optional_positive("limit").unwrap(), Some(7));
        assert_eq!(args.optional_bool("all").unwrap(), Some(true));
        assert_eq!(args.optional_string("none").unwrap(), None);
    }

    #[test]
    fn explains_bad_arguments() {
        let input = args(json!({"path": 3, "offset": 0}));
        let args = Args::new("read_file", &input);
        assert_eq!(
            args.string("path").unwrap_err().to_string(),
            "invalid arguments for read_file: `path` must be a string, got 3"
        );
        assert_eq!(
            args.optional_positive("offset").unwrap_err().to_string(),
            "invalid arguments for read_file: `offset` must be a positive integer, got 0"
        );
        assert_eq!(
            args.string("other").unwrap_err().to_string(),
            "invalid arguments for read_file: `other` is required"
        );
    }
}
