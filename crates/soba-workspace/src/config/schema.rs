//! The JSON Schema of `config.json` (`soba config schema`), generated from
//! the key table so it cannot drift from the loader.

use serde_json::{Value, json};

use super::keys::{self, KEYS, KeySpec};

/// The schema's `$id`-less draft.
pub const DRAFT: &str = "https://json-schema.org/draft/2020-12/schema";

/// Returns the JSON Schema every SOBA config file validates against.
///
/// Objects have `additionalProperties: false`; user-chosen map keys
/// (`providers.*`, `models.*`) become `additionalProperties` schemas.
/// The `providers` default is the built-in provider map.
pub fn schema() -> Value {
    let mut root = json!({
        "$schema": DRAFT,
        "title": "SOBA configuration",
        "description": "config.json (user: $XDG_CONFIG_HOME/soba or $SOBA_HOME; project: <root>/.soba, which may set only model, compaction.* and models.*.{contextWindow,maxOutputTokens,tokenizer})",
        "type": "object",
        "properties": {},
        "additionalProperties": false,
    });
    for spec in KEYS {
        let segments: Vec<&str> = spec.path.split('.').collect();
        insert(&mut root, &segments, spec);
    }
    if let Some(providers) = root.pointer_mut("/properties/providers") {
        providers["default"] = keys::builtin_providers_json();
        providers["description"] =
            json!("Providers by name; the built-ins are anthropic, openai, openrouter and ollama.");
    }
    if let Some(models) = root.pointer_mut("/properties/models") {
        models["default"] = json!({});
        models["description"] = json!(
            "Model limits by id (provider/model), extending or overriding the registry; unknown and local models need contextWindow."
        );
    }
    root
}

fn object_schema() -> Value {
    json!({"type": "object", "properties": {}, "additionalProperties": false})
}

/// Places one key's schema at its path, creating the objects above it.
fn insert(node: &mut Value, segments: &[&str], spec: &KeySpec) {
    let Some((first, rest)) = segments.split_first() else {
        return;
    };
    if *first == "*" {
        if !node["additionalProperties"].is_object() {
            node["additionalProperties"] = object_schema();
        }
        insert(&mut node["additionalProperties"], rest, spec);
        return;
    }
    if rest.is_empty() {
        let mut leaf = spec.value_type.schema();
        leaf["description"] = json!(spec.description);
        if let Some(default) = spec.default_value() {
            leaf["default"] = default;
        }
        if let Some(alias) = spec.alias
            && alias.deprecated
        {
            leaf["deprecated"] = json!(true);
        }
        node["properties"][*first] = leaf;
        return;
    }
    let properties = &mut node["properties"];
    if properties.get(*first).is_none() {
        properties[*first] = object_schema();
    }
    insert(&mut properties[*first], rest, spec);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_in_the_schema() {
        let schema = schema();
        for spec in KEYS {
            let mut pointer = String::new();
            for segment in spec.path.split('.') {
                if segment == "*" {
                    pointer.push_str("/additionalProperties");
                } else {
                    pointer.push_str("/properties/");
                    pointer.push_str(segment);
                }
            }
            let node = schema
                .pointer(&pointer)
                .unwrap_or_else(|| panic!("{} missing at {pointer}", spec.path));
            assert_eq!(node["description"], json!(spec.description));
        }
        assert_eq!(schema["$schema"], json!(DRAFT));
        assert_eq!(
            schema.pointer("/properties/providers/default/anthropic/apiKeyEnv"),
            Some(&json!("ANTHROPIC_API_KEY"))
        );
        assert_eq!(
            schema.pointer("/properties/compaction/properties/backgroundTimeoutMs/deprecated"),
            Some(&json!(true))
        );
    }
}
