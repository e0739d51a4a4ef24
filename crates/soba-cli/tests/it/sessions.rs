//! `soba sessions`, `soba show` (summary, `--entries`, `--check`) and
//! `soba stats`, on sessions imported into a sandboxed `SOBA_HOME`.

use std::io::Write;

use serde_json::Value;

use crate::support::{Sandbox, last_line, long_pi_session, pi_session, text};

/// Imports a synthetic pi session and returns its SOBA session id.
fn imported(sandbox: &Sandbox, body: &str) -> String {
    let file = sandbox.write(&format!("t/{}.jsonl", body.len()), body);
    let output = sandbox.run_ok(&["import", file.to_str().unwrap(), "--json"]);
    let reports: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    reports[0]["sessionId"].as_str().unwrap().to_owned()
}

#[test]
fn sessions_lists_short_ids_messages_sizes_and_titles() {
    let sandbox = Sandbox::new();
    let empty = sandbox.run_ok(&["sessions"]);
    assert_eq!(
        text(&empty.stdout).lines().next().unwrap(),
        format!("no sessions in {}", sandbox.sessions_dir().display())
    );
    let id = imported(&sandbox, &pi_session("Fix the failing test."));
    let output = sandbox.run_ok(&["sessions"]);
    let stdout = text(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    // The time shown is the one the list is ordered by: when the log
    // last changed (here its import), not the conversation's start.
    assert_eq!(header, ["id", "modified", "messages", "size", "title"]);
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(row[0], &id[..8]);
    let summary = &soba_store::reader::list_sessions(sandbox.sessions_dir()).unwrap()[0];
    assert_eq!(
        row[1..3].join(" "),
        soba_workspace::session_list::modified(summary)
    );
    assert_ne!(&row[1..3], ["2025-02-01", "10:00"]);
    assert_eq!(row[3], "4");
    assert_eq!(row[6..].join(" "), "Fix the failing test.");

    let json = sandbox.run_ok(&["sessions", "--json"]);
    let rows: Vec<Value> = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(rows[0]["id"], Value::String(id.clone()));
    // 4 messages + the model the header named.
    assert_eq!(rows[0]["entries"], Value::from(4));
    assert_eq!(rows[0]["messages"], Value::from(4));
    assert_eq!(rows[0]["title"], Value::from("Fix the failing test."));
    assert_eq!(rows[0]["cwd"], Value::from("/work/app"));
    let size = std::fs::metadata(&sandbox.session_files()[0])
        .unwrap()
        .len();
    assert_eq!(rows[0]["bytes"], Value::from(size));
}

/// Issue 36 item 3: a session that opened with a greeting is titled by its
/// first task, as Claude Code's and Codex's pickers show a summary.
#[test]
fn a_session_opened_with_a_greeting_is_titled_by_its_first_task() {
    let sandbox = Sandbox::new();
    let mut session = pi_session("hello, what can you do?");
    session.push_str(
        &serde_json::json!({"type":"message","timestamp":"2025-02-01T10:00:05.000Z","message":{"role":"user","content":"Add a --json flag to the report command and test it.","timestamp":5}}).to_string(),
    );
    session.push('\n');
    let id = imported(&sandbox, &session);
    let stdout = text(&sandbox.run_ok(&["sessions"]).stdout);
    let row = stdout.lines().nth(1).unwrap();
    assert!(row.starts_with(&id[..8]), "{stdout}");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[3], "5", "{stdout}");
    assert_eq!(
        cells[6..].join(" "),
        "Add a --json flag to the report command and test it.",
        "{stdout}"
    );
}

#[test]
fn session_dir_overrides_only_the_sessions_location() {
    let sandbox = Sandbox::new();
    let elsewhere = sandbox.ws.join("my-sessions");
    let file = sandbox.write("s.jsonl", &pi_session("hi"));
    sandbox.run_ok(&[
        "import",
        file.to_str().unwrap(),
        "--session-dir",
        elsewhere.to_str().unwrap(),
    ]);
    assert!(sandbox.session_files().is_empty());
    // The session, and the lock file concurrent imports take turns on.
    let mut names: Vec<String> = std::fs::read_dir(&elsewhere)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(names[0], ".import.lock");
    assert!(names[1].ends_with(".jsonl"), "{names:?}");
    let output = sandbox.run_ok(&["sessions", "--session-dir", elsewhere.to_str().unwrap()]);
    assert_eq!(text(&output.stdout).lines().count(), 2);
}

#[test]
fn show_summarizes_lists_entries_and_validates() {
    let sandbox = Sandbox::new();
    let id = imported(&sandbox, &pi_session("Fix the failing test."));
    let output = sandbox.run_ok(&["show", &id[..8]]);
    let stdout = text(&output.stdout);
    assert!(stdout.starts_with(&format!("session   {id}\n")), "{stdout}");
    assert!(stdout.contains("imported  pi-v1 "), "{stdout}");
    assert!(stdout.contains("(original id pi-sess-1)"), "{stdout}");
    assert!(stdout.contains("entries   4 (message 4)"), "{stdout}");
    assert!(
        stdout.contains("messages  assistant 2, tool 1, user 1 · tool calls 2"),
        "{stdout}"
    );
    assert!(
        stdout.contains("usage     input 15 · output 27 · cache read 400 · cache write 50"),
        "{stdout}"
    );

    let entries = sandbox.run_ok(&["show", &id, "--entries"]);
    let listing = text(&entries.stdout);
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(lines.len(), 4, "{listing}");
    // Line numbers, the path marker, short ids, the type, a preview.
    assert!(lines[0].trim_start().starts_with("2 * e_"), "{listing}");
    assert!(
        lines[0].contains(" message ") && lines[0].contains("user Fix the failing test."),
        "{listing}"
    );
    assert!(
        lines[1].contains("assistant calls read, bash Reading the code."),
        "{listing}"
    );
    assert!(lines[2].contains("tool result fn main()"), "{listing}");

    // The fixture's `bash` call was never answered before the closing
    // response: the check names it (issue 34), with its line.
    let check = sandbox.run(&["show", &id, "--check"]);
    assert_eq!(check.status.code(), Some(1));
    assert_eq!(
        text(&check.stdout),
        format!("{UNANSWERED_BASH}\n"),
        "{}",
        text(&check.stdout)
    );
}

/// What `soba show --check` says of `pi_session`'s unanswered `bash` call.
const UNANSWERED_BASH: &str = "line 3 (byte 539): tool call \"toolu_2\" has no result before the next response on the path (the model input answers it as interrupted)";

#[test]
fn check_reports_damage_with_line_numbers_and_exits_1() {
    let sandbox = Sandbox::new();
    let id = imported(&sandbox, &pi_session("Fix the failing test."));
    let file = sandbox.session_files().remove(0);
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap();
    // Line 6: not JSON; line 7: a torn last line.
    log.write_all(b"{\"type\": broken\n{\"type\":\"message\"")
        .unwrap();
    drop(log);
    let output = sandbox.run(&["show", &id, "--check"]);
    assert_eq!(output.status.code(), Some(1));
    let stdout = text(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(lines[0].starts_with("line 6 (byte "), "{stdout}");
    assert!(lines[0].contains("invalid JSON"), "{stdout}");
    assert!(lines[1].starts_with("line 7 (byte "), "{stdout}");
    assert!(lines[1].contains("torn last line"), "{stdout}");
    assert_eq!(lines[2], UNANSWERED_BASH, "{stdout}");
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with(&format!(
            "error: session {id} is damaged: 3 problems in {}",
            file.display()
        )),
        "{stderr}"
    );
    // The summary still works and points at --check.
    let summary = sandbox.run_ok(&["show", &id]);
    assert!(
        text(&summary.stdout)
            .contains("damage    2 problems while reading (run with --check to list them)")
    );
    // Unknown sessions name the folder and the fix.
    let missing = sandbox.run(&["show", "ffffffff"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(last_line(&text(&missing.stderr)).contains("list them with `soba sessions`"));
}

#[test]
fn a_session_dir_inside_a_symlink_loop_is_named_with_exit_1() {
    let sandbox = Sandbox::new();
    let root = sandbox.home.join("loop");
    std::fs::create_dir_all(&root).unwrap();
    std::os::unix::fs::symlink(root.join("b"), root.join("a")).unwrap();
    std::os::unix::fs::symlink(root.join("a"), root.join("b")).unwrap();
    let dir = root.join("a").join("sessions");
    let output = sandbox.run(&["--session-dir", dir.to_str().unwrap(), "sessions"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(
        last_line(&stderr),
        "hint: a symbolic link on the path loops (or links are nested too deeply): check it with `readlink -f` and give the real folder",
        "{stderr}"
    );
    assert!(stderr.contains(&dir.display().to_string()), "{stderr}");
}

#[test]
fn sessions_names_the_entries_that_are_not_session_logs_in_one_line() {
    let sandbox = Sandbox::new();
    let id = imported(&sandbox, &pi_session("Fix the failing test."));
    let dir = sandbox.sessions_dir();
    let fifo = dir.join("f\u{1b}[31m.jsonl");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let _socket = std::os::unix::net::UnixListener::bind(dir.join("s.jsonl")).unwrap();
    std::fs::create_dir(dir.join("d.jsonl")).unwrap();
    std::os::unix::fs::symlink(dir.join("nowhere"), dir.join("b.jsonl")).unwrap();
    std::os::unix::fs::symlink(dir.join("l2.jsonl"), dir.join("l1.jsonl")).unwrap();
    std::os::unix::fs::symlink(dir.join("l1.jsonl"), dir.join("l2.jsonl")).unwrap();
    let output = sandbox.run_ok(&["sessions"]);
    assert!(
        text(&output.stdout).contains(&id[..8]),
        "{}",
        text(&output.stdout)
    );
    assert_eq!(
        text(&output.stderr),
        "note: skipped 6 entries that are not session logs: b.jsonl (a broken symbolic link), d.jsonl (a folder), f\\x1b[31m.jsonl (a FIFO), l1.jsonl (a symbolic link loop), l2.jsonl (a symbolic link loop), s.jsonl (a socket)\n"
    );
    let json = sandbox.run_ok(&["sessions", "--json"]);
    let rows: Vec<Value> = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(rows.len(), 1);
}

#[test]
fn check_names_a_parent_loop() {
    let sandbox = Sandbox::new();
    let id = imported(&sandbox, &pi_session("Fix the failing test."));
    let file = sandbox.session_files().remove(0);
    let start = std::fs::metadata(&file).unwrap().len();
    // Two hand-edited messages whose parents lead to each other.
    let a = "e_0194c2d0e4c07f028000000000000a0a";
    let b = "e_0194c2d0e4c07f028000000000000b0b";
    let first = format!(
        r#"{{"type":"message","id":"{a}","parentId":"{b}","timestamp":"t","role":"user","content":[{{"type":"text","text":"one"}}]}}"#
    );
    let second = format!(
        r#"{{"type":"message","id":"{b}","parentId":"{a}","timestamp":"t","role":"assistant","content":[{{"type":"text","text":"two"}}]}}"#
    );
    let mut appended = std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap();
    writeln!(appended, "{first}\n{second}").unwrap();
    drop(appended);
    let lines = std::fs::read_to_string(&file).unwrap().lines().count();
    let output = sandbox.run(&["show", &id, "--check"]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert_eq!(
        stdout.lines().last(),
        Some(
            format!(
                "line {} (byte {start}): the parentId chain of entry {a} loops back to it ({a} → {b} → {a}), so none of these 2 entries reaches the session's root; a path through them starts where the loop is entered (fix or remove the parentId that closes it)",
                lines - 1
            )
            .as_str()
        ),
        "{stdout}"
    );
    assert_eq!(
        stdout.matches("loops back").count(),
        1,
        "one problem per loop: {stdout}"
    );
}

#[test]
fn check_tells_what_resume_does_with_a_damaged_capsule() {
    let sandbox = Sandbox::new();
    let id = imported(&sandbox, &pi_session("Fix the failing test."));
    let file = sandbox.session_files().remove(0);
    let log = soba_store::read_log(&file).unwrap();
    let leaf = log.leaf().unwrap().clone();
    let n_path = log.path().len();
    // A capsule a newer writer wrote (an unknown trigger) whose state is
    // damaged, then a message under it.
    let capsule = format!(
        r#"{{"type":"capsule","id":"ck_0194c2d0e4c07f018000000000000bad","parentId":"{leaf}","timestamp":"t","trigger":"idle_gap","quality":"full","firstKeptEntryId":null,"tokensBefore":-5000,"tokensAfter":10,"summarizer":"deterministic","previousCapsuleId":null,"state":7,"narrative":{{}},"local":{{}},"markdown":"m"}}"#
    );
    let message = r#"{"type":"message","id":"e_0194c2d0e4c07f028000000000000bad","parentId":"ck_0194c2d0e4c07f018000000000000bad","timestamp":"t","role":"user","content":[{"type":"text","text":"go on"}]}"#;
    let mut appended = std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap();
    writeln!(appended, "{capsule}\n{message}").unwrap();
    drop(appended);
    let output = sandbox.run(&["show", &id, "--check"]);
    assert_eq!(output.status.code(), Some(1));
    let stdout = text(&output.stdout);
    let line = n_path as u64 + 2;
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        vec![
            format!(
                "line {line} (byte {}): capsule entry ck_0194c2d0e4c07f018000000000000bad is damaged (`state`: invalid type: integer `7`, expected struct CapsuleStateRecord); kept in the tree as a placeholder and not used as a capsule: on a path through it, the entries before it stay in the model input",
                std::fs::metadata(&file).unwrap().len()
                    - capsule.len() as u64
                    - message.len() as u64
                    - 2
            ),
            UNANSWERED_BASH.to_owned()
        ],
        "{stdout}"
    );
    let stderr = text(&output.stderr);
    assert_eq!(
        stderr.lines().skip(1).collect::<Vec<_>>(),
        vec![
            "hint: 1 damaged entry is kept as a placeholder: the path through it stays connected, but its content is left out of the model input (1 on the current path)"
        ],
        "{stderr}"
    );
    assert!(!stderr.contains("nothing is lost"), "{stderr}");
    // Resume holds every entry: the path before the capsule, the
    // placeholder and the message after it.
    let resumed = soba_store::resume(&file).unwrap();
    assert_eq!(resumed.stretch.len(), n_path + 2);
}

#[test]
fn stats_aggregates_flight_records() {
    let sandbox = Sandbox::new();
    let none = sandbox.run_ok(&["stats"]);
    assert!(text(&none.stdout).starts_with("no flight records in"));
    let id = imported(&sandbox, &long_pi_session(6, 600, "none"));
    let compact = sandbox.run_ok(&[
        "compact",
        "--session",
        &id,
        "--model",
        "anthropic/claude-sonnet-4-5",
        "--set",
        "compaction.keepRecentTokens=256",
    ]);
    let result = text(&compact.stdout);
    assert!(result.starts_with("Compacted (user): "), "{result}");
    let output = sandbox.run_ok(&["stats"]);
    let stdout = text(&output.stdout);
    assert!(
        stdout.starts_with("1 flight record in 1 session\n"),
        "{stdout}"
    );
    let row: Vec<&str> = stdout
        .lines()
        .find(|line| line.starts_with("user "))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(row, ["user", "1", "0", "0", "0", "0"]);
    assert!(
        stdout.contains("degraded: 0 of 1 capsules (0.0%)"),
        "{stdout}"
    );
    let json = sandbox.run_ok(&["stats", "--json", "--session", &id]);
    let stats: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(stats["byTrigger"]["user"]["completed"], Value::from(1));
    assert_eq!(stats["durationMs"]["n"], Value::from(1));
    let reclaimed = stats["reclaimed"]["compaction"].as_u64().unwrap();
    assert!(reclaimed > 1_000, "{stats}");
}

/// Issue 36 item 9: `soba show` and `soba budget` with no argument use the
/// most recent session; `soba budget` with no session uses the configured
/// model; `soba capsule` alone lists.
#[test]
fn show_budget_and_capsule_need_no_argument() {
    let sandbox = Sandbox::new();
    sandbox.write_user_config(&serde_json::json!({"model": "anthropic/claude-sonnet-4-5"}));
    let configured = text(&sandbox.run_ok(&["budget"]).stdout);
    assert!(
        configured.contains("anthropic/claude-sonnet-4-5"),
        "{configured}"
    );
    let id = imported(&sandbox, &pi_session("Fix the failing test."));
    let show = text(&sandbox.run_ok(&["show"]).stdout);
    let named = text(&sandbox.run_ok(&["show", &id]).stdout);
    assert_eq!(show, named);
    let budget = text(&sandbox.run_ok(&["budget"]).stdout);
    let with_session = text(&sandbox.run_ok(&["budget", "--session", &id]).stdout);
    assert_eq!(budget, with_session);
    let capsule = sandbox.run_ok(&["capsule"]);
    let list = sandbox.run_ok(&["capsule", "list"]);
    assert_eq!(text(&capsule.stdout), text(&list.stdout));
}

/// A walk found `soba sessions` print an 8-character id that `soba -r`
/// refused as matching 2 sessions: the other one was unused, so hidden.
/// Short ids tell every session of the folder apart, hidden ones too.
#[test]
fn short_ids_are_unique_among_hidden_sessions_too() {
    let sandbox = Sandbox::new();
    let id = imported(&sandbox, &pi_session("Fix the failing test."));
    let file = &sandbox.session_files()[0];
    let header = std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_owned();
    // An unused session (a header only) whose id shares 10 characters.
    let twin: String = id[..10]
        .chars()
        .chain(id[10..].chars().map(|c| match c {
            '-' => '-',
            'f' => 'e',
            _ => 'f',
        }))
        .collect();
    assert_ne!(twin, id);
    std::fs::write(
        file.with_file_name(format!("{twin}.jsonl")),
        header.replace(&id, &twin) + "\n",
    )
    .unwrap();
    let stdout = text(&sandbox.run_ok(&["sessions"]).stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "one listed, one hidden: {stdout}");
    let short = lines[1].split_whitespace().next().unwrap();
    assert!(short.len() > 10 && id.starts_with(short), "{stdout}");
    let found = soba_store::reader::find_session(sandbox.sessions_dir(), short)
        .expect("the short id names one session");
    assert_eq!(found.path, *file);
}
