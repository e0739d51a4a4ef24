//! `checkpoint`: the model marks a milestone or a plan pivot. The tool only
//! validates; the engine appends the `checkpoint` entry from the returned
//! [`ToolEffect`] (SPEC §11.1).

use serde_json::{Value, json};
use soba_core::{CheckpointKind, ToolInput};

use super::args::Args;
use super::{Tool, ToolContext, ToolEffect, ToolError, ToolFuture, ToolOutcome};

/// The `checkpoint` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct Checkpoint;

impl Tool for Checkpoint {
    fn name(&self) -> &'static str {
        "checkpoint"
    }

    fn description(&self) -> &'static str {
        "Records a checkpoint in the session: `milestone` when a piece of work is done and verified, `plan_pivot` \
         when the approach changes. The note says what was achieved or what changed and why; it helps the context \
         be compacted at a good boundary."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "kind": {"type": "string", "enum": ["milestone", "plan_pivot"], "description": "What kind of checkpoint"},
                "note": {"type": "string", "description": "One or two sentences: what was achieved, or what changed and why"}
            },
            "required": ["kind", "note"],
            "additionalProperties": false
        })
    }

    fn call<'a>(&'a self, input: &'a ToolInput, _ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move { checkpoint(input) })
    }
}

fn checkpoint(input: &ToolInput) -> ToolOutcome {
    let args = Args::new("checkpoint", input);
    let (kind, note) = match (args.string("kind"), args.string("note")) {
        (Ok(kind), Ok(note)) => (kind, note.trim()),
        (Err(error), _) | (_, Err(error)) => return error.into(),
    };
    let Some(kind) = CheckpointKind::parse(kind) else {
        return ToolError::InvalidArguments {
            tool: "checkpoint",
            message: format!("`kind` must be milestone or plan_pivot, got `{kind}`"),
        }
        .into();
    };
    if note.is_empty() {
        return ToolError::InvalidArguments {
            tool: "checkpoint",
            message: "`note` is empty; say what the checkpoint marks".to_owned(),
        }
        .into();
    }
    ToolOutcome {
        content: format!("checkpoint recorded ({}): {note}", kind.as_str()),
        is_error: false,
        effect: Some(ToolEffect::Checkpoint {
            kind,
            note: note.to_owned(),
        }),
    }
}
