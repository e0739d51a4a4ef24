//! `search`: a regex over the files of the workspace, honouring
//! `.gitignore` and skipping `.git/` and binaries, at most 1,000 matching
//! lines (SPEC §11.1).

use std::fs::File;
use std::io::{BufRead, BufReader, Read};

use regex::Regex;
use serde_json::{Value, json};
use soba_core::ToolInput;
use tokio_util::sync::CancellationToken;

use super::args::Args;
use super::read::BINARY_PROBE_BYTES;
use super::{
    MAX_LISTED, Tool, ToolContext, ToolFuture, ToolOutcome, Workspace, run_blocking, walk,
};

/// Characters of a matching line shown before it is cut with `…`, so one
/// minified file cannot flood the result.
pub const MAX_MATCH_LINE_CHARS: usize = 500;

/// The `search` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct Search;

impl Tool for Search {
    fn name(&self) -> &'static str {
        "search"
    }

    fn description(&self) -> &'static str {
        "Searches the workspace's text files for lines matching a regular expression (Rust regex syntax) and \
         returns them as `path:line:text`, sorted by path. Honours .gitignore and skips .git/ and binary files. \
         `path` limits the search to a directory or file; `glob` to files matching a pattern such as `*.rs`. \
         At most 1000 matches are shown."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Regular expression to look for"},
                "path": {"type": "string", "description": "Directory or file to search, relative to the workspace root (default: the root)"},
                "glob": {"type": "string", "description": "Glob the files must match, e.g. `*.rs`"}
            },
            "required": ["pattern"],
            "additionalProperties": false
        })
    }

    fn call<'a>(&'a self, input: &'a ToolInput, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let args = Args::new(self.name(), input);
            let request = match (
                args.string("pattern"),
                args.optional_string("path"),
                args.optional_string("glob"),
            ) {
                (Ok(pattern), Ok(path), Ok(glob)) => SearchRequest {
                    pattern: pattern.to_owned(),
                    path: path.map(str::to_owned),
                    glob: glob.map(str::to_owned),
                },
                (Err(error), _, _) | (_, Err(error), _) | (_, _, Err(error)) => {
                    return error.into();
                }
            };
            let workspace = ctx.workspace().clone();
            let cancel = ctx.cancel().clone();
            run_blocking(move || search(&workspace, &request, &cancel)).await
        })
    }
}

struct SearchRequest {
    pattern: String,
    path: Option<String>,
    glob: Option<String>,
}

fn search(
    workspace: &Workspace,
    request: &SearchRequest,
    cancel: &CancellationToken,
) -> ToolOutcome {
    let run = || -> Result<ToolOutcome, ToolOutcome> {
        if request.pattern.is_empty() {
            return Err(ToolOutcome::error(
                "pattern is empty; pass a regular expression",
            ));
        }
        let regex = Regex::new(&request.pattern).map_err(|error| {
            ToolOutcome::error(format!("invalid regex `{}`: {error}", request.pattern))
        })?;
        let base = walk::base(workspace, request.path.as_deref())?;
        let filter = walk::glob(&base, request.glob.as_deref())?;
        let files = walk::files(workspace, &base, filter.as_ref(), cancel)?;
        let mut shown: Vec<String> = Vec::new();
        let mut n_matches = 0usize;
        let mut cut_files: Vec<String> = Vec::new();
        let mut notes: Vec<String> = Vec::new();
        for file in &files {
            if cancel.is_cancelled() {
                return Err(ToolOutcome::error("cancelled"));
            }
            let relative = workspace.relative(file);
            // Opened beneath the root following no symlink: a folder swapped
            // for a link since the walk cannot make it read outside.
            let Some(opened) = workspace.open_entry(file) else {
                continue;
            };
            let whole = scan(opened, &regex, cancel, |line_no, text| {
                n_matches += 1;
                if shown.len() < MAX_LISTED {
                    shown.push(format!("{relative}:{line_no}:{}", clip(text)));
                }
            });
            if !whole {
                cut_files.push(relative);
            }
        }
        if !cut_files.is_empty() {
            // Said even with no match: "no matches" would claim too much.
            notes.push(format!(
                "(searched only the first {} MiB of {})",
                MAX_SCANNED_FILE_BYTES >> 20,
                cut_files.join(", ")
            ));
        }
        if n_matches == 0 {
            shown.push(format!("no matches for `{}`", request.pattern));
        }
        if n_matches > MAX_LISTED {
            shown.push(format!("… {} more matches", n_matches - MAX_LISTED));
        }
        shown.extend(notes);
        Ok(ToolOutcome::ok(shown.join("\n")))
    };
    run().unwrap_or_else(|error| error)
}

/// The most of one line that is searched: the rest of a longer line (a
/// minified bundle, a huge file with no newline) is skipped unread into
/// memory, so no file can make a search hold more than this.
pub const MAX_SCANNED_LINE_BYTES: u64 = 1 << 20;

/// The most of one file a search reads: a huge or sparse file (a
/// many-terabyte hole reads as zeros) cannot hold a search for hours.
pub const MAX_SCANNED_FILE_BYTES: usize = 256 << 20;

/// Calls `on_match` for each matching line of a text file. Unreadable
/// files and binaries (a NUL in the first 8 KiB) are skipped; a line is
/// searched in its first [`MAX_SCANNED_LINE_BYTES`]; a cancelled call stops
/// between lines. Returns `false` when it stopped at
/// [`MAX_SCANNED_FILE_BYTES`] with more of the file unread.
fn scan(
    file: File,
    regex: &Regex,
    cancel: &CancellationToken,
    mut on_match: impl FnMut(u64, &str),
) -> bool {
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    let mut position = 0usize;
    let mut line_no = 0u64;
    let mut pending: Vec<(u64, String)> = Vec::new();
    let mut whole = true;
    loop {
        if cancel.is_cancelled() {
            return true;
        }
        if position >= MAX_SCANNED_FILE_BYTES {
            whole = reader.fill_buf().map_or(true, <[u8]>::is_empty);
            break;
        }
        line.clear();
        let Ok(n_read) = (&mut reader)
            .take(MAX_SCANNED_LINE_BYTES)
            .read_until(b'\n', &mut line)
        else {
            return true;
        };
        if n_read == 0 {
            break;
        }
        if position < BINARY_PROBE_BYTES {
            let probe = n_read.min(BINARY_PROBE_BYTES - position);
            if line[..probe].contains(&0) {
                return true;
            }
            // Matches are held back until the probe window has passed, so a
            // binary file reports none.
        }
        position = position.saturating_add(n_read);
        if line.last() != Some(&b'\n') {
            let budget = MAX_SCANNED_FILE_BYTES.saturating_sub(position);
            let Some(skipped) = skip_line(&mut reader, cancel, budget) else {
                return true;
            };
            position = position.saturating_add(skipped);
        }
        line_no += 1;
        while matches!(line.last(), Some(b'\n' | b'\r')) {
            line.pop();
        }
        let text = String::from_utf8_lossy(&line);
        if regex.is_match(&text) {
            if position <= BINARY_PROBE_BYTES {
                pending.push((line_no, text.into_owned()));
            } else {
                for (pending_no, pending_text) in pending.drain(..) {
                    on_match(pending_no, &pending_text);
                }
                on_match(line_no, &text);
            }
        }
    }
    for (pending_no, pending_text) in pending {
        on_match(pending_no, &pending_text);
    }
    whole
}

/// Skips the rest of a line, newline included, a buffer at a time;
/// returns the bytes skipped (stopping once they reach `budget`), or
/// `None` when the read fails or the call is cancelled.
fn skip_line(
    reader: &mut BufReader<File>,
    cancel: &CancellationToken,
    budget: usize,
) -> Option<usize> {
    let mut skipped = 0usize;
    loop {
        if cancel.is_cancelled() || skipped >= budget {
            return (skipped >= budget).then_some(skipped);
        }
        let buffer = reader.fill_buf().ok()?;
        if buffer.is_empty() {
            return Some(skipped);
        }
        let (used, done) = match buffer.iter().position(|&byte| byte == b'\n') {
            Some(at) => (at + 1, true),
            None => (buffer.len(), false),
        };
        reader.consume(used);
        skipped = skipped.saturating_add(used);
        if done {
            return Some(skipped);
        }
    }
}

/// Cuts a line to [`MAX_MATCH_LINE_CHARS`] characters.
fn clip(text: &str) -> String {
    match text.char_indices().nth(MAX_MATCH_LINE_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_cuts_long_lines() {
        assert_eq!(clip("short"), "short");
        let long = "é".repeat(MAX_MATCH_LINE_CHARS + 3);
        let clipped = clip(&long);
        assert_eq!(clipped.chars().count(), MAX_MATCH_LINE_CHARS + 1);
        assert!(clipped.ends_with('…'));
    }

    #[test]
    fn binaries_report_no_matches() {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("b.bin");
        std::fs::write(&binary, b"needle\nmore\0bytes\n").unwrap();
        let text = dir.path().join("t.txt");
        std::fs::write(&text, b"needle\nhay\nneedle again\n").unwrap();
        let regex = Regex::new("needle").unwrap();
        let mut found = Vec::new();
        let open = |path| File::open(path).unwrap();
        let cancel = CancellationToken::new();
        scan(open(&binary), &regex, &cancel, |n, t| {
            found.push((n, t.to_owned()))
        });
        assert!(found.is_empty());
        scan(open(&text), &regex, &cancel, |n, t| {
            found.push((n, t.to_owned()))
        });
        assert_eq!(
            found,
            [(1, "needle".to_owned()), (3, "needle again".to_owned())]
        );
    }

    #[test]
    fn a_line_longer_than_the_cap_is_searched_in_its_head_and_skipped() {
        // The attack of session 22: a 20 GB file with no newline was read
        // whole into memory. Here: a 3 MiB line, then two short ones.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("long.txt");
        let mut bytes = b"needle at the start ".to_vec();
        bytes.resize(3 << 20, b'x');
        bytes.extend_from_slice(b" needle past the cap\nshort needle\nhay\n");
        std::fs::write(&path, &bytes).unwrap();
        let regex = Regex::new("needle").unwrap();
        let mut found = Vec::new();
        scan(
            File::open(&path).unwrap(),
            &regex,
            &CancellationToken::new(),
            |n, t| found.push((n, t.len())),
        );
        assert_eq!(found, [(1, MAX_SCANNED_LINE_BYTES as usize), (2, 12)]);
        // A cancelled call reads nothing.
        let cancel = CancellationToken::new();
        cancel.cancel();
        let mut none = 0;
        scan(File::open(&path).unwrap(), &regex, &cancel, |_, _| {
            none += 1
        });
        assert_eq!(none, 0);
    }

    #[test]
    fn a_file_is_read_up_to_its_cap_and_says_so() {
        // The attack of session 23: a sparse file of 20 GiB (or 15 TiB)
        // with text at its start held a search for a minute (or hours).
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sparse.txt");
        // Text through the binary probe's 8 KiB, then the hole.
        let mut text = b"needle\n".to_vec();
        text.extend(b"hay\n".repeat(2_500));
        std::fs::write(&path, &text).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(MAX_SCANNED_FILE_BYTES as u64 + (64 << 20))
            .unwrap();
        let regex = Regex::new("needle").unwrap();
        let mut found = Vec::new();
        let whole = scan(
            File::open(&path).unwrap(),
            &regex,
            &CancellationToken::new(),
            |n, t| found.push((n, t.to_owned())),
        );
        assert!(!whole);
        assert_eq!(found, [(1, "needle".to_owned())]);
        // A file that ends within the cap is read whole.
        file.set_len(text.len() as u64).unwrap();
        assert!(scan(
            File::open(&path).unwrap(),
            &regex,
            &CancellationToken::new(),
            |_, _| {}
        ));
    }
}
