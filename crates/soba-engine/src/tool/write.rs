//! `write_file`: creates or replaces a file inside the workspace, creating
//! missing parent directories (SPEC §11.1).

use std::fs;
use std::io;

use serde_json::{Value, json};
use soba_core::ToolInput;

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
    let resolved = match workspace.resolve_for_write(path) {
        Ok(resolved) => resolved,
        Err(error) => return error.into(),
    };
    let io_error = |source: io::Error| -> ToolOutcome {
        ToolError::Io {
            path: path.to_owned(),
            source,
        }
        .into()
    };
    let existed = resolved.exists();
    if let Some(parent) = resolved.parent() {
        // The missing directories lie under an ancestor that resolve() found
        // inside the root, and missing names cannot be symlinks.
        if let Err(source) = fs::create_dir_all(parent) {
            return io_error(source);
        }
    }
    if let Err(source) = fs::write(&resolved, content) {
        return io_error(source);
    }
    let shown = workspace.relative(&resolved);
    let verb = if existed { "overwrote" } else { "created" };
    let unit = if content.len() == 1 { "byte" } else { "bytes" };
    ToolOutcome::ok(format!("{verb} {shown} ({} {unit})", content.len()))
}
