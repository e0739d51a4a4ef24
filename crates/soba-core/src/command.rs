//! What counts as "the same command" (SPEC §8.1, §9.2, §15.3), shared by the
//! fact extractor, hygiene and the replay's retention probes so that the
//! three agree on which failing tool results are still unresolved.
//!
//! A failing result is resolved by a later success of the same normalised
//! command, or of the same tool on the same path. Here:
//!
//! - **Shell tools** (`bash`, `shell`, `exec_command`, `local_shell`,
//!   `run_shell_command`, `execute_bash`, `run`, `shell_command`) run a
//!   command given as a string (`command`, `cmd`) or an argv array (Codex
//!   `shell`, `local_shell`).
//! - **The normalised command** unwraps a `bash -lc '<script>'` wrapper
//!   (string or argv), collapses whitespace runs, and folds leading
//!   `cd <dir> &&` (or `;`) steps together with the call's working-directory
//!   argument (`workdir`, `cwd`, `dir_path`, `directory`,
//!   `working_directory`) into one workspace-relative directory, written
//!   back as a single `cd <dir> && ` prefix (none for the workspace root).
//!   So Codex's `go test ./...` with `workdir: <root>/backend` and
//!   `cd backend && go test ./...` are one command; the same command run in
//!   two directories is two.
//! - **The key** of a call is `$ <normalised command>` for shell tools,
//!   `<tool> <workspace-relative path>` for tools that name a file
//!   (`apply_patch`: its first target), else `<tool> <arguments as JSON>`
//!   (the same call again).
//! - **Outcomes**: a result is a failure when [`crate::facts::is_failure`]
//!   says so, pending while a Codex process still runs (`Process running
//!   with session ID N`, or a `write_stdin` poll without an exit status),
//!   else a success. A `write_stdin` poll reports on the command that
//!   started its session.

use std::collections::HashMap;

use serde_json::Value;

use crate::facts::outcome::{exit_code, is_failure};
use crate::facts::shell::{patch_paths, shell_words, workspace_relative};
use crate::message::{ToolInput, ToolResult, ToolUse};
use crate::truncate::omission_marker_inline;

/// Tools whose calls run a shell command (compared case-insensitively).
pub const SHELL_TOOLS: [&str; 8] = [
    "bash",
    "shell",
    "exec_command",
    "local_shell",
    "run_shell_command",
    "execute_bash",
    "run",
    "shell_command",
];

/// Arguments under which tools name the file they act on.
pub const PATH_KEYS: [&str; 7] = [
    "path",
    "file_path",
    "filePath",
    "absolute_path",
    "notebook_path",
    "filename",
    "file",
];

/// Arguments under which shell tools name their working directory.
pub const WORKDIR_KEYS: [&str; 5] = [
    "workdir",
    "cwd",
    "dir_path",
    "directory",
    "working_directory",
];

/// Characters of a key kept on each side of the omission marker when it is
/// shown (a capsule's error heading, a verification command).
pub const SHOWN_SIDE_CHARS: usize = 100;

/// Returns whether a tool of this name runs shell commands.
pub fn is_shell_tool(name: &str) -> bool {
    SHELL_TOOLS
        .iter()
        .any(|shell| shell.eq_ignore_ascii_case(name))
}

/// Returns the file a call names (the first of [`PATH_KEYS`] present and
/// not blank), as written.
pub fn path_arg(input: &ToolInput) -> Option<&str> {
    PATH_KEYS
        .iter()
        .find_map(|key| input.str_arg(key))
        .filter(|path| !path.trim().is_empty())
}

/// Returns the working directory a shell call names, unless it is empty or
/// `.`.
pub fn workdir_arg(input: &ToolInput) -> Option<&str> {
    WORKDIR_KEYS
        .iter()
        .find_map(|key| input.str_arg(key))
        .filter(|dir| !dir.trim().is_empty() && dir.trim() != ".")
}

/// Returns the patch text of an `apply_patch` call (`input`, `patch`,
/// `value`, or unparsed raw arguments).
pub fn patch_arg(input: &ToolInput) -> Option<&str> {
    input
        .str_arg("input")
        .or_else(|| input.str_arg("patch"))
        .or_else(|| input.str_arg("value"))
        .or_else(|| input.raw())
}

/// Returns a shell call's command text as written: a string `command` or
/// `cmd`, or an argv array (its script when it is `<shell> -c <script>`,
/// else the words joined by spaces).
pub fn command_arg(input: &ToolInput) -> Option<String> {
    let value = input
        .object()
        .get("command")
        .or_else(|| input.object().get("cmd"))?;
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Array(argv) => {
            let argv: Vec<&str> = argv.iter().filter_map(Value::as_str).collect();
            match argv.as_slice() {
                [] => None,
                [shell, flag, script] if is_shell(shell) && is_command_flag(flag) => {
                    Some((*script).to_owned())
                }
                _ => Some(argv.join(" ")),
            }
        }
        _ => None,
    }
}

/// Returns whether `word` names a POSIX shell (`bash`, `/bin/sh`, …).
pub fn is_shell(word: &str) -> bool {
    matches!(
        word.rsplit('/').next().unwrap_or(word),
        "bash" | "sh" | "zsh" | "dash"
    )
}

/// Returns whether a shell flag word runs its next argument (`-c`, `-lc`).
fn is_command_flag(flag: &str) -> bool {
    flag.starts_with('-') && !flag.starts_with("--") && flag.contains('c')
}

/// Unwraps `bash -lc '<script>'` (as Codex reports commands) to the script;
/// anything else is returned trimmed.
pub fn unwrap_shell(command: &str) -> String {
    let trimmed = command.trim();
    let words = shell_words(trimmed);
    if let [shell, flag, script] = words.as_slice()
        && is_shell(shell)
        && is_command_flag(flag)
    {
        return script.trim().to_owned();
    }
    trimmed.to_owned()
}

/// Returns a command with its `bash -lc` wrapper removed and whitespace
/// runs collapsed to one space.
pub fn normalize_command(command: &str) -> String {
    unwrap_shell(command)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Returns the normalised command (see the module docs): wrapper removed,
/// whitespace collapsed, leading `cd` steps and `workdir` folded into one
/// workspace-relative `cd <dir> && ` prefix, absent at the root `cwd`.
pub fn canonical_command(command: &str, workdir: Option<&str>, cwd: Option<&str>) -> String {
    let mut rest = normalize_command(command);
    let mut dir: Option<String> = workdir.map(|dir| lexical_path(dir.trim()));
    while let Some((head, tail)) = split_first_step(&rest) {
        let words = shell_words(head);
        let [cd, target] = words.as_slice() else {
            break;
        };
        if cd != "cd" || tail.is_empty() || !is_plain_dir(target) {
            break;
        }
        dir = Some(match dir {
            Some(base) if !target.starts_with('/') && !target.starts_with('~') => {
                lexical_path(&format!("{base}/{target}"))
            }
            _ => lexical_path(target),
        });
        rest = tail.to_owned();
    }
    let dir = dir
        .map(|dir| workspace_relative(&dir, cwd.map(lexical_path).as_deref()))
        .filter(|dir| !dir.is_empty() && dir != ".");
    match dir {
        Some(dir) => format!("cd {} && {rest}", shell_quote(&dir)),
        None => rest,
    }
}

/// Splits a one-line script at its first `&&` or `;` outside quotes.
fn split_first_step(script: &str) -> Option<(&str, &str)> {
    let bytes = script.as_bytes();
    let (mut single, mut double) = (false, false);
    let mut idx = 0;
    while idx < bytes.len() {
        let byte = bytes[idx];
        match byte {
            b'\\' if !single => idx += 1,
            b'\'' if !double => single = !single,
            b'"' if !single => double = !double,
            b';' if !single && !double => {
                return Some((script[..idx].trim(), script[idx + 1..].trim()));
            }
            b'&' if !single && !double && bytes.get(idx + 1) == Some(&b'&') => {
                return Some((script[..idx].trim(), script[idx + 2..].trim()));
            }
            _ => {}
        }
        idx += 1;
    }
    None
}

/// Returns whether a `cd` target is a literal directory (no variable,
/// glob, substitution or option).
fn is_plain_dir(target: &str) -> bool {
    !target.is_empty()
        && !target.starts_with('-')
        && !target.contains(['$', '`', '*', '?', '{', '(', '<', '>', '|'])
}

/// Resolves `.` and `..` components and repeated or trailing slashes.
fn lexical_path(path: &str) -> String {
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." if parts.last().is_some_and(|last| *last != "..") => {
                parts.pop();
            }
            ".." if absolute => {}
            part => parts.push(part),
        }
    }
    let joined = parts.join("/");
    match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    }
}

/// Quotes a directory for display when it holds characters the shell
/// would split or interpret.
fn shell_quote(dir: &str) -> String {
    let plain = dir
        .chars()
        .all(|c| c.is_alphanumeric() || "._/-~+@%:,=".contains(c));
    if plain {
        dir.to_owned()
    } else {
        format!("'{}'", dir.replace('\'', r"'\''"))
    }
}

/// Returns the normalised command of a shell tool call; `None` for other
/// tools and for shell calls whose command cannot be read.
pub fn shell_command(call: &ToolUse, cwd: Option<&str>) -> Option<String> {
    if !is_shell_tool(&call.name) {
        return None;
    }
    let command = command_arg(&call.input)?;
    Some(canonical_command(&command, workdir_arg(&call.input), cwd))
}

/// Returns the key of a call: what a later success must match to resolve
/// its failure (see the module docs). Keys are compared whole; show them
/// with [`shown_key`].
pub fn error_key(call: &ToolUse, cwd: Option<&str>) -> String {
    if let Some(command) = shell_command(call, cwd) {
        return format!("$ {command}");
    }
    let path = match path_arg(&call.input) {
        Some(path) => Some(path.to_owned()),
        None if call.name.eq_ignore_ascii_case("apply_patch") => {
            patch_arg(&call.input).and_then(|patch| patch_paths(patch).into_iter().next())
        }
        None => None,
    };
    match path {
        Some(path) => format!("{} {}", call.name, workspace_relative(&path, cwd)),
        None if call.input.object().is_empty() && call.input.raw().is_none() => call.name.clone(),
        None => format!("{} {}", call.name, call.input.to_json_text()),
    }
}

/// Returns `text` on one line (line breaks as spaces), middle-truncated to
/// [`SHOWN_SIDE_CHARS`] characters on each side of an inline marker: the
/// form in which keys and verification commands are shown and stored.
pub fn shown_key(text: &str) -> String {
    let line: String = text
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    let n = line.chars().count();
    if n <= 2 * SHOWN_SIDE_CHARS {
        return line;
    }
    let head: String = line.chars().take(SHOWN_SIDE_CHARS).collect();
    let tail: String = line.chars().skip(n - SHOWN_SIDE_CHARS).collect();
    format!(
        "{head}{}{tail}",
        omission_marker_inline(n - 2 * SHOWN_SIDE_CHARS)
    )
}

/// What a tool result says about its command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// It failed (`isError`, a non-zero exit, Codex `exec_command failed`).
    Failure,
    /// It finished without failing.
    Success,
    /// The process still runs; a later `write_stdin` poll reports it.
    Pending,
}

/// What a later success must match to resolve a failing tool result
/// (SPEC §8.1, §9.2): the same command, or the same tool on the same path.
/// It is the fact extractor's key ([`error_key`], whole), taken
/// from the same [`OutcomeTracker`], so hygiene keeps exactly the
/// errors a capsule would list as unresolved.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ErrorKey(String);

impl ErrorKey {
    /// Derives the key of a tool call in a session whose workspace root is
    /// `cwd`: its normalised shell command (directory folded in), else the
    /// tool with the path it acts on, else the tool with its arguments.
    pub fn from_call(call: &ToolUse, cwd: Option<&str>) -> Self {
        ErrorKey(error_key(call, cwd))
    }

    /// Takes the key of the command a result reports on (for a Codex
    /// `write_stdin` poll, the `exec_command` that started the session).
    pub fn from_outcome(outcome: &Outcome) -> Self {
        ErrorKey(outcome.key.clone())
    }

    /// Returns the key's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The outcome of one tool result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The key of the command or call it reports on ([`error_key`]); for a
    /// result whose call is unknown, `result <tool_use_id>`.
    pub key: String,
    /// The normalised command, for shell tools and their `write_stdin`
    /// polls.
    pub command: Option<String>,
    /// Failure, success or pending.
    pub status: Status,
    /// The exit status the result reports, if any.
    pub exit_code: Option<i64>,
}

#[derive(Debug, Clone)]
struct Subject {
    key: String,
    command: Option<String>,
}

#[derive(Debug, Clone)]
struct CallRecord {
    subject: Subject,
    /// The session a `write_stdin` call polls.
    polls: Option<String>,
}

/// Pairs the tool results of a transcript, in order, with the command or
/// call they report on, following Codex background sessions from the
/// `exec_command` that starts them to the `write_stdin` poll that reports
/// their exit.
#[derive(Debug, Clone, Default)]
pub struct OutcomeTracker {
    cwd: Option<String>,
    calls: HashMap<String, CallRecord>,
    sessions: HashMap<String, Subject>,
}

impl OutcomeTracker {
    /// Returns a tracker for a session whose workspace root is `cwd`.
    pub fn new(cwd: Option<&str>) -> Self {
        OutcomeTracker {
            cwd: cwd.map(str::to_owned),
            ..OutcomeTracker::default()
        }
    }

    /// Records a tool call, before its result.
    pub fn call(&mut self, call: &ToolUse) {
        let cwd = self.cwd.as_deref();
        let polls = if call.name.eq_ignore_ascii_case("write_stdin") {
            match call.input.object().get("session_id") {
                Some(Value::Number(n)) => Some(n.to_string()),
                Some(Value::String(s)) => Some(s.trim().to_owned()),
                _ => None,
            }
        } else {
            None
        };
        self.calls.insert(
            call.id.clone(),
            CallRecord {
                subject: Subject {
                    key: error_key(call, cwd),
                    command: shell_command(call, cwd),
                },
                polls,
            },
        );
    }

    /// Returns the outcome of a result (its call recorded earlier).
    pub fn result(&mut self, result: &ToolResult) -> Outcome {
        let text = result.text();
        let exit = exit_code(&text);
        let status = if is_failure(result) {
            Status::Failure
        } else {
            Status::Success
        };
        let Some(record) = self.calls.get(&result.tool_use_id) else {
            return Outcome {
                key: format!("result {}", result.tool_use_id),
                command: None,
                status,
                exit_code: exit,
            };
        };
        let polled = record
            .polls
            .as_ref()
            .and_then(|session| self.sessions.get(session));
        let subject = polled.unwrap_or(&record.subject).clone();
        let is_poll = record.polls.is_some();
        if status == Status::Success
            && let Some(session) = running_session(&text)
        {
            self.sessions.insert(session, subject.clone());
            return Outcome {
                key: subject.key,
                command: subject.command,
                status: Status::Pending,
                exit_code: None,
            };
        }
        let status = if status == Status::Success && is_poll && exit.is_none() {
            Status::Pending
        } else {
            status
        };
        Outcome {
            key: subject.key,
            command: subject.command,
            status,
            exit_code: exit,
        }
    }
}

/// Returns the session id of a Codex result whose process still runs.
fn running_session(text: &str) -> Option<String> {
    const MARKER: &str = "Process running with session ID ";
    let head: String = text.chars().take(600).collect();
    let start = head.find(MARKER)? + MARKER.len();
    let id: String = head[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    (!id.is_empty()).then_some(id)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::message::ResultPart;

    fn call(id: &str, name: &str, input: Value) -> ToolUse {
        ToolUse {
            id: id.into(),
            name: name.into(),
            input: ToolInput::from_value(input),
        }
    }

    fn result(id: &str, text: &str, is_error: bool) -> ToolResult {
        ToolResult {
            tool_use_id: id.into(),
            content: vec![ResultPart::Text(text.into())],
            is_error,
        }
    }

    const ROOT: Option<&str> = Some("/home/u/proj");

    #[test]
    fn leading_cd_steps_and_the_workdir_fold_into_one_relative_directory() {
        let canonical =
            |command: &str, workdir: Option<&str>| canonical_command(command, workdir, ROOT);
        let expected = "cd backend && go test ./...";
        // Codex: the directory as `workdir`, or as a `cd` step, absolute or
        // relative, wrapped in `bash -lc` or not.
        assert_eq!(
            canonical("go test ./...", Some("/home/u/proj/backend")),
            expected
        );
        assert_eq!(canonical("cd backend && go test ./...", None), expected);
        assert_eq!(
            canonical("cd /home/u/proj/backend && go  test ./...", None),
            expected
        );
        assert_eq!(
            canonical("/bin/bash -lc 'cd backend && go test ./...'", None),
            expected
        );
        assert_eq!(
            canonical("cd backend/ ; go test ./...", Some("/home/u/proj")),
            expected
        );
        assert_eq!(
            canonical(
                "cd ../backend && go test ./...",
                Some("/home/u/proj/frontend")
            ),
            expected
        );
        assert_eq!(
            canonical("cd internal && go test ./...", Some("backend/")),
            "cd backend/internal && go test ./..."
        );
        // The workspace root needs no prefix (pi's `cd <root> && …`).
        assert_eq!(
            canonical("cd /home/u/proj && npm run check", None),
            "npm run check"
        );
        assert_eq!(
            canonical("npm run check", Some("/home/u/proj")),
            "npm run check"
        );
        assert_eq!(canonical("npm run check", Some(".")), "npm run check");
        // The same command in another directory is another command.
        assert_ne!(canonical("go test ./...", None), expected);
        // What is not a literal `cd <dir>` step stays as written.
        assert_eq!(canonical("cd $HOME && ls", None), "cd $HOME && ls");
        assert_eq!(canonical("cd backend", None), "cd backend");
        assert_eq!(canonical("echo 'cd a && b'", None), "echo 'cd a && b'");
        assert_eq!(canonical("cd 'my dir' && ls", None), "cd 'my dir' && ls");
        assert_eq!(canonical("cd a || exit 1", None), "cd a || exit 1");
        // Outside the workspace, or without one, directories stay absolute.
        assert_eq!(canonical("ls", Some("/tmp/x/")), "cd /tmp/x && ls");
        assert_eq!(
            canonical_command("ls", Some("/srv/app"), None),
            "cd /srv/app && ls"
        );
    }

    #[test]
    fn shell_calls_of_every_agent_share_one_key() {
        let key = |name: &str, input: Value| error_key(&call("c", name, input), ROOT);
        let expected = "$ cd backend && go build ./...";
        // Codex exec_command: `cmd` as a string, with the usual extra fields.
        assert_eq!(
            key(
                "exec_command",
                json!({"cmd": "go build ./...", "workdir": "/home/u/proj/backend",
                       "justification": "build", "sandbox_permissions": "use_default"})
            ),
            expected
        );
        // `cmd` as an argv array.
        assert_eq!(
            key(
                "exec_command",
                json!({"cmd": ["/bin/bash", "-lc", "go build ./..."], "workdir": "/home/u/proj/backend"})
            ),
            expected
        );
        // Codex shell: an argv array, wrapped or not.
        assert_eq!(
            key(
                "shell",
                json!({"command": ["bash", "-lc", "cd backend && go build ./..."]})
            ),
            expected
        );
        assert_eq!(
            key(
                "shell",
                json!({"command": ["go", "build", "./..."], "workdir": "backend"})
            ),
            expected
        );
        // Codex local_shell (its action), Claude Code Bash, pi, OpenHands,
        // Gemini CLI.
        assert_eq!(
            key(
                "local_shell",
                json!({"type": "exec", "command": ["/bin/bash", "-lc", "go build ./..."],
                       "working_directory": "/home/u/proj/backend"})
            ),
            expected
        );
        assert_eq!(
            key("Bash", json!({"command": "cd backend && go build ./..."})),
            expected
        );
        assert_eq!(
            key(
                "bash",
                json!({"command": "bash -lc \"cd backend &&  go build ./...\""})
            ),
            expected
        );
        assert_eq!(
            key(
                "execute_bash",
                json!({"command": "cd /home/u/proj/backend && go build ./...", "is_input": false})
            ),
            expected
        );
        assert_eq!(
            key(
                "run_shell_command",
                json!({"command": "go build ./...", "directory": "backend"})
            ),
            expected
        );
        assert!(is_shell_tool("EXEC_COMMAND"));
        assert!(!is_shell_tool("write_stdin"));
    }

    #[test]
    fn other_tools_are_keyed_by_path_or_by_their_arguments() {
        let key = |name: &str, input: Value| error_key(&call("c", name, input), ROOT);
        // The same tool on the same path, whatever else differs.
        assert_eq!(
            key(
                "edit",
                json!({"path": "/home/u/proj/src/a.ts", "oldText": "x"})
            ),
            "edit src/a.ts"
        );
        assert_eq!(
            key(
                "str_replace_editor",
                json!({"command": "str_replace", "path": "/home/u/proj/a.py", "old_str": "x"})
            ),
            "str_replace_editor a.py"
        );
        assert_ne!(
            key(
                "str_replace_editor",
                json!({"command": "str_replace", "path": "a.py"})
            ),
            key(
                "str_replace_editor",
                json!({"command": "str_replace", "path": "b.py"})
            )
        );
        assert_eq!(
            key(
                "apply_patch",
                json!({"input": "*** Begin Patch\n*** Update File: src/x.rs\n@@\n-a\n+b\n*** Update File: src/y.rs\n*** End Patch"})
            ),
            "apply_patch src/x.rs"
        );
        // No command and no path: only the same call again.
        assert_eq!(
            key("grep", json!({"pattern": "fn main"})),
            r#"grep {"pattern":"fn main"}"#
        );
        assert_ne!(
            key("grep", json!({"pattern": "a"})),
            key("grep", json!({"pattern": "b"}))
        );
        assert_eq!(key("submit", json!({})), "submit");
    }

    #[test]
    fn shown_keys_are_one_line_and_bounded() {
        let long = format!("$ python - <<'EOF'\n{}\nEOF", "x = 1\n".repeat(100));
        let shown = shown_key(&long);
        assert!(!shown.contains('\n'));
        assert!(shown.starts_with("$ python - <<'EOF' x = 1 x = 1"));
        assert!(shown.ends_with("x = 1  EOF"));
        assert!(shown.contains(" [… 423 characters omitted …] "));
        assert_eq!(
            shown.chars().count(),
            200 + " [… 423 characters omitted …] ".chars().count()
        );
        assert_eq!(shown_key("$ ls"), "$ ls");
    }

    #[test]
    fn codex_sessions_report_through_write_stdin_and_pending_is_no_success() {
        let mut tracker = OutcomeTracker::new(ROOT);
        let start = call(
            "a",
            "exec_command",
            json!({"cmd": "./run_tests.sh", "workdir": "/home/u/proj"}),
        );
        tracker.call(&start);
        let running = tracker.result(&result(
            "a",
            "Command: /bin/bash -lc ./run_tests.sh\nChunk ID: 5b1df0\nWall time: 30.0011 seconds\nProcess running with session ID 36536\nOriginal token count: 501\nOutput:\n",
            false,
        ));
        assert_eq!(running.status, Status::Pending);
        assert_eq!(running.key, "$ ./run_tests.sh");
        // A poll with output but no exit status is still pending.
        tracker.call(&call(
            "b",
            "write_stdin",
            json!({"session_id": 36536, "chars": ""}),
        ));
        let poll = tracker.result(&result("b", "Chunk ID: 1\nWall time: 10.0 seconds\nProcess running with session ID 36536\nOutput:\nok 1", false));
        assert_eq!(poll.status, Status::Pending);
        tracker.call(&call(
            "c",
            "write_stdin",
            json!({"session_id": 36536, "chars": ""}),
        ));
        let exited = tracker.result(&result(
            "c",
            "Command: /bin/bash -lc ./run_tests.sh\nChunk ID: 06b17c\nWall time: 66.4022 seconds\nProcess exited with code 1\nOriginal token count: 248\nOutput:\nBackend did not become healthy in time",
            false,
        ));
        assert_eq!(exited.status, Status::Failure);
        assert_eq!(exited.key, "$ ./run_tests.sh");
        assert_eq!(exited.command.as_deref(), Some("./run_tests.sh"));
        assert_eq!(exited.exit_code, Some(1));
        // A poll of a session started before the transcript: its own call.
        tracker.call(&call(
            "d",
            "write_stdin",
            json!({"session_id": 99, "chars": ""}),
        ));
        let unknown = tracker.result(&result("d", "Process exited with code 0\nOutput:\n", false));
        assert_eq!(unknown.status, Status::Success);
        assert!(unknown.key.starts_with("write_stdin {"));
        // Codex's spawn failure and a result without a recorded call.
        tracker.call(&call("e", "exec_command", json!({"cmd": "pwd && ls -la"})));
        let denied = tracker.result(&result(
            "e",
            "exec_command failed for `/bin/bash -lc 'pwd && ls -la'`: CreateProcess",
            false,
        ));
        assert_eq!(denied.status, Status::Failure);
        let stray = tracker.result(&result("zz", "boom", true));
        assert_eq!(
            (stray.key.as_str(), stray.status),
            ("result zz", Status::Failure)
        );
    }
}
