//! `read_file`: numbered lines of a text file in the workspace, 2,000 at a
//! time, refusing whole reads of files over 4 MiB (SPEC §11.1).

use std::io::{self, BufRead, BufReader};

use serde_json::{Value, json};
use soba_core::ToolInput;

use super::args::Args;
use super::{
    READ_DEFAULT_LINES, READ_MAX_BYTES, Tool, ToolContext, ToolError, ToolFuture, ToolOutcome,
    Workspace, run_blocking,
};

/// Bytes at the start of a file searched for a NUL to call it binary.
pub(crate) const BINARY_PROBE_BYTES: usize = 8 * 1024;

/// The `read_file` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadFile;

impl Tool for ReadFile {
    fn name(&self) -> &'static str {
        "read_file"
    }

    fn description(&self) -> &'static str {
        "Reads a text file in the workspace and returns its lines numbered like `cat -n` (number, tab, line). \
         Returns at most 2000 lines starting at `offset` (a 1-based line number, default 1); `limit` sets how many. \
         Files over 4 MiB can only be read with `offset`/`limit`. Paths are relative to the workspace root."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace root"},
                "offset": {"type": "integer", "minimum": 1, "description": "1-based line number to start at (default 1)"},
                "limit": {"type": "integer", "minimum": 1, "description": "Number of lines to return (default 2000)"}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    fn call<'a>(&'a self, input: &'a ToolInput, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let args = Args::new(self.name(), input);
            let request = match (
                args.string("path"),
                args.optional_positive("offset"),
                args.optional_positive("limit"),
            ) {
                (Ok(path), Ok(offset), Ok(limit)) => ReadRequest {
                    path: path.to_owned(),
                    offset,
                    limit,
                },
                (Err(error), _, _) | (_, Err(error), _) | (_, _, Err(error)) => {
                    return error.into();
                }
            };
            let workspace = ctx.workspace().clone();
            run_blocking(move || read_file(&workspace, &request)).await
        })
    }
}

struct ReadRequest {
    path: String,
    offset: Option<u64>,
    limit: Option<u64>,
}

fn read_file(workspace: &Workspace, request: &ReadRequest) -> ToolOutcome {
    let path = request.path.as_str();
    // Opened beneath the root and checked on the handle: a FIFO, socket,
    // device or directory is refused without blocking.
    let (file, meta, _) = match workspace.open_read(path) {
        Ok(opened) => opened,
        Err(error) => return error.into(),
    };
    let io_error = |source: io::Error| -> ToolOutcome {
        ToolError::Io {
            path: path.to_owned(),
            source,
        }
        .into()
    };
    let ranged = request.offset.is_some() || request.limit.is_some();
    if !ranged && meta.len() > READ_MAX_BYTES {
        return ToolOutcome::error(format!(
            "`{path}` is {} bytes, over the 4 MiB limit for reading a whole file; pass offset and limit to read a line range, or use search",
            meta.len()
        ));
    }
    let offset = request.offset.unwrap_or(1);
    let limit = request.limit.map_or(READ_DEFAULT_LINES, |limit| {
        usize::try_from(limit).unwrap_or(usize::MAX)
    });
    match numbered_lines(BufReader::new(file), offset, limit) {
        Ok(Lines::Binary) => ToolOutcome::error(format!(
            "`{path}` looks binary (it has a NUL byte in its first 8 KiB); use bash (e.g. `file` or `xxd | head`) to inspect it"
        )),
        Ok(Lines::PastEnd { total }) if total == 0 && request.offset.is_none() => {
            ToolOutcome::ok("(empty file)")
        }
        Ok(Lines::PastEnd { total }) => ToolOutcome::error(format!(
            "offset {offset} is past the end of `{path}` ({total} lines)"
        )),
        Ok(Lines::Text(text)) => ToolOutcome::ok(text),
        Err(source) => io_error(source),
    }
}

enum Lines {
    Text(String),
    Binary,
    PastEnd { total: u64 },
}

/// Formats lines `offset..offset + limit` like `cat -n`, stopping before the
/// text would pass [`READ_MAX_BYTES`], and says where to continue.
fn numbered_lines(mut reader: impl BufRead, offset: u64, limit: usize) -> io::Result<Lines> {
    let max_bytes = usize::try_from(READ_MAX_BYTES).unwrap_or(usize::MAX);
    let mut out = String::new();
    let mut line = Vec::new();
    let mut position = 0usize;
    let mut line_no = 0u64;
    let mut shown = 0usize;
    let mut footer = None;
    loop {
        line.clear();
        let n_read = reader.read_until(b'\n', &mut line)?;
        if n_read == 0 {
            break;
        }
        if position < BINARY_PROBE_BYTES {
            let probe = n_read.min(BINARY_PROBE_BYTES - position);
            if line[..probe].contains(&0) {
                return Ok(Lines::Binary);
            }
        }
        position = position.saturating_add(n_read);
        line_no += 1;
        if line_no < offset {
            continue;
        }
        if shown == limit {
            footer = Some(format!(
                "(more lines follow; pass offset={line_no} to continue)"
            ));
            break;
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        let text = String::from_utf8_lossy(&line);
        let numbered = format!("{line_no:>6}\t{text}\n");
        if out.len() + numbered.len() > max_bytes {
            if shown == 0 {
                // A single line over the cap: keep its head so the call
                // still makes progress.
                let mut cut = max_bytes.saturating_sub(8);
                while !numbered.is_char_boundary(cut) {
                    cut -= 1;
                }
                out.push_str(&numbered[..cut]);
                out.push('\n');
                footer = Some(format!(
                    "(line {line_no} was cut at 4 MiB; pass offset={} to continue)",
                    line_no + 1
                ));
            } else {
                footer = Some(format!(
                    "(output reached 4 MiB; pass offset={line_no} to continue)"
                ));
            }
            break;
        }
        out.push_str(&numbered);
        shown += 1;
    }
    if shown == 0 && footer.is_none() {
        return Ok(Lines::PastEnd { total: line_no });
    }
    if out.ends_with('\n') {
        out.pop();
    }
    if let Some(footer) = footer {
        out.push('\n');
        out.push_str(&footer);
    }
    Ok(Lines::Text(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &[u8], offset: u64, limit: usize, expected: &str) {
        match numbered_lines(text, offset, limit).unwrap() {
            Lines::Text(out) => assert_eq!(out, expected),
            Lines::Binary => panic!("unexpected binary"),
            Lines::PastEnd { total } => panic!("unexpected past end ({total})"),
        }
    }

    #[test]
    fn numbers_lines_like_cat_n() {
        check(b"a\nb\n", 1, 10, "     1\ta\n     2\tb");
        check(b"a\nb", 1, 10, "     1\ta\n     2\tb");
        check(b"a\r\n", 1, 10, "     1\ta\r");
        check(
            b"a\nb\nc\n",
            2,
            1,
            "     2\tb\n(more lines follow; pass offset=3 to continue)",
        );
    }

    #[test]
    fn binary_is_detected_in_the_first_8_kib_only() {
        assert!(matches!(
            numbered_lines(&b"ab\0c"[..], 1, 10).unwrap(),
            Lines::Binary
        ));
        let mut late = vec![b'a'; BINARY_PROBE_BYTES];
        late.push(0);
        assert!(matches!(
            numbered_lines(&late[..], 1, 10).unwrap(),
            Lines::Text(_)
        ));
    }

    #[test]
    fn past_the_end_reports_the_line_count() {
        assert!(matches!(
            numbered_lines(&b"a\nb\n"[..], 3, 10).unwrap(),
            Lines::PastEnd { total: 2 }
        ));
    }

    #[test]
    fn a_line_over_the_cap_is_cut() {
        let long = vec![b'x'; READ_MAX_BYTES as usize + 10];
        let Lines::Text(out) = numbered_lines(&long[..], 1, 10).unwrap() else {
            panic!("expected text")
        };
        assert!(out.len() <= READ_MAX_BYTES as usize + 100);
        assert!(out.ends_with("(line 1 was cut at 4 MiB; pass offset=2 to continue)"));
    }
}
