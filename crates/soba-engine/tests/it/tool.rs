//! The agent's tools: each tool's contract with exact outputs, workspace
//! confinement, bash timeouts, caps and cancellation, and the approval
//! matrix (SPEC §11.1, §11.4, §17).

use std::collections::VecDeque;
use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use soba_core::{CheckpointKind, ToolInput, ToolUse};
use soba_engine::tool::{
    ApprovalDecision, ApprovalFuture, ApprovalPolicy, ApprovalRequest, ApprovalVerdict, Approvals,
    ApprovedBy, Approver, NON_INTERACTIVE_DENIAL, ToolConfig, ToolContext, ToolEffect, ToolError,
    ToolOutcome, ToolRegistry, USER_DENIAL, Workspace,
};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

/// A workspace in a temporary directory.
struct Fixture {
    _dir: TempDir,
    ctx: ToolContext,
}

impl Fixture {
    fn new() -> Self {
        Self::with_config(ToolConfig::default())
    }

    fn with_config(config: ToolConfig) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Workspace::new(dir.path()).unwrap();
        Fixture {
            _dir: dir,
            ctx: ToolContext::new(workspace, config, CancellationToken::new()),
        }
    }

    fn root(&self) -> &Path {
        self.ctx.workspace().root()
    }

    fn write(&self, path: &str, content: impl AsRef<[u8]>) {
        let full = self.root().join(path);
        fs::create_dir_all(full.parent().unwrap()).unwrap();
        fs::write(full, content).unwrap();
    }

    fn read(&self, path: &str) -> String {
        fs::read_to_string(self.root().join(path)).unwrap()
    }

    async fn call(&self, tool: &str, args: Value) -> ToolOutcome {
        let registry = ToolRegistry::builtin();
        registry
            .get(tool)
            .unwrap()
            .call(&ToolInput::from_value(args), &self.ctx)
            .await
    }

    /// Runs a tool and compares its whole outcome.
    async fn check(&self, tool: &str, args: Value, expected: &str, is_error: bool) {
        let outcome = self.call(tool, args.clone()).await;
        assert_eq!(outcome.content, expected, "{tool} {args}");
        assert_eq!(
            outcome.is_error, is_error,
            "{tool} {args}: {}",
            outcome.content
        );
    }
}

fn root_text(fixture: &Fixture) -> String {
    fixture.root().display().to_string()
}

// ---------------------------------------------------------------- read_file

#[tokio::test]
async fn read_file_numbers_lines_like_cat_n() {
    let fx = Fixture::new();
    fx.write("a.txt", "alpha\nbeta\ngamma\n");
    fx.check(
        "read_file",
        json!({"path": "a.txt"}),
        "     1\talpha\n     2\tbeta\n     3\tgamma",
        false,
    )
    .await;
    fx.check(
        "read_file",
        json!({"path": "a.txt", "offset": 2, "limit": 1}),
        "     2\tbeta\n(more lines follow; pass offset=3 to continue)",
        false,
    )
    .await;
    fx.check(
        "read_file",
        json!({"path": "a.txt", "offset": 3}),
        "     3\tgamma",
        false,
    )
    .await;
    fx.check(
        "read_file",
        json!({"path": "a.txt", "offset": 4}),
        "offset 4 is past the end of `a.txt` (3 lines)",
        true,
    )
    .await;
}

#[tokio::test]
async fn read_file_returns_2000_lines_by_default() {
    let fx = Fixture::new();
    let text: String = (1..=2_500).map(|n| format!("line {n}\n")).collect();
    fx.write("long.txt", text);
    let outcome = fx.call("read_file", json!({"path": "long.txt"})).await;
    let lines: Vec<&str> = outcome.content.lines().collect();
    assert_eq!(lines.len(), 2_001);
    assert_eq!(lines[0], "     1\tline 1");
    assert_eq!(lines[1_999], "  2000\tline 2000");
    assert_eq!(
        lines[2_000],
        "(more lines follow; pass offset=2001 to continue)"
    );
    let rest = fx
        .call("read_file", json!({"path": "long.txt", "offset": 2001}))
        .await;
    assert_eq!(rest.content.lines().count(), 500);
    assert!(rest.content.ends_with("  2500\tline 2500"));
}

#[tokio::test]
async fn read_file_refuses_whole_reads_over_4_mib() {
    let fx = Fixture::new();
    let line = "x".repeat(1_023) + "\n";
    let big = line.repeat(4 * 1024 + 1); // 4 MiB + 1 KiB
    fx.write("big.log", &big);
    fx.check(
        "read_file",
        json!({"path": "big.log"}),
        "`big.log` is 4195328 bytes, over the 4 MiB limit for reading a whole file; pass offset and limit to read a line range, or use search",
        true,
    )
    .await;
    let ranged = fx
        .call(
            "read_file",
            json!({"path": "big.log", "offset": 4097, "limit": 2}),
        )
        .await;
    assert!(!ranged.is_error, "{}", ranged.content);
    assert_eq!(ranged.content, format!("  4097\t{}", "x".repeat(1_023)));
}

#[tokio::test]
async fn read_file_explains_missing_binary_empty_and_directory() {
    let fx = Fixture::new();
    fx.write("bin.dat", b"\x7fELF\x00\x01\x02");
    fx.write("empty.txt", "");
    fx.write("dir/x.txt", "x");
    fx.check(
        "read_file",
        json!({"path": "nope.txt"}),
        "no such file or directory: `nope.txt`",
        true,
    )
    .await;
    fx.check(
        "read_file",
        json!({"path": "bin.dat"}),
        "`bin.dat` looks binary (it has a NUL byte in its first 8 KiB); use bash (e.g. `file` or `xxd | head`) to inspect it",
        true,
    )
    .await;
    fx.check(
        "read_file",
        json!({"path": "empty.txt"}),
        "(empty file)",
        false,
    )
    .await;
    fx.check(
        "read_file",
        json!({"path": "dir"}),
        "`dir` is a directory; use list_files to see what it holds",
        true,
    )
    .await;
    fx.check(
        "read_file",
        json!({}),
        "invalid arguments for read_file: `path` is required",
        true,
    )
    .await;
    fx.check(
        "read_file",
        json!({"path": "empty.txt", "limit": 0}),
        "invalid arguments for read_file: `limit` must be a positive integer, got 0",
        true,
    )
    .await;
}

// ------------------------------------------------------ write_file, edit_file

#[tokio::test]
async fn write_file_creates_parents_and_overwrites() {
    let fx = Fixture::new();
    fx.check(
        "write_file",
        json!({"path": "a/b/c.txt", "content": "hello"}),
        "created a/b/c.txt (5 bytes)",
        false,
    )
    .await;
    assert_eq!(fx.read("a/b/c.txt"), "hello");
    fx.check(
        "write_file",
        json!({"path": "a/b/c.txt", "content": "bye"}),
        "overwrote a/b/c.txt (3 bytes)",
        false,
    )
    .await;
    assert_eq!(fx.read("a/b/c.txt"), "bye");
    fx.check(
        "write_file",
        json!({"path": "a/b", "content": "x"}),
        "`a/b` is a directory; use list_files to see what it holds",
        true,
    )
    .await;
    fx.check(
        "write_file",
        json!({"path": "x.txt"}),
        "invalid arguments for write_file: `content` is required",
        true,
    )
    .await;
}

#[tokio::test]
async fn write_file_says_a_path_ending_in_a_slash_names_a_folder() {
    let fx = Fixture::new();
    for path in ["a.txt/", "sub/a.txt/"] {
        fx.check(
            "write_file",
            json!({"path": path, "content": "x"}),
            &format!(
                "`{path}` ends in `/`, so it names a folder, not a file; write_file writes files: give the file's path without the trailing `/` (folders are created as needed)"
            ),
            true,
        )
        .await;
    }
    assert!(!fx.root().join("a.txt").exists());
    assert!(!fx.root().join("sub").exists());
}

#[tokio::test]
async fn edit_file_replaces_exactly_one_match_unless_replace_all() {
    let fx = Fixture::new();
    fx.write("f.txt", "let a = 1;\nlet b = 1;\nlet c = 2;\n");
    fx.check(
        "edit_file",
        json!({"path": "f.txt", "oldString": "= 1", "newString": "= 9"}),
        "oldString matches 2 times in f.txt; include more surrounding text to make it unique, or pass replaceAll: true",
        true,
    )
    .await;
    fx.check(
        "edit_file",
        json!({"path": "f.txt", "oldString": "= 3", "newString": "= 9"}),
        "oldString not found in f.txt; read the file again and copy the text exactly, whitespace included",
        true,
    )
    .await;
    assert_eq!(fx.read("f.txt"), "let a = 1;\nlet b = 1;\nlet c = 2;\n");
    fx.check(
        "edit_file",
        json!({"path": "f.txt", "oldString": "let c = 2;", "newString": "let c = 3;"}),
        "replaced 1 occurrence in f.txt",
        false,
    )
    .await;
    fx.check(
        "edit_file",
        json!({"path": "f.txt", "oldString": "= 1", "newString": "= 9", "replaceAll": true}),
        "replaced 2 occurrences in f.txt",
        false,
    )
    .await;
    assert_eq!(fx.read("f.txt"), "let a = 9;\nlet b = 9;\nlet c = 3;\n");
    fx.check(
        "edit_file",
        json!({"path": "f.txt", "oldString": "", "newString": "x"}),
        "oldString is empty; use write_file to create or replace a whole file",
        true,
    )
    .await;
    fx.check(
        "edit_file",
        json!({"path": "missing.txt", "oldString": "a", "newString": "b"}),
        "no such file or directory: `missing.txt`",
        true,
    )
    .await;
}

// ------------------------------------------------------- list_files, search

fn ignored_tree(fx: &Fixture) {
    fx.write(".gitignore", "*.log\ntarget/\n");
    fx.write("src/main.rs", "fn main() {\n    println!(\"needle\");\n}\n");
    fx.write("src/lib.rs", "// needle in lib\n");
    fx.write("README.md", "a needle here\n");
    fx.write("debug.log", "needle in a log\n");
    fx.write("target/out.rs", "needle in target\n");
    fx.write(".git/config", "needle in git\n");
    fx.write(".env.example", "KEY=needle\n");
}

#[tokio::test]
async fn list_files_honours_gitignore_and_skips_git() {
    let fx = Fixture::new();
    ignored_tree(&fx);
    fx.check(
        "list_files",
        json!({}),
        ".env.example\n.gitignore\nREADME.md\nsrc/lib.rs\nsrc/main.rs",
        false,
    )
    .await;
    fx.check(
        "list_files",
        json!({"pattern": "*.rs"}),
        "src/lib.rs\nsrc/main.rs",
        false,
    )
    .await;
    // A glob naming an ignored file does not un-ignore it.
    fx.check(
        "list_files",
        json!({"pattern": "*.log"}),
        "(no files match `*.log`)",
        false,
    )
    .await;
    fx.check(
        "list_files",
        json!({"path": "src"}),
        "src/lib.rs\nsrc/main.rs",
        false,
    )
    .await;
    fx.check(
        "list_files",
        json!({"path": "nowhere"}),
        "no such file or directory: `nowhere`",
        true,
    )
    .await;
}

#[tokio::test]
async fn list_files_is_bounded_at_1000_entries() {
    let fx = Fixture::new();
    for n in 0..1_005 {
        fx.write(&format!("many/{n:04}.txt"), "");
    }
    let outcome = fx.call("list_files", json!({"path": "many"})).await;
    let lines: Vec<&str> = outcome.content.lines().collect();
    assert_eq!(lines.len(), 1_001);
    assert_eq!(lines[0], "many/0000.txt");
    assert_eq!(lines[999], "many/0999.txt");
    assert_eq!(lines[1_000], "… 5 more entries");
}

#[tokio::test]
async fn search_honours_gitignore_and_skips_git() {
    let fx = Fixture::new();
    ignored_tree(&fx);
    fx.check(
        "search",
        json!({"pattern": "needle"}),
        ".env.example:1:KEY=needle\nREADME.md:1:a needle here\nsrc/lib.rs:1:// needle in lib\nsrc/main.rs:2:    println!(\"needle\");",
        false,
    )
    .await;
    fx.check(
        "search",
        json!({"pattern": "ne+dle", "glob": "*.rs"}),
        "src/lib.rs:1:// needle in lib\nsrc/main.rs:2:    println!(\"needle\");",
        false,
    )
    .await;
    fx.check(
        "search",
        json!({"pattern": "needle", "path": "src/lib.rs"}),
        "src/lib.rs:1:// needle in lib",
        false,
    )
    .await;
    fx.check(
        "search",
        json!({"pattern": "haystack"}),
        "no matches for `haystack`",
        false,
    )
    .await;
    let invalid = fx.call("search", json!({"pattern": "("})).await;
    assert!(invalid.is_error);
    assert!(
        invalid.content.starts_with("invalid regex `(`: "),
        "{}",
        invalid.content
    );
}

#[tokio::test]
async fn search_is_bounded_at_1000_matches() {
    let fx = Fixture::new();
    let text: String = (0..1_200).map(|n| format!("hit {n}\n")).collect();
    fx.write("hits.txt", text);
    let outcome = fx.call("search", json!({"pattern": "^hit"})).await;
    let lines: Vec<&str> = outcome.content.lines().collect();
    assert_eq!(lines.len(), 1_001);
    assert_eq!(lines[999], "hits.txt:1000:hit 999");
    assert_eq!(lines[1_000], "… 200 more matches");
}

// ------------------------------------------------------------ confinement

/// A workspace plus a sibling directory outside it.
fn with_outside() -> (Fixture, TempDir) {
    let fx = Fixture::new();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("secret.txt"), "top secret\n").unwrap();
    (fx, outside)
}

#[tokio::test]
async fn dot_dot_and_absolute_escapes_are_refused() {
    let (fx, outside) = with_outside();
    let root = root_text(&fx);
    fx.check(
        "read_file",
        json!({"path": "../secret.txt"}),
        &format!(
            "`../secret.txt` is outside the workspace root {root}; soba reads and writes workspace files only inside it"
        ),
        true,
    )
    .await;
    let absolute = outside.path().join("secret.txt").display().to_string();
    fx.check(
        "write_file",
        json!({"path": absolute, "content": "pwned"}),
        &format!(
            "`{absolute}` is outside the workspace root {root}; soba reads and writes workspace files only inside it"
        ),
        true,
    )
    .await;
    assert_eq!(
        fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
        "top secret\n"
    );
    fx.check(
        "list_files",
        json!({"path": "sub/../.."}),
        &format!(
            "`sub/../..` is outside the workspace root {root}; soba reads and writes workspace files only inside it"
        ),
        true,
    )
    .await;
    fx.check(
        "search",
        json!({"pattern": "secret", "path": "/"}),
        &format!("`/` is outside the workspace root {root}; soba reads and writes workspace files only inside it"),
        true,
    )
    .await;
    fx.check(
        "edit_file",
        json!({"path": "../secret.txt", "oldString": "top", "newString": "no"}),
        &format!(
            "`../secret.txt` is outside the workspace root {root}; soba reads and writes workspace files only inside it"
        ),
        true,
    )
    .await;
}

#[tokio::test]
async fn paths_that_stay_inside_are_allowed() {
    let fx = Fixture::new();
    fx.write("a.txt", "a\n");
    fx.check(
        "read_file",
        json!({"path": "sub/../a.txt"}),
        "     1\ta",
        false,
    )
    .await;
    let absolute = fx.root().join("a.txt").display().to_string();
    fx.check("read_file", json!({"path": absolute}), "     1\ta", false)
        .await;
}

#[tokio::test]
async fn symlinks_to_outside_dirs_and_files_are_refused() {
    let (fx, outside) = with_outside();
    let root = root_text(&fx);
    let target_dir = fs::canonicalize(outside.path()).unwrap();
    std::os::unix::fs::symlink(outside.path(), fx.root().join("out_dir")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        fx.root().join("out_file"),
    )
    .unwrap();

    fx.check(
        "read_file",
        json!({"path": "out_dir/secret.txt"}),
        &format!(
            "`out_dir/secret.txt` resolves through a symlink to {}, outside the workspace root {root}; soba reads and writes workspace files only inside it",
            target_dir.join("secret.txt").display()
        ),
        true,
    )
    .await;
    // Writing a new file under the linked directory is caught at its parent.
    fx.check(
        "write_file",
        json!({"path": "out_dir/new.txt", "content": "x"}),
        &format!(
            "`out_dir/new.txt` resolves through a symlink to {}, outside the workspace root {root}; soba reads and writes workspace files only inside it",
            target_dir.display()
        ),
        true,
    )
    .await;
    assert!(!outside.path().join("new.txt").exists());
    let refused_file = format!(
        "`out_file` resolves through a symlink to {}, outside the workspace root {root}; soba reads and writes workspace files only inside it",
        target_dir.join("secret.txt").display()
    );
    fx.check(
        "read_file",
        json!({"path": "out_file"}),
        &refused_file,
        true,
    )
    .await;
    fx.check(
        "write_file",
        json!({"path": "out_file", "content": "pwned"}),
        &refused_file,
        true,
    )
    .await;
    fx.check(
        "edit_file",
        json!({"path": "out_file", "oldString": "top", "newString": "no"}),
        &refused_file,
        true,
    )
    .await;
    assert_eq!(
        fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
        "top secret\n"
    );
    fx.check("search", json!({"pattern": "secret", "path": "out_dir"}), &format!(
        "`out_dir` resolves through a symlink to {}, outside the workspace root {root}; soba reads and writes workspace files only inside it",
        target_dir.display()
    ), true)
    .await;
    // The walk lists the links but neither follows nor reads them.
    fx.check("list_files", json!({}), "out_dir\nout_file", false)
        .await;
    fx.check(
        "search",
        json!({"pattern": "secret"}),
        "no matches for `secret`",
        false,
    )
    .await;
}

#[tokio::test]
async fn dangling_symlinks_are_refused_for_writes() {
    let (fx, outside) = with_outside();
    let root = root_text(&fx);
    std::os::unix::fs::symlink(
        outside.path().join("planted.txt"),
        fx.root().join("dangling"),
    )
    .unwrap();
    fx.check(
        "write_file",
        json!({"path": "dangling", "content": "x"}),
        &format!("`dangling` is or goes through a dangling symlink under the workspace root {root}; refusing to follow it"),
        true,
    )
    .await;
    assert!(!outside.path().join("planted.txt").exists());
}

#[tokio::test]
async fn symlinks_inside_the_workspace_are_allowed() {
    let fx = Fixture::new();
    fx.write("real/data.txt", "one\n");
    std::os::unix::fs::symlink(fx.root().join("real"), fx.root().join("alias")).unwrap();
    std::os::unix::fs::symlink("real/data.txt", fx.root().join("data_link")).unwrap();
    fx.check(
        "read_file",
        json!({"path": "alias/data.txt"}),
        "     1\tone",
        false,
    )
    .await;
    fx.check(
        "read_file",
        json!({"path": "data_link"}),
        "     1\tone",
        false,
    )
    .await;
    fx.check(
        "write_file",
        json!({"path": "data_link", "content": "two\n"}),
        "overwrote real/data.txt (4 bytes)",
        false,
    )
    .await;
    fx.check(
        "write_file",
        json!({"path": "alias/new.txt", "content": "n"}),
        "created real/new.txt (1 byte)",
        false,
    )
    .await;
    assert_eq!(fx.read("real/data.txt"), "two\n");
    assert!(
        fs::symlink_metadata(fx.root().join("data_link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[tokio::test]
async fn hard_links_to_outside_files_are_refused_for_writes() {
    let (fx, outside) = with_outside();
    let root = root_text(&fx);
    fs::hard_link(
        outside.path().join("secret.txt"),
        fx.root().join("linked.txt"),
    )
    .unwrap();
    let refused = format!(
        "`linked.txt` has 2 hard links, so writing it could change a file outside the workspace root {root}; refusing to write through a hard link (copy the file to break the link first)"
    );
    fx.check(
        "write_file",
        json!({"path": "linked.txt", "content": "pwned"}),
        &refused,
        true,
    )
    .await;
    fx.check(
        "edit_file",
        json!({"path": "linked.txt", "oldString": "top", "newString": "no"}),
        &refused,
        true,
    )
    .await;
    assert_eq!(
        fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
        "top secret\n"
    );
    // Reading is harmless: the link is a file of the workspace.
    fx.check(
        "read_file",
        json!({"path": "linked.txt"}),
        "     1\ttop secret",
        false,
    )
    .await;
}

#[test]
fn workspace_resolve_returns_canonical_paths() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = Workspace::new(dir.path()).unwrap();
    assert_eq!(workspace.root(), fs::canonicalize(dir.path()).unwrap());
    assert_eq!(
        workspace.resolve("a/./b/../c.txt").unwrap(),
        workspace.root().join("a/c.txt")
    );
    assert_eq!(workspace.resolve(".").unwrap(), workspace.root());
    assert!(matches!(workspace.resolve(""), Err(ToolError::EmptyPath)));
    assert!(matches!(
        workspace.resolve(".."),
        Err(ToolError::OutsideWorkspace { .. })
    ));
}

// ------------------------------------------------------------------- bash

#[tokio::test]
async fn bash_reports_combined_output_and_exit_code() {
    let fx = Fixture::new();
    fx.check(
        "bash",
        json!({"command": "echo out; echo err >&2; echo more"}),
        "out\nerr\nmore\nexit code 0",
        false,
    )
    .await;
    fx.check(
        "bash",
        json!({"command": "printf partial; exit 3"}),
        "partial\nexit code 3",
        true,
    )
    .await;
    fx.check("bash", json!({"command": "true"}), "exit code 0", false)
        .await;
    fx.check(
        "bash",
        json!({"command": "pwd"}),
        &format!("{}\nexit code 0", root_text(&fx)),
        false,
    )
    .await;
    // Stdin is empty, so a program waiting for input ends at once.
    fx.check("bash", json!({"command": "cat"}), "exit code 0", false)
        .await;
    fx.check(
        "bash",
        json!({"command": "kill -9 $$"}),
        "killed by signal 9",
        true,
    )
    .await;
    fx.check(
        "bash",
        json!({"command": "true", "timeoutMs": 600_001}),
        "invalid arguments for bash: `timeoutMs` must be at most 600000 (10 minutes), got 600001",
        true,
    )
    .await;
}

/// Returns whether a process is alive (a zombie counts as dead).
fn is_running(pid: &str) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            stat.rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next())
                != Some("Z")
        }
        Err(_) => false,
    }
}

/// Polls until the process is gone, up to 2 s.
async fn gone(pid: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        if !is_running(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test]
async fn bash_timeout_kills_the_process_group() {
    let fx = Fixture::new();
    let started = Instant::now();
    fx.check(
        "bash",
        json!({"command": "echo started; sleep 5 & echo $! > bg.pid; wait", "timeoutMs": 500}),
        "started\ntimed out after 500 ms; the command and its children were killed",
        true,
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    let pid = fx.read("bg.pid").trim().to_owned();
    assert!(
        gone(&pid).await,
        "background sleep {pid} survived the timeout"
    );
}

#[tokio::test]
async fn bash_uses_the_configured_default_timeout() {
    let fx = Fixture::with_config(ToolConfig::default().with_bash_timeout_ms(300).unwrap());
    let started = Instant::now();
    fx.check(
        "bash",
        json!({"command": "sleep 5"}),
        "timed out after 300 ms; the command and its children were killed",
        true,
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn bash_keeps_first_and_last_512_kib_with_a_marker() {
    let fx = Fixture::new();
    // 1,100,000 bytes: 524,288 kept at each end, 51,424 dropped.
    let outcome = fx
        .call(
            "bash",
            json!({"command": "head -c 1100000 /dev/zero | tr '\\0' a"}),
        )
        .await;
    let kept = "a".repeat(512 * 1024);
    let expected = format!("{kept}\n[… 51424 bytes of output dropped …]\n{kept}\nexit code 0");
    assert!(!outcome.is_error);
    assert_eq!(outcome.content.len(), expected.len());
    assert!(outcome.content == expected, "marker or sizes differ");

    let exact = fx
        .call(
            "bash",
            json!({"command": "head -c 1048576 /dev/zero | tr '\\0' b"}),
        )
        .await;
    assert_eq!(
        exact.content,
        format!("{}\nexit code 0", "b".repeat(1_048_576))
    );
}

#[tokio::test]
async fn bash_cancel_kills_the_process_group() {
    let fx = Fixture::new();
    let cancel = fx.ctx.cancel().clone();
    let root = fx.root().to_path_buf();
    let canceller = tokio::spawn(async move {
        // Cancel once the command has started its child.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !root.join("bg.pid").exists() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        cancel.cancel();
    });
    let started = Instant::now();
    fx.check(
        "bash",
        json!({"command": "echo $$ > main.pid; sleep 5 & echo $! > bg.pid; wait"}),
        "cancelled; the command and its children were killed",
        true,
    )
    .await;
    canceller.await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    for file in ["main.pid", "bg.pid"] {
        let pid = fx.read(file).trim().to_owned();
        assert!(
            gone(&pid).await,
            "{file}: process {pid} survived the cancel"
        );
    }
}

#[tokio::test]
async fn bash_returns_when_background_processes_hold_the_output() {
    let fx = Fixture::new();
    let started = Instant::now();
    let outcome = fx
        .call(
            "bash",
            json!({"command": "sleep 5 & echo $! > bg.pid; echo hi"}),
        )
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(
        outcome.content,
        "hi\nexit code 0\n(processes left in the background still hold the output; what they write later is not captured)"
    );
    assert!(!outcome.is_error);
    let pid = fx.read("bg.pid").trim().to_owned();
    std::process::Command::new("kill")
        .arg(&pid)
        .status()
        .unwrap();
}

// ------------------------------------------------------------- checkpoint

#[tokio::test]
async fn checkpoint_returns_an_effect_for_the_engine() {
    let fx = Fixture::new();
    let outcome = fx
        .call(
            "checkpoint",
            json!({"kind": "plan_pivot", "note": " switch to a trie "}),
        )
        .await;
    assert_eq!(
        outcome.content,
        "checkpoint recorded (plan_pivot): switch to a trie"
    );
    assert!(!outcome.is_error);
    assert_eq!(
        outcome.effect,
        Some(ToolEffect::Checkpoint {
            kind: CheckpointKind::PlanPivot,
            note: "switch to a trie".into()
        })
    );
    let milestone = fx
        .call(
            "checkpoint",
            json!({"kind": "milestone", "note": "tests pass"}),
        )
        .await;
    assert_eq!(
        milestone.effect,
        Some(ToolEffect::Checkpoint {
            kind: CheckpointKind::Milestone,
            note: "tests pass".into()
        })
    );
    fx.check(
        "checkpoint",
        json!({"kind": "pivot", "note": "x"}),
        "invalid arguments for checkpoint: `kind` must be milestone or plan_pivot, got `pivot`",
        true,
    )
    .await;
    fx.check(
        "checkpoint",
        json!({"kind": "milestone", "note": "  "}),
        "invalid arguments for checkpoint: `note` is empty; say what the checkpoint marks",
        true,
    )
    .await;
    assert_eq!(
        fx.call("checkpoint", json!({"kind": "pivot", "note": "x"}))
            .await
            .effect,
        None
    );
}

// --------------------------------------------------------------- approval

fn allow(list: &[&str]) -> Vec<String> {
    list.iter().map(|name| (*name).to_owned()).collect()
}

#[test]
fn approval_policy_matrix() {
    let tools = ["bash", "write_file", "edit_file", "read_file"];
    // (auto-approve, --allow, tools.allow) → which of `tools` are covered.
    /// (auto-approve, --allow, tools.allow, covered).
    type Case = (
        bool,
        &'static [&'static str],
        &'static [&'static str],
        [bool; 4],
    );
    let cases: &[Case] = &[
        (false, &[], &[], [false, false, false, false]),
        (true, &[], &[], [true, true, true, true]),
        (false, &["bash"], &[], [true, false, false, false]),
        (false, &["write"], &[], [false, true, true, false]),
        (false, &["edit"], &[], [false, false, true, false]),
        (false, &["bash,write"], &[], [true, true, true, false]),
        (false, &["bash", " edit "], &[], [true, false, true, false]),
        (false, &[], &["write"], [false, true, true, false]),
        (false, &["bash"], &["edit"], [true, false, true, false]),
        (false, &["write_file"], &[], [false, true, false, false]),
    ];
    for (auto, flags, user, expected) in cases {
        let policy = ApprovalPolicy::new(*auto, &allow(flags), &allow(user)).unwrap();
        let covered = tools.map(|tool| policy.covers(tool));
        assert_eq!(
            &covered, expected,
            "auto={auto} --allow {flags:?} tools.allow {user:?}"
        );
    }
    assert_eq!(
        ApprovalPolicy::new(false, &allow(&["bash,read"]), &[])
            .unwrap_err()
            .to_string(),
        "unknown tool `read` in --allow: use bash, write (write_file and edit_file) or edit (edit_file)"
    );
    assert_eq!(
        ApprovalPolicy::new(false, &[], &allow(&["shell"]))
            .unwrap_err()
            .to_string(),
        "unknown tool `shell` in tools.allow: use bash, write (write_file and edit_file) or edit (edit_file)"
    );
}

/// An approver answering from a script and recording what it was asked.
#[derive(Default)]
struct Scripted {
    answers: Mutex<VecDeque<ApprovalDecision>>,
    asked: Mutex<Vec<String>>,
}

impl Scripted {
    fn new(answers: &[ApprovalDecision]) -> Arc<Self> {
        Arc::new(Scripted {
            answers: Mutex::new(answers.iter().copied().collect()),
            asked: Mutex::default(),
        })
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

impl Approver for Scripted {
    fn decide<'a>(&'a self, request: ApprovalRequest<'a>) -> ApprovalFuture<'a> {
        self.asked.lock().unwrap().push(format!(
            "{}: {} [{}]",
            request.tool(),
            request.summary(),
            request.session_scope()
        ));
        let answer = self
            .answers
            .lock()
            .unwrap()
            .pop_front()
            .expect("the script ran out of answers");
        Box::pin(async move { answer })
    }
}

async fn verdict(approvals: &Approvals, tool: &str, args: Value) -> ApprovalVerdict {
    let registry = ToolRegistry::builtin();
    approvals
        .check(registry.get(tool).unwrap(), &ToolInput::from_value(args))
        .await
}

#[tokio::test]
async fn non_interactive_runs_deny_uncovered_tools() {
    let approvals =
        Approvals::non_interactive(ApprovalPolicy::new(false, &allow(&["edit"]), &[]).unwrap());
    let denied = ApprovalVerdict::Denied(
        "not approved: rerun with --auto-approve or --allow bash,write".into(),
    );
    assert_eq!(
        NON_INTERACTIVE_DENIAL,
        "not approved: rerun with --auto-approve or --allow bash,write"
    );
    assert_eq!(
        verdict(&approvals, "bash", json!({"command": "ls"})).await,
        denied
    );
    assert_eq!(
        verdict(
            &approvals,
            "write_file",
            json!({"path": "a", "content": ""})
        )
        .await,
        denied
    );
    assert_eq!(
        verdict(&approvals, "edit_file", json!({"path": "a"})).await,
        ApprovalVerdict::Approved(ApprovedBy::Policy)
    );
    assert_eq!(
        verdict(&approvals, "read_file", json!({"path": "a"})).await,
        ApprovalVerdict::Approved(ApprovedBy::NotNeeded)
    );
    let auto = Approvals::non_interactive(ApprovalPolicy::auto_approve());
    assert_eq!(
        verdict(&auto, "bash", json!({"command": "ls"})).await,
        ApprovalVerdict::Approved(ApprovedBy::Policy)
    );
}

#[tokio::test]
async fn interactive_answers_once_always_and_deny() {
    use ApprovalDecision::{AlwaysForSession, Deny, Once};
    let approver = Scripted::new(&[
        Once,
        Once,
        AlwaysForSession,
        Once,
        AlwaysForSession,
        Once,
        Once,
        Deny,
    ]);
    let approvals = Approvals::interactive(ApprovalPolicy::default(), approver.clone());
    let user = ApprovalVerdict::Approved(ApprovedBy::User);
    let session = ApprovalVerdict::Approved(ApprovedBy::Session);

    // `y` approves one call: the next one asks again.
    assert_eq!(
        verdict(&approvals, "write_file", json!({"path": "a.txt"})).await,
        user
    );
    assert_eq!(
        verdict(&approvals, "write_file", json!({"path": "b.txt"})).await,
        user
    );
    // `a` approves the tool for the session, but not a sibling tool.
    assert_eq!(
        verdict(&approvals, "write_file", json!({"path": "c.txt"})).await,
        user
    );
    assert_eq!(
        verdict(&approvals, "write_file", json!({"path": "d.txt"})).await,
        session
    );
    assert_eq!(
        verdict(&approvals, "edit_file", json!({"path": "d.txt"})).await,
        user
    );
    // For bash, `a` approves commands with the same first two words.
    assert_eq!(
        verdict(
            &approvals,
            "bash",
            json!({"command": "cargo test 2>&1 | tail -3"})
        )
        .await,
        user
    );
    assert_eq!(
        verdict(&approvals, "bash", json!({"command": "cargo test --lib"})).await,
        session
    );
    assert_eq!(
        verdict(&approvals, "bash", json!({"command": "tail -3 log"})).await,
        session
    );
    // Not another subcommand of the same program (the walk: `a` on one
    // `git` command approved `git push`).
    assert_eq!(
        verdict(&approvals, "bash", json!({"command": "cargo build"})).await,
        user
    );
    assert_eq!(
        verdict(
            &approvals,
            "bash",
            json!({"command": "cargo test && rm -rf /"})
        )
        .await,
        user
    );
    // `n` denies.
    assert_eq!(
        verdict(&approvals, "bash", json!({"command": "rm -rf target"})).await,
        ApprovalVerdict::Denied(USER_DENIAL.into())
    );
    assert_eq!(USER_DENIAL, "not approved: the user denied this call");
    assert_eq!(
        approver.asked(),
        [
            "write_file: a.txt [every write_file call this session]",
            "write_file: b.txt [every write_file call this session]",
            "write_file: c.txt [every write_file call this session]",
            "edit_file: d.txt [every edit_file call this session]",
            "bash: cargo test 2>&1 | tail -3 [bash commands starting with `cargo test`, `tail -3` this session]",
            "bash: cargo build [bash commands starting with `cargo build` this session]",
            "bash: cargo test && rm -rf / [bash commands starting with `cargo test`, `rm -rf` this session]",
            "bash: rm -rf target [bash commands starting with `rm -rf` this session]",
        ]
    );
}

#[tokio::test]
async fn registry_execute_gates_and_validates_calls() {
    let fx = Fixture::new();
    let registry = ToolRegistry::builtin();
    let approvals = Approvals::non_interactive(ApprovalPolicy::default());
    let call = |name: &str, input: ToolInput| ToolUse {
        id: "t1".into(),
        name: name.into(),
        input,
    };

    let denied = registry
        .execute(
            &call(
                "bash",
                ToolInput::from_value(json!({"command": "touch ran"})),
            ),
            &fx.ctx,
            &approvals,
        )
        .await;
    assert_eq!(
        (denied.content.as_str(), denied.is_error),
        (NON_INTERACTIVE_DENIAL, true)
    );
    assert!(
        !fx.root().join("ran").exists(),
        "a denied command must not run"
    );

    let unknown = registry
        .execute(&call("rm", ToolInput::empty()), &fx.ctx, &approvals)
        .await;
    assert_eq!(
        unknown.content,
        "unknown tool `rm`; the available tools are read_file, write_file, edit_file, list_files, search, bash, checkpoint, update_plan"
    );
    let garbled = registry
        .execute(
            &call("read_file", ToolInput::from_json_text("{\"path\": \"a")),
            &fx.ctx,
            &approvals,
        )
        .await;
    assert_eq!(
        garbled.content,
        "the arguments of read_file are not a JSON object; send an object matching its schema"
    );

    fx.write("a.txt", "a\n");
    let read = registry
        .execute(
            &call("read_file", ToolInput::from_value(json!({"path": "a.txt"}))),
            &fx.ctx,
            &approvals,
        )
        .await;
    assert_eq!(read.to_result("t1").text(), "     1\ta");

    let allowed =
        Approvals::non_interactive(ApprovalPolicy::new(false, &allow(&["bash"]), &[]).unwrap());
    let ran = registry
        .execute(
            &call(
                "bash",
                ToolInput::from_value(json!({"command": "touch ran"})),
            ),
            &fx.ctx,
            &allowed,
        )
        .await;
    assert_eq!(ran.content, "exit code 0");
    assert!(fx.root().join("ran").exists());

    fx.ctx.cancel().cancel();
    let cancelled = registry
        .execute(
            &call("read_file", ToolInput::from_value(json!({"path": "a.txt"}))),
            &fx.ctx,
            &allowed,
        )
        .await;
    assert_eq!(cancelled.content, "cancelled before the tool ran");
}

#[test]
fn schemas_describe_every_tool() {
    let schemas = ToolRegistry::builtin().tool_schemas();
    let edit = schemas
        .iter()
        .find(|schema| schema.name == "edit_file")
        .unwrap();
    assert_eq!(
        edit.input_schema["required"],
        json!(["path", "oldString", "newString"])
    );
    let bash = schemas.iter().find(|schema| schema.name == "bash").unwrap();
    assert_eq!(
        bash.input_schema["properties"]["timeoutMs"]["maximum"],
        json!(600_000)
    );
    let checkpoint = schemas
        .iter()
        .find(|schema| schema.name == "checkpoint")
        .unwrap();
    assert_eq!(
        checkpoint.input_schema["properties"]["kind"]["enum"],
        json!(["milestone", "plan_pivot"])
    );
}
