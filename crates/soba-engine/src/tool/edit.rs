//! `edit_file`: exact string replacement in a workspace file, failing on no
//! match or on several unless `replaceAll` (SPEC §11.1).

use std::io::Read;

use serde_json::{Value, json};
use soba_core::ToolInput;

use super::args::Args;
use super::{
    READ_MAX_BYTES, Tool, ToolContext, ToolError, ToolFuture, ToolOutcome, Workspace, run_blocking,
};

/// The `edit_file` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct EditFile;

impl Tool for EditFile {
    fn name(&self) -> &'static str {
        "edit_file"
    }

    fn description(&self) -> &'static str {
        "Replaces the exact text `oldString` with `newString` in a file in the workspace. `oldString` must match \
         exactly once (whitespace included) unless `replaceAll` is true; include surrounding lines to make it unique. \
         Read the file first. Paths are relative to the workspace root."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace root"},
                "oldString": {"type": "string", "description": "The exact text to replace"},
                "newString": {"type": "string", "description": "The text to put in its place"},
                "replaceAll": {"type": "boolean", "description": "Replace every occurrence (default false)"}
            },
            "required": ["path", "oldString", "newString"],
            "additionalProperties": false
        })
    }

    fn needs_approval(&self) -> bool {
        true
    }

    fn call<'a>(&'a self, input: &'a ToolInput, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let args = Args::new(self.name(), input);
            let edit = match (
                args.string("path"),
                args.string("oldString"),
                args.string("newString"),
                args.optional_bool("replaceAll"),
            ) {
                (Ok(path), Ok(old), Ok(new), Ok(replace_all)) => Edit {
                    path: path.to_owned(),
                    old: old.to_owned(),
                    new: new.to_owned(),
                    replace_all: replace_all.unwrap_or(false),
                },
                (Err(error), ..)
                | (_, Err(error), ..)
                | (_, _, Err(error), _)
                | (.., Err(error)) => return error.into(),
            };
            let workspace = ctx.workspace().clone();
            run_blocking(move || edit_file(&workspace, &edit)).await
        })
    }
}

struct Edit {
    path: String,
    old: String,
    new: String,
    replace_all: bool,
}

fn edit_file(workspace: &Workspace, edit: &Edit) -> ToolOutcome {
    let path = edit.path.as_str();
    if edit.old.is_empty() {
        return ToolOutcome::error(
            "oldString is empty; use write_file to create or replace a whole file",
        );
    }
    if edit.old == edit.new {
        return ToolOutcome::error(
            "oldString and newString are identical; there is nothing to change",
        );
    }
    // Opened beneath the root and checked on the handle; the size is
    // checked before reading, so a huge (or sparse) file is neither read
    // into memory nor written back as real disk.
    let (file, meta, resolved) = match workspace.open_read(path) {
        Ok(opened) => opened,
        Err(error) => return error.into(),
    };
    let too_large = |size: u64| -> ToolOutcome {
        ToolOutcome::error(format!(
            "`{path}` is {size} bytes; edit_file edits files of at most 4 MiB ({READ_MAX_BYTES} bytes): use bash tools (such as `sed -i`) for huge files"
        ))
    };
    if meta.len() > READ_MAX_BYTES {
        return too_large(meta.len());
    }
    let mut bytes = Vec::new();
    // The cap holds while reading too: the file may grow after the fstat.
    if let Err(source) = file.take(READ_MAX_BYTES + 1).read_to_end(&mut bytes) {
        return ToolError::Io {
            path: path.to_owned(),
            source,
        }
        .into();
    }
    if bytes.len() as u64 > READ_MAX_BYTES {
        return too_large(bytes.len() as u64);
    }
    let Ok(text) = String::from_utf8(bytes) else {
        return ToolOutcome::error(format!(
            "`{path}` is not valid UTF-8; edit_file only edits text files"
        ));
    };
    let n_matches = text.matches(edit.old.as_str()).count();
    let shown = workspace.relative(&resolved);
    match n_matches {
        0 => {
            return ToolOutcome::error(format!(
                "oldString not found in {shown}; read the file again and copy the text exactly, whitespace included"
            ));
        }
        1 => {}
        n if !edit.replace_all => {
            return ToolOutcome::error(format!(
                "oldString matches {n} times in {shown}; include more surrounding text to make it unique, or pass replaceAll: true"
            ));
        }
        _ => {}
    }
    let updated = text.replace(edit.old.as_str(), &edit.new);
    if let Err(error) = workspace.create_or_replace(path, updated.as_bytes()) {
        return error.into();
    }
    let noun = if n_matches == 1 {
        "occurrence"
    } else {
        "occurrences"
    };
    ToolOutcome::ok(format!("replaced {n_matches} {noun} in {shown}"))
}
