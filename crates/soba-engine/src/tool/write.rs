//! `write_file`: creates or replaces a file inside the workspace, creating
//! missing parent directories (SPEC §11.1).

use serde_json::{Value, json};
use soba_core::ToolInput;
use soba_store::beneath::Replaced;

use super::args::Args;

use super::{Tool, ToolContext, ToolError, ToolFuture, ToolOutcome, Workspace, run_blocking};

/// The `write_file` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteFile;

impl Tool for WriteFile {
    fn name(&self) -> &'static str {
        "write_file"
    }

    fn description(&self) -> &'static str {
        "Writes `content` to a file in the workspace, replacing it if it exists and creating missing parent \
         directories. Prefer edit_file for changing part of an existing file. Paths are relative to the workspace root."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace root"},
                "content": {"type": "string", "description": "The complete new content of the file"}
            },
            "required": ["path", "content"],
            "additionalProperties": false
        })
    }

    fn needs_approval(&self) -> bool {
        true
    }

    fn call<'a>(&'a self, input: &'a ToolInput, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let args = Args::new(self.name(), input);
            let (path, content) = match (args.string("path"), args.string("content")) {
                (Ok(path), Ok(content)) => (path.to_owned(), content.to_owned()),
                (Err(error), _) | (_, Err(error)) => return error.into(),
            };
            let workspace = ctx.workspace().clone();
            run_blocking(move || write_file(&workspace, &path, &content)).await
        })
    }
}

fn write_file(workspace: &Workspace, path: &str, content: &str) -> ToolOutcome {
    if path.ends_with('/') {
        return ToolError::NamesFolder {
            path: path.to_owned(),
        }
        .into();
    }
    // A temporary file in the parent folder's handle, renamed over the name:
    // a folder swapped for a link, or a link planted on the name, cannot
    // send the bytes outside the workspace.
    let (replaced, resolved) = match workspace.create_or_replace(path, content.as_bytes()) {
        Ok(done) => done,
        Err(error) => return error.into(),
    };
    let shown = workspace.relative(&resolved);
    let verb = match replaced {
        Replaced::Overwrote => "overwrote",
        Replaced::Created => "created",
    };
    let unit = if content.len() == 1 { "byte" } else { "bytes" };
    ToolOutcome::ok(format!("{verb} {shown} ({} {unit})", content.len()))
}
