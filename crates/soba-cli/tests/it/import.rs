//! `soba import` (SPEC §3.4): the `--json` report against the figures of
//! `traces/SOURCES.md` (skipped when the traces are absent), synthetic
//! files, folders, `--dry-run`, `--out` and re-imports.

use serde_json::{Value, json};

use crate::support::{Sandbox, long_pi_session, pi_session, raw_dir, text};

fn import_json(sandbox: &Sandbox, args: &[&str]) -> Vec<Value> {
    let output = sandbox.run_ok(&[&["import", "--json"], args].concat());
    match serde_json::from_slice(&output.stdout).expect("--json prints JSON") {
        Value::Array(items) => items,
        other => panic!("expected an array, got {other}"),
    }
}

/// Checks the counts SOURCES.md gives, plus the keys SPEC §3.4 requires.
fn check_counts(report: &Value, expected: &Value) {
    for key in [
        "source",
        "format",
        "messages",
        "toolCalls",
        "toolResults",
        "unpairedToolCalls",
        "usage",
        "peakPromptTokens",
        "compactions",
        "diagnostics",
        "entries",
        "usageRaw",
    ] {
        assert!(report.get(key).is_some(), "missing {key} in {report}");
    }
    for usage_key in ["input", "output", "cacheRead", "cacheWrite", "reasoning"] {
        assert!(
            report["usage"].get(usage_key).is_some(),
            "missing usage.{usage_key}"
        );
    }
    for (key, value) in expected.as_object().unwrap() {
        let got = report
            .pointer(key)
            .unwrap_or_else(|| panic!("missing {key} in {report}"));
        assert_eq!(got, value, "{key}");
    }
}

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn pi_large_session_matches_sources_md() {
    let Some(raw) = raw_dir() else { return };
    let sandbox = Sandbox::new();
    let file = raw.join("pi-mono/large-session.jsonl");
    let reports = import_json(&sandbox, &[file.to_str().unwrap(), "--dry-run"]);
    assert_eq!(reports.len(), 1);
    check_counts(
        &reports[0],
        &json!({
            "/format": "pi-v1",
            "/messages": 914,
            "/toolCalls": 391,
            "/toolResults": 373,
            "/unpairedToolCalls": 18,
            "/usageRaw/input": 1049,
            "/usageRaw/output": 83156,
            "/usageRaw/cacheRead": 43229469,
            "/usageRaw/cacheWrite": 4296232,
            "/usage/input": 1049,
            "/usage/cacheRead": 43229469,
            "/peakPromptTokens": 177604,
            "/compactions": 0,
            "/sessionId": null,
        }),
    );
    assert!(
        sandbox.session_files().is_empty(),
        "--dry-run wrote a session"
    );
}

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn codex_export_matches_sources_md() {
    let Some(raw) = raw_dir() else { return };
    let sandbox = Sandbox::new();
    let file = raw.join("codex-converted/trajectory-1.json");
    let reports = import_json(&sandbox, &[file.to_str().unwrap()]);
    check_counts(
        &reports[0],
        &json!({
            "/format": "codex-messages-meta",
            "/messages": 905,
            "/toolCalls": 411,
            "/toolResults": 410,
            "/unpairedToolCalls": 1,
            "/usageRaw/total_token_usage/input_tokens": 40399924,
            "/usageRaw/total_token_usage/cached_input_tokens": 26484096,
            "/usageRaw/total_token_usage/output_tokens": 195227,
            "/usageRaw/total_token_usage/reasoning_output_tokens": 57259,
            "/usageRaw/model_context_window": 258400,
            "/usage/input": 40399924 - 26484096,
            "/usage/cacheRead": 26484096,
            "/usage/reasoning": 57259,
            "/peakPromptTokens": 216116,
        }),
    );
    // The session was written; the check names its one unpaired call,
    // which the next response followed (issue 34).
    let files = sandbox.session_files();
    assert_eq!(files.len(), 1);
    let written = reports[0]["path"].as_str().unwrap();
    assert_eq!(files[0].to_str().unwrap(), written);
    let id = reports[0]["sessionId"].as_str().unwrap();
    let check = sandbox.run(&["show", id, "--check"]);
    assert_eq!(check.status.code(), Some(1));
    let problems: Vec<String> = text(&check.stdout).lines().map(str::to_owned).collect();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].ends_with(
            "tool call \"call_zdLj8bpTVEGrszafqMlH3SvR\" has no result before the next response on the path (the model input answers it as interrupted)"
        ),
        "{problems:?}"
    );
    // `soba show` sums the usage on the stored messages: the import's
    // storedUsage. Two interrupted inferences left no usage on a message,
    // so the source's cumulative total is higher.
    let stored = &reports[0]["storedUsage"];
    assert_eq!(stored["input"], 13_494_675);
    assert_eq!(stored["output"], 191_927);
    let show = text(&sandbox.run_ok(&["show", id]).stdout);
    assert!(
        show.contains("usage     input 13,494,675 · output 191,927 · cache read 26,484,096"),
        "{show}"
    );
    let plain = text(&sandbox.run_ok(&["import", file.to_str().unwrap()]).stdout);
    assert!(
        plain.contains("  usage: input 13,494,675 · output 191,927"),
        "{plain}"
    );
    assert!(
        plain.contains("  the source's own total: input 13,915,828 · output 195,227"),
        "{plain}"
    );
}

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn pi_compactions_are_counted() {
    let Some(raw) = raw_dir() else { return };
    let sandbox = Sandbox::new();
    let file = raw.join("pi-mono/before-compaction.jsonl");
    let reports = import_json(&sandbox, &[file.to_str().unwrap(), "--dry-run"]);
    check_counts(
        &reports[0],
        &json!({"/messages": 990, "/toolCalls": 454, "/toolResults": 448, "/compactions": 2, "/peakPromptTokens": 184915}),
    );
}

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn the_whole_traces_folder_imports() {
    let Some(raw) = raw_dir() else { return };
    let sandbox = Sandbox::new();
    let out = sandbox.ws.join("imported");
    let reports = import_json(
        &sandbox,
        &[raw.to_str().unwrap(), "--out", out.to_str().unwrap()],
    );
    // Ten files (SOURCES.md #1–#10); the OpenHands file holds three
    // instances.
    assert_eq!(reports.len(), 12);
    let written = std::fs::read_dir(&out)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "jsonl")
        })
        .count();
    assert_eq!(written, 12);
    assert!(sandbox.session_files().is_empty(), "--out was not honoured");
}

#[test]
fn a_synthetic_pi_session_gives_exact_counts() {
    let sandbox = Sandbox::new();
    let file = sandbox.write("traces/s.jsonl", &pi_session("Fix the failing test."));
    let reports = import_json(&sandbox, &[file.to_str().unwrap()]);
    assert_eq!(reports.len(), 1);
    let report = &reports[0];
    check_counts(
        report,
        &json!({
            "/format": "pi-v1",
            "/originalId": "pi-sess-1",
            "/messages": 4,
            "/entries": 4,
            "/toolCalls": 2,
            "/toolResults": 1,
            "/unpairedToolCalls": 1,
            "/usage/input": 15,
            "/usage/output": 27,
            "/usage/cacheRead": 400,
            "/usage/cacheWrite": 50,
            "/usage/reasoning": 0,
            "/peakPromptTokens": 305,
            "/compactions": 0,
            "/alreadyImported": false,
        }),
    );
    let diagnostics = report["diagnostics"].as_array().unwrap();
    assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
    assert!(
        diagnostics[0].as_str().unwrap().contains("line 4"),
        "{diagnostics:?}"
    );

    // The header keeps the original ids.
    let files = sandbox.session_files();
    assert_eq!(files.len(), 1);
    let header: Value = serde_json::from_str(
        std::fs::read_to_string(&files[0])
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(header["schemaVersion"], json!(1));
    assert_eq!(header["cwd"], json!("/work/app"));
    assert_eq!(header["importedFrom"]["format"], json!("pi-v1"));
    assert_eq!(header["importedFrom"]["originalId"], json!("pi-sess-1"));
    assert_eq!(
        header["importedFrom"]["path"],
        json!(std::fs::canonicalize(&file).unwrap().display().to_string())
    );
    // Every message is written with its count, so a resume never
    // tokenizes the history again: the task's is its text plus the
    // message overhead in the vocabulary of the model it resumes on.
    let lines: Vec<Value> = std::fs::read_to_string(&files[0])
        .unwrap()
        .lines()
        .skip(1)
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let messages: Vec<&Value> = lines.iter().filter(|l| l["type"] == "message").collect();
    assert_eq!(messages.len(), 4);
    for message in &messages {
        assert_eq!(
            message["tokens"]["encoding"],
            json!("o200k_base"),
            "{message}"
        );
        assert!(message["tokens"]["n"].as_u64().unwrap() > 4, "{message}");
    }
    use soba_core::TokenCounter;
    let task = soba_core::tokens::BpeCounter::new(soba_core::Encoding::O200kBase)
        .count_text("Fix the failing test.")
        .n
        .get();
    assert_eq!(messages[0]["tokens"]["n"], json!(task + 4));

    // Importing again writes nothing new.
    let again = import_json(&sandbox, &[file.to_str().unwrap()]);
    assert_eq!(again[0]["alreadyImported"], json!(true));
    assert_eq!(again[0]["sessionId"], report["sessionId"]);
    assert_eq!(sandbox.session_files().len(), 1);
}

#[test]
fn plain_output_reports_every_figure() {
    let sandbox = Sandbox::new();
    let file = sandbox.write("s.jsonl", &pi_session("Fix the failing test."));
    let output = sandbox.run_ok(&["import", file.to_str().unwrap(), "--dry-run"]);
    let stdout = text(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0],
        format!(
            "{} (pi-v1, pi-sess-1): dry run, not written",
            file.display()
        )
    );
    assert_eq!(
        lines[1],
        "  messages 4 · entries 4 · tool calls 2 · results 1 · unpaired calls 1"
    );
    assert_eq!(
        lines[2],
        "  usage: input 15 · output 27 · cache read 400 · cache write 50 · reasoning 0"
    );
    assert_eq!(
        lines[3],
        "  peak prompt 305 tokens · compactions 0 · inferences 2"
    );
    assert_eq!(lines[4], "  diagnostics: 1");
    assert!(lines[5].contains("line 4"), "{stdout}");
    assert_eq!(lines.len(), 6, "{stdout}");
}

#[test]
fn unknown_files_are_errors_and_skipped_inside_folders() {
    let sandbox = Sandbox::new();
    let unknown = sandbox.write("in/notes.txt", "just some notes\n");
    let output = sandbox.run(&["import", unknown.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with(&format!(
            "error: {} is not a transcript soba can import; supported formats: pi-v1, pi-v3",
            unknown.display()
        )),
        "{stderr}"
    );
    // In a folder: skipped with a diagnostic, the rest imported.
    sandbox.write("in/deeper/s.jsonl", &pi_session("hello"));
    let dir = sandbox.ws.join("in");
    let output = sandbox.run_ok(&["import", dir.to_str().unwrap(), "--json"]);
    let reports: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(reports.len(), 1);
    assert!(text(&output.stderr).contains("notes.txt: skipped:"));
    // A folder with nothing importable is an error.
    let empty = sandbox.ws.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let output = sandbox.run(&["import", empty.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    assert!(text(&output.stderr).starts_with("error: no importable transcript in"));
    // A missing path names itself.
    let output = sandbox.run(&["import", "nope.jsonl"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(text(&output.stderr).starts_with("error: cannot read nope.jsonl"));
}

#[test]
fn a_folder_with_a_file_that_fails_exits_1_after_importing_the_rest() {
    let sandbox = Sandbox::new();
    sandbox.write("in/a.jsonl", &pi_session("hello"));
    // A Gemini CLI recording cut off as it was written: recognised, not
    // importable.
    sandbox.write(
        "in/b.json",
        r#"{"sessionId":"g-1","projectHash":"p","startTime":"2025-02-01T10:00:00.000Z","messages":[{"type":"user","content":"cut"#,
    );
    let dir = sandbox.ws.join("in");
    let out = sandbox.ws.join("out");
    let output = sandbox.run(&[
        "import",
        dir.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let reports: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(reports.len(), 1, "the good file's session is reported");
    assert_eq!(session_logs(&out), 1, "and written");
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("b.json: ")
            && stderr.contains("error: 1 of the files could not be imported (see above)")
            && stderr.contains("hint: fix what each line above says"),
        "{stderr}"
    );
}

#[test]
fn an_out_folder_that_is_a_file_exits_1_with_what_to_do() {
    let sandbox = Sandbox::new();
    let file = sandbox.write("s.jsonl", &pi_session("hello"));
    let blocker = sandbox.write("out", "a file");
    let output = sandbox.run(&[
        "import",
        file.to_str().unwrap(),
        "--out",
        blocker.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stderr),
        format!(
            "error: {} is not a folder, and --out takes a folder\n\
             hint: pass the folder to write the sessions into (it is created when missing)\n",
            blocker.display()
        )
    );
    assert_eq!(std::fs::read(&blocker).unwrap(), b"a file");
}

#[test]
fn an_import_that_cannot_be_written_exits_1_with_what_to_do_and_leaves_nothing() {
    let sandbox = Sandbox::new();
    let file = sandbox.write("s.jsonl", &pi_session("Fix the failing test."));
    // A file where the sessions folder should be: the environment, not a bug.
    let blocker = sandbox.write("blocker", "a file");
    let out = blocker.join("sessions");
    let output = sandbox.run(&[
        "import",
        file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with(&format!(
            "error: session storage failed: cannot create the sessions directory {}: Not a directory",
            out.display()
        )) && stderr.contains(
            "\nhint: a file is where a folder should be, or a folder where a file should be: check the path"
        ) && stderr.contains("was not imported; nothing was left behind"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&blocker).unwrap(), b"a file");
    // Imported where it can be written: one complete session, no leftovers.
    let good = sandbox.ws.join("out");
    sandbox.run_ok(&[
        "import",
        file.to_str().unwrap(),
        "--out",
        good.to_str().unwrap(),
    ]);
    let names: Vec<String> = std::fs::read_dir(&good)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != ".import.lock")
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(
        names[0].ends_with(".jsonl") && !names[0].starts_with('.'),
        "{names:?}"
    );
}

/// A Claude Code session with one result recorded directly before its call
/// (moved after it), one whose call is not in the file and one recorded
/// long before its call (both kept as observation messages).
fn claude_pairing_session() -> String {
    let line = |uuid: &str, parent: &str, kind: &str, message: &str| {
        format!(
            r#"{{"type":"{kind}","uuid":"{uuid}","parentUuid":{parent},"sessionId":"CC","cwd":"/w","timestamp":"2025-06-01T10:00:00Z","message":{message}}}"#
        )
    };
    let result = |id: &str| {
        format!(
            r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"{id}","content":"out {id}"}}]}}"#
        )
    };
    let call = |msg: &str, id: &str| {
        format!(
            r#"{{"id":"{msg}","model":"m","role":"assistant","content":[{{"type":"tool_use","id":"{id}","name":"Bash","input":{{"command":"ls"}}}}],"usage":{{"input_tokens":1,"output_tokens":1}}}}"#
        )
    };
    [
        line("u1", "null", "user", r#"{"role":"user","content":"start"}"#),
        line("r0", r#""u1""#, "user", &result("late")),
        line(
            "u2",
            r#""r0""#,
            "user",
            r#"{"role":"user","content":"go on"}"#,
        ),
        line("r1", r#""u2""#, "user", &result("t1")),
        line("a1", r#""r1""#, "assistant", &call("m1", "t1")),
        line("r2", r#""a1""#, "user", &result("gone")),
        line("a2", r#""r2""#, "assistant", &call("m2", "late")),
    ]
    .join("\n")
        + "\n"
}

#[test]
fn json_reports_orphan_and_early_results_and_the_session_checks_clean() {
    let sandbox = Sandbox::new();
    let file = sandbox.write("cc.jsonl", &claude_pairing_session());
    let reports = import_json(&sandbox, &[file.to_str().unwrap()]);
    assert_eq!(reports.len(), 1);
    let report = &reports[0];
    check_counts(
        report,
        &json!({
            "/format": "claude-code",
            "/toolCalls": 2,
            "/toolResults": 1,
            "/unpairedToolCalls": 1,
            "/orphanToolResults": 1,
            "/resultsBeforeCalls": 1,
            "/reorderedToolResults": 1,
        }),
    );
    let diagnostics: Vec<&str> = report["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    assert!(
        diagnostics
            .iter()
            .any(|d| d.contains("call \"gone\" has no call in the transcript")),
        "{diagnostics:?}"
    );
    assert!(
        diagnostics
            .iter()
            .any(|d| d.contains("call \"late\" is recorded before its call")),
        "{diagnostics:?}"
    );
    let id = report["sessionId"].as_str().unwrap();
    let output = sandbox.run(&["show", id, "--check"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stdout));
    // The plain report names the three figures.
    let output = sandbox.run_ok(&["import", file.to_str().unwrap(), "--dry-run"]);
    assert!(
        text(&output.stdout).contains(
            "  results without a call 1 · results before their call 1 · moved after their call 1\n"
        ),
        "{}",
        text(&output.stdout)
    );
}

/// A history over the window of the model it resumes on is named at
/// import, with what the first resume does; one within it is not.
#[test]
fn an_import_over_the_resume_window_says_the_first_resume_compacts() {
    let sandbox = Sandbox::new();
    sandbox.write_user_config(&json!({
        "models": {"anthropic/claude-sonnet-4-5": {"contextWindow": 16000, "maxOutputTokens": 2000}},
        "compaction": {"summarizer": {"maxChunks": 5}}
    }));
    let long = sandbox.write("long.jsonl", &long_pi_session(40, 200, "s3cret"));
    let output = sandbox.run_ok(&["import", long.to_str().unwrap(), "--dry-run"]);
    let stdout = text(&output.stdout);
    let line = stdout
        .lines()
        .find(|line| line.starts_with("  first resume: "))
        .unwrap_or_else(|| panic!("no first-resume line: {stdout}"));
    assert!(
        line.contains("tokens of history, over anthropic/claude-sonnet-4-5's 16,000-token window"),
        "{line}"
    );
    assert!(
        line.contains("compaction.summarizer.maxChunks 5 calls"),
        "{line}"
    );
    let report = &import_json(&sandbox, &[long.to_str().unwrap(), "--dry-run"])[0];
    let resume = &report["firstResume"];
    assert_eq!(resume["contextWindow"], 16000);
    assert_eq!(resume["compactsFirst"], true);
    assert!(resume["liveTokens"].as_u64().unwrap() > 16_000, "{resume}");

    let short = sandbox.write("short.jsonl", &pi_session("Fix the failing test."));
    let output = sandbox.run_ok(&["import", short.to_str().unwrap(), "--dry-run"]);
    assert!(!text(&output.stdout).contains("first resume"));
    let report = &import_json(&sandbox, &[short.to_str().unwrap(), "--dry-run"])[0];
    assert_eq!(report["firstResume"]["compactsFirst"], false);
}

#[test]
fn imports_of_one_file_at_once_write_it_once() {
    let sandbox = Sandbox::new();
    let file = sandbox.write("s.jsonl", &crate::support::long_pi_session(400, 50, "none"));
    let children: Vec<_> = (0..4)
        .map(|_| {
            sandbox
                .command(&["import", file.to_str().unwrap()])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    }
    assert_eq!(
        sandbox.session_files().len(),
        1,
        "{:?}",
        sandbox.session_files()
    );
}

/// Counts the session logs of a folder (not its `.import.lock`).
fn session_logs(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|entry| {
            entry
                .as_ref()
                .is_ok_and(|entry| entry.path().extension().is_some_and(|ext| ext == "jsonl"))
        })
        .count()
}

/// Issue 34: a source session that has grown since it was imported (the
/// agent went on with it) is imported again as a new session, saying from
/// which; one that has not grown is still skipped, and the earlier import
/// is kept.
#[test]
fn a_source_that_has_grown_is_imported_again_and_the_earlier_import_kept() {
    let sandbox = Sandbox::new();
    let short = crate::support::long_pi_session(4, 50, "none");
    let file = sandbox.write("s.jsonl", &short);
    let first = &import_json(&sandbox, &[file.to_str().unwrap()])[0];
    let first_id = first["sessionId"].as_str().unwrap().to_owned();
    let again = &import_json(&sandbox, &[file.to_str().unwrap()])[0];
    assert_eq!(again["alreadyImported"], true);
    assert_eq!(again["sessionId"], first_id.as_str());

    // The agent goes on: the same session, with more turns.
    let longer = crate::support::long_pi_session(8, 50, "none");
    assert!(longer.starts_with(short.lines().next().unwrap()));
    std::fs::write(&file, &longer).unwrap();
    let output = sandbox.run_ok(&["import", file.to_str().unwrap()]);
    let stdout = text(&output.stdout);
    assert!(stdout.contains("imported again as "), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "it has grown since it was imported as {first_id} ("
        )),
        "{stdout}"
    );
    assert!(stdout.contains("1 of 1 sessions written"), "{stdout}");
    assert_eq!(sandbox.session_files().len(), 2);
    // The newest import is the one matched next time.
    let third = &import_json(&sandbox, &[file.to_str().unwrap()])[0];
    assert_eq!(third["alreadyImported"], true);
    assert_ne!(third["sessionId"], first_id.as_str());
    assert_eq!(sandbox.session_files().len(), 2);
}
