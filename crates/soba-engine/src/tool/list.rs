//! `list_files`: the files under a workspace directory, honouring
//! `.gitignore` and skipping `.git/`, at most 1,000 entries (SPEC §11.1).

use serde_json::{Value, json};
use soba_core::ToolInput;
use tokio_util::sync::CancellationToken;

use super::args::Args;
use super::{
    MAX_LISTED, Tool, ToolContext, ToolFuture, ToolOutcome, Workspace, run_blocking, walk,
};

/// The `list_files` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListFiles;

impl Tool for ListFiles {
    fn name(&self) -> &'static str {
        "list_files"
    }

    fn description(&self) -> &'static str {
        "Lists the files under a directory of the workspace (default: the root), recursively and sorted, one path \
         per line relative to the workspace root. Honours .gitignore and skips .git/. `pattern` is a glob such as \
         `*.rs` or `src/**/*.md`. At most 1000 entries are shown."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Directory to list, relative to the workspace root (default: the root)"},
                "pattern": {"type": "string", "description": "Glob the files must match, e.g. `*.rs`"}
            },
            "additionalProperties": false
        })
    }

    fn call<'a>(&'a self, input: &'a ToolInput, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let args = Args::new(self.name(), input);
            let (path, pattern) = match (
                args.optional_string("path"),
                args.optional_string("pattern"),
            ) {
                (Ok(path), Ok(pattern)) => (path.map(str::to_owned), pattern.map(str::to_owned)),
                (Err(error), _) | (_, Err(error)) => return error.into(),
            };
            let workspace = ctx.workspace().clone();
            let cancel = ctx.cancel().clone();
            run_blocking(move || {
                list_files(&workspace, path.as_deref(), pattern.as_deref(), &cancel)
            })
            .await
        })
    }
}

fn list_files(
    workspace: &Workspace,
    path: Option<&str>,
    pattern: Option<&str>,
    cancel: &CancellationToken,
) -> ToolOutcome {
    let run = || -> Result<ToolOutcome, ToolOutcome> {
        let base = walk::base(workspace, path)?;
        let filter = walk::glob(&base, pattern)?;
        let files = walk::files(workspace, &base, filter.as_ref(), cancel)?;
        if files.is_empty() {
            return Ok(ToolOutcome::ok(match pattern {
                Some(pattern) if !pattern.is_empty() => format!("(no files match `{pattern}`)"),
                _ => "(no files)".to_owned(),
            }));
        }
        let mut out: Vec<String> = files
            .iter()
            .take(MAX_LISTED)
            .map(|file| workspace.relative(file))
            .collect();
        if files.len() > MAX_LISTED {
            out.push(format!("… {} more entries", files.len() - MAX_LISTED));
        }
        Ok(ToolOutcome::ok(out.join("\n")))
    };
    run().unwrap_or_else(|error| error)
}
