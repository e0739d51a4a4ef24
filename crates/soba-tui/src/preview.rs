//! What an approval prompt shows of a file change before it happens: a
//! unified-style diff of an `edit_file` or `write_file` call against the
//! file on disk (removed lines, added lines, a few lines of context), or
//! the first lines of a new file. Reading goes through the tools'
//! [`Workspace`] confinement and `soba_store::untrusted`; the diff itself
//! ([`diff`]) is pure. The lines are raw file text: the renderer escapes
//! them.

use soba_core::ToolInput;
use soba_engine::tool::Workspace;

/// The largest file read for a preview.
const MAX_PREVIEW_FILE: u64 = 4 * 1024 * 1024;
/// The most lines a preview holds (the box shows what fits).
pub const MAX_PREVIEW_LINES: usize = 200;
/// Lines of context around a change.
const CONTEXT: usize = 3;
/// The largest middle part (old × new lines) diffed line by line; bigger
/// changes are shown as all removed, then all added.
const MAX_LCS_CELLS: usize = 250_000;

/// What a preview line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiffKind {
    /// An unchanged line around a change.
    Context,
    /// A line the change removes.
    Removed,
    /// A line the change adds.
    Added,
    /// A remark: a skipped stretch, a count, why there is no diff.
    Note,
}

/// One line of a preview.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffLine {
    /// What it is.
    pub kind: DiffKind,
    /// Its text, raw.
    pub text: String,
}

impl DiffLine {
    fn new(kind: DiffKind, text: impl Into<String>) -> Self {
        DiffLine {
            kind,
            text: text.into(),
        }
    }
}

/// Line operations of the middle part, by LCS.
fn lcs_ops<'a>(old: &[&'a str], new: &[&'a str]) -> Vec<(DiffKind, &'a str)> {
    let (n, m) = (old.len(), new.len());
    // lengths[i][j]: LCS of old[i..] and new[j..].
    let mut lengths = vec![0u32; (n + 1) * (m + 1)];
    let at = |i: usize, j: usize| i * (m + 1) + j;
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lengths[at(i, j)] = if old[i] == new[j] {
                lengths[at(i + 1, j + 1)] + 1
            } else {
                lengths[at(i + 1, j)].max(lengths[at(i, j + 1)])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut ops = Vec::new();
    while i < n || j < m {
        if i < n && j < m && old[i] == new[j] {
            ops.push((DiffKind::Context, old[i]));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lengths[at(i + 1, j)] >= lengths[at(i, j + 1)]) {
            // Removed lines come before the added ones, as in `diff -u`.
            ops.push((DiffKind::Removed, old[i]));
            i += 1;
        } else {
            ops.push((DiffKind::Added, new[j]));
            j += 1;
        }
    }
    ops
}

/// Returns a unified-style diff of `old` → `new`: `CONTEXT` lines
/// around each change, a long unchanged stretch between changes folded
/// into one note, at most `limit` lines and then "… N more lines".
pub fn diff(old: &str, new: &str, limit: usize) -> Vec<DiffLine> {
    let old_lines: Vec<&str> = old.lines().collect();
    let new_lines: Vec<&str> = new.lines().collect();
    let prefix = old_lines
        .iter()
        .zip(&new_lines)
        .take_while(|(a, b)| a == b)
        .count();
    let suffix = old_lines[prefix..]
        .iter()
        .rev()
        .zip(new_lines[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let old_mid = &old_lines[prefix..old_lines.len() - suffix];
    let new_mid = &new_lines[prefix..new_lines.len() - suffix];
    let mut ops: Vec<(DiffKind, &str)> = old_lines[prefix.saturating_sub(CONTEXT)..prefix]
        .iter()
        .map(|line| (DiffKind::Context, *line))
        .collect();
    if old_mid.len().saturating_mul(new_mid.len()) <= MAX_LCS_CELLS {
        ops.extend(lcs_ops(old_mid, new_mid));
    } else {
        ops.extend(old_mid.iter().map(|line| (DiffKind::Removed, *line)));
        ops.extend(new_mid.iter().map(|line| (DiffKind::Added, *line)));
    }
    let after = old_lines.len() - suffix;
    ops.extend(
        old_lines[after..(after + CONTEXT).min(old_lines.len())]
            .iter()
            .map(|line| (DiffKind::Context, *line)),
    );
    let mut lines = Vec::new();
    let mut idx = 0;
    while idx < ops.len() {
        let run = ops[idx..]
            .iter()
            .take_while(|(kind, _)| *kind == DiffKind::Context)
            .count();
        if run > 2 * CONTEXT + 1 && idx > 0 && idx + run < ops.len() {
            lines.extend(
                ops[idx..idx + CONTEXT]
                    .iter()
                    .map(|(k, t)| DiffLine::new(*k, *t)),
            );
            lines.push(DiffLine::new(
                DiffKind::Note,
                format!("⋯ {} unchanged lines", run - 2 * CONTEXT),
            ));
            lines.extend(
                ops[idx + run - CONTEXT..idx + run]
                    .iter()
                    .map(|(k, t)| DiffLine::new(*k, *t)),
            );
            idx += run;
        } else {
            let (kind, text) = ops[idx];
            lines.push(DiffLine::new(kind, text));
            idx += 1;
        }
    }
    bound(lines, limit)
}

/// Cuts `lines` to `limit`, the last one saying how many were left out.
pub fn bound(mut lines: Vec<DiffLine>, limit: usize) -> Vec<DiffLine> {
    if lines.len() > limit {
        let limit = limit.max(1);
        let more = lines.len() - (limit - 1);
        lines.truncate(limit - 1);
        lines.push(DiffLine::new(
            DiffKind::Note,
            format!("… {more} more lines"),
        ));
    }
    lines
}

/// Reads a workspace file as text, or says why not.
fn read_text(workspace: &Workspace, path: &str) -> Result<Option<String>, String> {
    let resolved = workspace.resolve(path).map_err(|err| err.to_string())?;
    if !resolved.exists() {
        return Ok(None);
    }
    // Read beneath the workspace root, as the edit itself will be.
    let bytes = soba_workspace::setup::read_workspace_file(
        workspace.root(),
        resolved.strip_prefix(workspace.root()).unwrap_or(&resolved),
        MAX_PREVIEW_FILE,
    )
    .map_err(|err| err.to_string())?;
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| "it is not UTF-8 text".to_owned())
}

/// Returns an `edit_file` call as its file shows it now, in whole lines
/// with their indentation and the context around them (a call's
/// `oldString` often starts after a line's indentation, and a diff of the
/// arguments alone showed that line without it): for an edit that `ran`,
/// the file with the new text put back to the old → the file; for one
/// that did not (denied), the file → the file with the edit made, as the
/// approval prompt showed it. `None` when the file no longer tells: it
/// cannot be read, or the text looked for is not in it exactly once
/// (every occurrence with `replaceAll`).
pub fn edit_in_file(workspace: &Workspace, input: &ToolInput, ran: bool) -> Option<Vec<DiffLine>> {
    let (path, old, new) = (
        input.str_arg("path")?,
        input.str_arg("oldString")?,
        input.str_arg("newString")?,
    );
    let replace_all = input
        .object()
        .get("replaceAll")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    let text = read_text(workspace, path).ok()??;
    let (from, to) = if ran { (new, old) } else { (old, new) };
    let n_found = if from.is_empty() {
        0
    } else {
        text.matches(from).count()
    };
    if n_found == 0 || (n_found > 1 && !replace_all) {
        return None;
    }
    let other = if replace_all {
        text.replace(from, to)
    } else {
        text.replacen(from, to, 1)
    };
    let (before, after) = if ran { (other, text) } else { (text, other) };
    Some(diff(&before, &after, MAX_PREVIEW_LINES))
}

/// Shows `old` → `new` as removed and added lines, without the file.
fn replacement_only(old: &str, new: &str) -> Vec<DiffLine> {
    old.lines()
        .map(|line| DiffLine::new(DiffKind::Removed, line))
        .chain(new.lines().map(|line| DiffLine::new(DiffKind::Added, line)))
        .collect()
}

/// Returns the preview of a call of `tool` with `input`: a diff for
/// `edit_file` and `write_file`, nothing for other tools.
pub fn approval_preview(workspace: &Workspace, tool: &str, input: &ToolInput) -> Vec<DiffLine> {
    let limit = MAX_PREVIEW_LINES;
    match tool {
        "edit_file" => {
            let (Some(path), Some(old), Some(new)) = (
                input.str_arg("path"),
                input.str_arg("oldString"),
                input.str_arg("newString"),
            ) else {
                return Vec::new();
            };
            let replace_all = input
                .object()
                .get("replaceAll")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false);
            let mut lines = Vec::new();
            match read_text(workspace, path) {
                Ok(Some(text)) if !old.is_empty() && text.contains(old) => {
                    let n_matches = text.matches(old).count();
                    if n_matches > 1 && !replace_all {
                        lines.push(DiffLine::new(
                            DiffKind::Note,
                            format!("oldString matches {n_matches} times: the edit will fail; the first is shown"),
                        ));
                    }
                    let updated = if replace_all {
                        text.replace(old, new)
                    } else {
                        text.replacen(old, new, 1)
                    };
                    lines.extend(diff(&text, &updated, limit));
                }
                Ok(Some(_)) => {
                    lines.push(DiffLine::new(
                        DiffKind::Note,
                        "oldString is not in the file: the edit will fail",
                    ));
                    lines.extend(replacement_only(old, new));
                }
                Ok(None) => {
                    lines.push(DiffLine::new(
                        DiffKind::Note,
                        "the file does not exist: the edit will fail",
                    ));
                    lines.extend(replacement_only(old, new));
                }
                Err(why) => {
                    lines.push(DiffLine::new(
                        DiffKind::Note,
                        format!("cannot read the file ({why}); the replacement:"),
                    ));
                    lines.extend(replacement_only(old, new));
                }
            }
            bound(lines, limit)
        }
        "write_file" => {
            let (Some(path), Some(content)) = (input.str_arg("path"), input.str_arg("content"))
            else {
                return Vec::new();
            };
            let n_lines = content.lines().count();
            let mut lines = Vec::new();
            match read_text(workspace, path) {
                Ok(Some(old)) if old == content => {
                    lines.push(DiffLine::new(
                        DiffKind::Note,
                        "the file already has this content",
                    ));
                }
                Ok(Some(old)) => {
                    lines.push(DiffLine::new(
                        DiffKind::Note,
                        format!(
                            "replaces the file: {} → {n_lines} lines",
                            old.lines().count()
                        ),
                    ));
                    lines.extend(diff(&old, content, limit));
                }
                Ok(None) => {
                    lines.push(DiffLine::new(
                        DiffKind::Note,
                        format!("new file, {n_lines} lines"),
                    ));
                    lines.extend(
                        content
                            .lines()
                            .map(|line| DiffLine::new(DiffKind::Added, line)),
                    );
                }
                Err(why) => {
                    lines.push(DiffLine::new(
                        DiffKind::Note,
                        format!("cannot read the current file ({why}); the new content:"),
                    ));
                    lines.extend(
                        content
                            .lines()
                            .map(|line| DiffLine::new(DiffKind::Added, line)),
                    );
                }
            }
            bound(lines, limit)
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(lines: &[DiffLine]) -> String {
        lines
            .iter()
            .map(|line| {
                let mark = match line.kind {
                    DiffKind::Context => ' ',
                    DiffKind::Removed => '-',
                    DiffKind::Added => '+',
                    DiffKind::Note => '#',
                };
                format!("{mark}{}\n", line.text)
            })
            .collect()
    }

    fn numbered(range: std::ops::Range<usize>) -> String {
        range.map(|n| format!("line {n}\n")).collect()
    }

    #[test]
    fn a_change_gets_three_lines_of_context() {
        let old = numbered(1..21);
        let new = old.replace("line 10\n", "line ten\nline 10.5\n");
        assert_eq!(
            shown(&diff(&old, &new, 100)),
            " line 7\n line 8\n line 9\n-line 10\n+line ten\n+line 10.5\n line 11\n line 12\n line 13\n"
        );
    }

    #[test]
    fn distant_changes_fold_the_stretch_between() {
        let old = numbered(1..41);
        let new = old
            .replace("line 5\n", "line five\n")
            .replace("line 35\n", "");
        let text = shown(&diff(&old, &new, 100));
        assert!(text.starts_with(" line 2\n line 3\n line 4\n-line 5\n+line five\n line 6\n line 7\n line 8\n#⋯ 23 unchanged lines\n line 32\n"), "{text}");
        assert!(
            text.ends_with("-line 35\n line 36\n line 37\n line 38\n"),
            "{text}"
        );
    }

    #[test]
    fn previews_are_bounded() {
        let new = numbered(1..1_000);
        let lines = diff("", &new, 10);
        assert_eq!(lines.len(), 10);
        assert_eq!(lines[9].text, "… 990 more lines");
        assert_eq!(lines[9].kind, DiffKind::Note);
    }

    fn input(value: serde_json::Value) -> ToolInput {
        ToolInput::from_value(value)
    }

    /// Issue 36 (first hour) item 3: an edit whose `oldString` starts
    /// after a line's indentation is shown in whole lines, indentation
    /// and context included, once it ran (and when it was denied).
    #[test]
    fn an_edit_is_shown_in_the_files_whole_lines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = "def greet(name):\n\tif name:\n\t\treturn 'hi ' + name\n    return 'hi'\n";
        std::fs::write(dir.path().join("hello.py"), file).expect("file");
        let workspace = Workspace::new(dir.path()).expect("workspace");
        let call = input(serde_json::json!({
            "path": "hello.py",
            "oldString": "return 'hi ' + name",
            "newString": "return 'hello ' + name\n\t\t# greeted",
        }));
        let shown_before = "
 def greet(name):
 \tif name:
-\t\treturn 'hi ' + name
+\t\treturn 'hello ' + name
+\t\t# greeted
     return 'hi'
";
        let denied = edit_in_file(&workspace, &call, false).expect("the file tells");
        assert_eq!(shown(&denied), &shown_before[1..]);
        std::fs::write(
            dir.path().join("hello.py"),
            file.replace(
                "return 'hi ' + name",
                "return 'hello ' + name\n\t\t# greeted",
            ),
        )
        .expect("edited");
        let ran = edit_in_file(&workspace, &call, true).expect("the file tells");
        assert_eq!(shown(&ran), &shown_before[1..]);
        // Edited again since: the arguments are all there is.
        std::fs::write(dir.path().join("hello.py"), "x\n").expect("rewritten");
        assert_eq!(edit_in_file(&workspace, &call, true), None);
    }

    #[test]
    fn edit_and_write_previews_read_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("a.rs"), "fn a() {\n    1\n}\n").expect("file");
        let workspace = Workspace::new(dir.path()).expect("workspace");
        let edit = approval_preview(
            &workspace,
            "edit_file",
            &input(serde_json::json!({"path": "a.rs", "oldString": "    1", "newString": "    2"})),
        );
        assert_eq!(shown(&edit), " fn a() {\n-    1\n+    2\n }\n");
        let missing = approval_preview(
            &workspace,
            "edit_file",
            &input(serde_json::json!({"path": "a.rs", "oldString": "nope", "newString": "x"})),
        );
        assert_eq!(
            shown(&missing),
            "#oldString is not in the file: the edit will fail\n-nope\n+x\n"
        );
        let new_file = approval_preview(
            &workspace,
            "write_file",
            &input(serde_json::json!({"path": "b/c.md", "content": "# Title\ntext\n"})),
        );
        assert_eq!(shown(&new_file), "#new file, 2 lines\n+# Title\n+text\n");
        let outside = approval_preview(
            &workspace,
            "write_file",
            &input(serde_json::json!({"path": "../x", "content": "x"})),
        );
        assert!(shown(&outside).starts_with("#cannot read the current file ("));
        assert!(approval_preview(&workspace, "bash", &input(serde_json::json!({}))).is_empty());
    }
}
