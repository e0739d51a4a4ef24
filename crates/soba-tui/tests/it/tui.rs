//! The interactive agent's TUI: snapshots of its main frames drawn on a
//! fixed-size `TestBackend` (rendering is a pure function of `AppState`)
//! and the `/budget` text of a real session. The end-to-end run of the
//! real binary in tmux is soba-cli's (`crates/soba-cli/tests/it/tui.rs`).

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use soba_tui::preview::{self, DiffKind, DiffLine};
use soba_tui::render;
use soba_tui::state::{
    Activity, AppState, ApprovalView, Header, HistoryItem, Overlay, Picker, PickerItem,
    PickerPurpose, ResultLine, RewindPlan, Sidebar, ToolOutput,
};

/// Draws `state` on a `width × height` test terminal and returns the
/// screen as text, one line per row, trailing blanks trimmed.
fn frame(state: &AppState, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|f| render::render(f, state)).unwrap();
    let buffer = terminal.backend().buffer();
    let mut screen = String::new();
    for y in 0..height {
        let mut row = String::new();
        for x in 0..width {
            row.push_str(buffer[(x, y)].symbol());
        }
        screen.push_str(row.trim_end());
        screen.push('\n');
    }
    normalize(&screen)
}

/// Replaces volatile values (entry and session ids) so snapshots compare
/// across runs.
fn normalize(text: &str) -> String {
    let ids = regex::Regex::new(r"\b(ck|e)_[0-9a-f]{4,32}\b").unwrap();
    let text = ids.replace_all(text, "${1}_XXXX");
    let session = regex::Regex::new(r"session [0-9a-f]{8}").unwrap();
    session.replace_all(&text, "session SSSSSSSS").into_owned()
}

/// A session in the middle of work: a failing test run, a compaction.
fn working() -> AppState {
    AppState {
        header: Header {
            model: "anthropic/claude-sonnet-4-5".into(),
            session: "0190f3a2".into(),
        },
        history: vec![
            HistoryItem::Event("model anthropic/claude-sonnet-4-5".into()),
            HistoryItem::User("The parser drops the last token of a line; fix it and run the tests.".into()),
            HistoryItem::Assistant("I'll run the tests first to see the failure.".into()),
            HistoryItem::Tool {
                line: "bash: cargo test -p parser (exit 1, output 2.3 KiB)".into(),
                is_error: true,
                output: None,
                diff: Vec::new(),
            },
            HistoryItem::Tool {
                line: "read_file: src/lexer.rs (output 14.2 KiB)".into(),
                is_error: false,
                output: None,
                diff: Vec::new(),
            },
            HistoryItem::Tool {
                line: "edit_file: src/lexer.rs (output 41 B)".into(),
                is_error: false,
                output: None,
                diff: Vec::new(),
            },
            HistoryItem::Tool {
                line: "bash: cargo test -p parser (exit 0, output 1.1 KiB)".into(),
                is_error: false,
                output: None,
                diff: Vec::new(),
            },
            HistoryItem::Assistant(
                "Fixed: `next_token` stopped one byte early at end of input. All 48 parser tests pass now.".into(),
            ),
            HistoryItem::Event("capsule ck_7f3a (auto_threshold): 41,210 → 23,480 tokens".into()),
        ],
        sidebar: Sidebar {
            effective: 23_480,
            source: "provider_usage".into(),
            hard_limit: 159_808,
            soft_limit: 127_846,
            auto_limit: 80_000,
            hygiene_limit: 50_000,
            auto_compact: true,
            last_compaction: Some("ck_7f3a auto_threshold: 41,210 → 23,480 (−43%)".into()),
            ..Sidebar::default()
        },
        ..AppState::default()
    }
}

fn running() -> AppState {
    let mut state = working();
    state.activity = Activity::Turn;
    state.history.push(HistoryItem::User(
        "Now add a regression test for the end-of-input case.".into(),
    ));
    state
}

#[test]
fn idle_frame() {
    let mut state = working();
    state.input.set("also update the changelog");
    insta::assert_snapshot!("idle", frame(&state, 110, 30));
}

#[test]
fn streaming_frame_with_queued_input() {
    let mut state = running();
    state.streaming = "I'll add `lexes_last_token_at_eof` next to the other lexer tests and".into();
    state.queue.push_back("then bump the crate version".into());
    state.sidebar.effective = 25_102;
    insta::assert_snapshot!("streaming", frame(&state, 110, 30));
}

#[test]
fn barrier_frame_at_a_given_percentage() {
    let mut state = running();
    state.sidebar.effective = 81_377;
    state.barrier = Some((82, false));
    state.queue.push_back("and keep the old API".into());
    let screen = frame(&state, 110, 30);
    assert!(
        screen.contains(" Compacting context before response · 82%\n"),
        "{screen}"
    );
    insta::assert_snapshot!("barrier", screen);
}

#[test]
fn idle_compact_barrier_says_no_response_follows() {
    let mut state = working();
    state.activity = Activity::Compact;
    state.barrier = Some((40, true));
    let screen = frame(&state, 110, 30);
    assert!(screen.contains(" Compacting context · 40%\n"), "{screen}");
}

#[test]
fn result_line_frame() {
    let mut state = working();
    state.result_line = Some(ResultLine {
        text: "Compacted (auto_threshold): 41,210 → 23,480 tokens (−43%) · ck_7f3a".into(),
        warn: false,
        capsule: None,
    });
    let screen = frame(&state, 110, 30);
    assert_eq!(
        screen.matches("Compacted (auto_threshold)").count(),
        1,
        "exactly one result line: {screen}"
    );
    insta::assert_snapshot!("result_line", screen);
}

#[test]
fn degraded_result_frame() {
    let mut state = working();
    state.sidebar.last_compaction =
        Some("ck_9b21 hard_limit: 170,004 → 21,300 (−87%) · fallback used".into());
    state.result_line = Some(ResultLine {
        text: "Compacted (hard_limit): 170,004 → 21,300 tokens (−87%) · ck_9b21 · fallback used"
            .into(),
        warn: true,
        capsule: None,
    });
    let screen = frame(&state, 110, 30);
    assert!(screen.contains("· fallback used\n"), "{screen}");
    insta::assert_snapshot!("degraded_result", screen);
}

#[test]
fn approval_prompt_frame() {
    let mut state = running();
    state.overlay = Some(Overlay::Approval(ApprovalView {
        tool: "bash".into(),
        summary: "cargo test -p parser && cargo fmt --check".into(),
        scope: "bash commands starting with `cargo` this session".into(),
        preview: Vec::new(),
    }));
    insta::assert_snapshot!("approval", frame(&state, 110, 30));
}

/// While the approval box asks about a call, its line says it waits for
/// the answer, not that it runs.
#[test]
fn a_call_waiting_for_approval_is_not_shown_as_running() {
    let mut state = running();
    state.history.push(HistoryItem::Tool {
        line: "bash: ls (running…)".into(),
        is_error: false,
        output: None,
        diff: Vec::new(),
    });
    let before = frame(&state, 110, 30);
    assert!(before.contains("bash: ls (running…)"), "{before}");
    state.overlay = Some(Overlay::Approval(ApprovalView {
        tool: "bash".into(),
        summary: "ls".into(),
        scope: "bash commands starting with `ls` this session".into(),
        preview: Vec::new(),
    }));
    let asking = frame(&state, 110, 60);
    assert!(
        asking.contains("bash: ls (waiting for your answer)"),
        "{asking}"
    );
    assert!(!asking.contains("(running…)"), "{asking}");
}

/// A command padded with blank lines cannot push its end, or the keys,
/// out of the box: blank runs fold and the last lines stay.
#[test]
fn a_long_command_keeps_its_end_and_the_keys_in_view() {
    let mut state = running();
    let mut command = "echo safe".to_owned();
    command.push_str(&"\n".repeat(60));
    command.push_str("touch PWNED_HIDDEN");
    for n in 0..40 {
        command.push_str(&format!("\necho line {n}"));
    }
    command.push_str("\nrm -rf ./build");
    state.overlay = Some(Overlay::Approval(ApprovalView {
        tool: "bash".into(),
        summary: command,
        scope: "bash commands starting with `echo` this session".into(),
        preview: Vec::new(),
    }));
    let screen = frame(&state, 110, 30);
    for shown in [
        "echo safe",
        "⋯ 59 blank lines",
        "touch PWNED_HIDDEN",
        "more lines",
        "rm -rf ./build",
        "y run once",
        "n deny",
    ] {
        assert!(screen.contains(shown), "{shown}:\n{screen}");
    }
}

#[test]
fn rewind_confirmation_frame() {
    let mut state = working();
    state.overlay = Some(Overlay::ConfirmRewind(RewindPlan {
        leaf: "e_0190f3a2b4c577f3a9d1000000000001".into(),
        restore_input: Some(
            "The parser drops the last token of a line; fix it and run the tests.".into(),
        ),
        lines: vec![
            "Rewind to before your message \"The parser drops the last token of a line; fix…\"."
                .into(),
            "Files modified after it (they stay as they are on disk): src/lexer.rs".into(),
            "Estimated context after: 9,412 tokens (now 23,480).".into(),
        ],
    }));
    insta::assert_snapshot!("rewind_confirmation", frame(&state, 110, 30));
}

#[test]
fn narrow_terminal_hides_the_sidebar() {
    let mut state = running();
    state.streaming = "Adding the test now".into();
    state.barrier = None;
    let screen = frame(&state, 60, 24);
    assert!(!screen.contains(" context "), "{screen}");
    assert!(
        screen.contains("23,480 / 159,808"),
        "context figure moves to the title: {screen}"
    );
    insta::assert_snapshot!("narrow", screen);
    // Degrades without panicking down to tiny sizes.
    for (width, height) in [(30, 8), (12, 6), (9, 5), (1, 1)] {
        frame(&state, width, height);
    }
}

/// `/budget` on a real session of a 200,000-token model with 32,000 of
/// output prints SPEC §4.3's figures for that row.
/// Tool output, model text and a model id with terminal escapes are drawn
/// visibly escaped; no cell holds a control, bidi or format character.
#[test]
fn escapes_in_tool_output_are_drawn_escaped() {
    let hostile = "\x1b]52;c;aGk=\x07\x1b[2J\x1b]0;pwned\x07\u{9b}31m\u{202e}evil";
    let mut state = working();
    state.header.model = format!("m{hostile}");
    state.history = vec![
        HistoryItem::Tool {
            line: format!("bash: cat {hostile}"),
            is_error: false,
            output: None,
            diff: Vec::new(),
        },
        HistoryItem::Assistant(format!("out {hostile}\r\nnext")),
    ];
    state.input.set("paste\x1b[2J");
    let mut terminal = Terminal::new(TestBackend::new(100, 16)).unwrap();
    terminal.draw(|f| render::render(f, &state)).unwrap();
    for cell in &terminal.backend().buffer().content {
        assert!(
            !cell.symbol().chars().any(|ch| ch.is_control()
                || matches!(ch, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')),
            "{:?}",
            cell.symbol()
        );
    }
    let screen = frame(&state, 100, 16);
    assert!(
        screen.contains("▸ bash: cat \\x1b]52;c;aGk=\\x07\\x1b[2J\\x1b]0;pwned\\x07\\u{9b}31m"),
        "{screen}"
    );
    assert!(screen.contains("out \\x1b]52;c;aGk="), "{screen}");
    assert!(screen.contains("  next"), "{screen}");
    assert!(screen.contains("soba · m\\x1b]52;c;"), "{screen}");
    assert!(screen.contains("paste\\x1b[2J"), "{screen}");
}

/// An `edit_file` approval shows the diff it would make, escaped, cut to
/// the box with "… N more lines".
#[test]
fn edit_approval_shows_a_diff() {
    let old: String = (1..=60).map(|n| format!("    line {n}\n")).collect();
    let new = old
        .replace("    line 10\n", "    line ten\n    \x1b[2Jinjected\n")
        .replace("    line 40\n", "");
    let mut lines = vec![DiffLine {
        kind: DiffKind::Note,
        text: "the first of 2 changes".into(),
    }];
    lines.extend(preview::diff(&old, &new, preview::MAX_PREVIEW_LINES));
    let mut state = running();
    state.overlay = Some(Overlay::Approval(ApprovalView {
        tool: "edit_file".into(),
        summary: "src/lexer.rs".into(),
        scope: "every edit_file call this session".into(),
        preview: lines,
    }));
    let screen = frame(&state, 110, 30);
    assert!(screen.contains("-     line 10"), "{screen}");
    assert!(screen.contains("+     \\x1b[2Jinjected"), "{screen}");
    assert!(screen.contains(" more lines"), "{screen}");
    insta::assert_snapshot!("approval_diff", screen);
    // A tall box shows it all.
    let tall = frame(&state, 110, 40);
    assert!(tall.contains("-     line 40"), "{tall}");
    assert!(!tall.contains(" more lines"), "{tall}");
    // Tiny terminals do not panic.
    for (width, height) in [(30, 8), (12, 6), (80, 7)] {
        frame(&state, width, height);
    }
}

/// A new file's approval shows its first lines.
#[test]
fn write_approval_of_a_new_file_shows_its_first_lines() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = soba_engine::tool::Workspace::new(dir.path()).unwrap();
    let content: String = (1..=40).map(|n| format!("fn f{n}() {{}}\n")).collect();
    let preview = preview::approval_preview(
        &workspace,
        "write_file",
        &soba_core::ToolInput::from_value(
            serde_json::json!({"path": "src/new.rs", "content": content}),
        ),
    );
    let mut state = running();
    state.overlay = Some(Overlay::Approval(ApprovalView {
        tool: "write_file".into(),
        summary: "src/new.rs".into(),
        scope: "every write_file call this session".into(),
        preview,
    }));
    let screen = frame(&state, 110, 30);
    assert!(screen.contains("new file, 40 lines"), "{screen}");
    assert!(screen.contains("+ fn f1() {}"), "{screen}");
    insta::assert_snapshot!("approval_new_file", screen);
}

/// Ctrl-O shows every tool result under its line, escaped and bounded.
#[test]
fn expanded_tool_output_frame() {
    let mut state = working();
    let bash = state
        .history
        .iter_mut()
        .find(|item| matches!(item, HistoryItem::Tool { is_error: true, .. }))
        .unwrap();
    if let HistoryItem::Tool { output, .. } = bash {
        *output = Some(ToolOutput {
            lines: vec![
                "running 48 tests".into(),
                "test lexer::eof ... FAILED \x1b[31mred\x1b[0m".into(),
                "exit code 1".into(),
            ],
            more_lines: 1_204,
        });
    }
    state.expand_tools = true;
    let screen = frame(&state, 110, 40);
    assert!(
        screen.contains("▾ bash: cargo test -p parser (exit 1, output 2.3 KiB)"),
        "{screen}"
    );
    assert!(
        screen.contains("│ test lexer::eof ... FAILED \\x1b[31mred\\x1b[0m"),
        "{screen}"
    );
    assert!(screen.contains("│ … 1,204 more lines"), "{screen}");
    insta::assert_snapshot!("expanded_tools", screen);
    state.expand_tools = false;
    let folded = frame(&state, 110, 40);
    assert!(!folded.contains("running 48 tests"), "{folded}");
}

/// A provider retry shows in the status line while the turn waits.
#[test]
fn retry_status_frame() {
    let mut state = running();
    state.retry = Some("retrying in 4 s (attempt 2 of 5): connection refused".into());
    let screen = frame(&state, 110, 30);
    assert!(
        screen.contains("\n retrying in 4 s (attempt 2 of 5): connection refused\n"),
        "{screen}"
    );
}

/// The `/model` picker says how many models it left out and why; the
/// sidebar says why a figure is estimated.
#[test]
fn model_picker_note_and_estimated_reason() {
    let mut state = working();
    state.sidebar.source = "estimated".into();
    state.sidebar.source_note = Some("the context changed since the last response".into());
    state.overlay = Some(Overlay::Picker(Picker {
        title: "Switch model".into(),
        purpose: PickerPurpose::Model,
        items: vec![PickerItem {
            key: "anthropic/claude-sonnet-4-5".into(),
            label: "anthropic/claude-sonnet-4-5  (current)".into(),
        }],
        selected: 0,
        header: None,
        note: Some(
            "9 more models hidden: set OPENAI_API_KEY or OPENROUTER_API_KEY to use them".into(),
        ),
    }));
    insta::assert_snapshot!("model_picker", frame(&state, 110, 30));
}

#[test]
fn budget_text_of_a_session() {
    use soba_core::config::CompactionConfig;
    use soba_engine::session::{SessionConfig, SessionCore};
    use soba_store::log::{SequentialMinter, SessionHeader, WriterOptions};

    let dir = tempfile::tempdir().unwrap();
    let mut minter = SequentialMinter::new(1_735_689_600);
    let header = SessionHeader::new(&mut minter, "/ws");
    let config = SessionConfig {
        model: soba_engine::demo::demo_model(),
        compaction: CompactionConfig::default(),
        system_prompt: "You are a careful coding agent.".into(),
        tool_schemas: Vec::new(),
        counter: None,
    };
    let mut core = SessionCore::create(
        &dir.path().join("s.jsonl"),
        header,
        config,
        WriterOptions {
            durability: soba_store::log::Durability::Flush,
            minter: Box::new(minter),
        },
    )
    .unwrap();
    core.append_message(soba_core::Message::user("hello there"))
        .unwrap();
    let text = soba_tui::view::budget_text(&core);
    insta::assert_snapshot!("budget", text);
    let mut state = working();
    state.notes.push((state.history.len(), text));
    insta::assert_snapshot!("budget_frame", frame(&state, 110, 34));
}

/// Issue 36 item 6: an unknown command leaves the box (so the next one is
/// not glued to it) with a note naming the closest known command; a line
/// starting with `/` that is no command is sent only on a second Enter;
/// `/clear`, `/cost` and `/status` are commands.
#[test]
fn an_unknown_command_leaves_the_box_and_slash_text_asks_first() {
    use soba_tui::command::SlashCommand;
    use soba_tui::state::Action;
    let mut state = working();
    state.input.set("/clera");
    assert_eq!(state.submit(), Vec::<Action>::new());
    assert_eq!(state.input.text, "");
    insta::assert_snapshot!("unknown_command", frame(&state, 110, 30));
    for (typed, command) in [
        ("/clear", SlashCommand::Clear),
        ("/new", SlashCommand::Clear),
        ("/cost", SlashCommand::Usage),
        ("/usage", SlashCommand::Usage),
        ("/status", SlashCommand::Status),
    ] {
        state.input.set(typed);
        assert_eq!(state.submit(), vec![Action::Command(command)], "{typed}");
        assert_eq!(state.input.text, "");
    }
    state.input.set("/clear/cost");
    assert_eq!(state.submit(), Vec::<Action>::new());
    assert_eq!(state.input.text, "/clear/cost");
    insta::assert_snapshot!("slash_text_asks", frame(&state, 110, 30));
    assert_eq!(
        state.submit(),
        vec![Action::StartTurn("/clear/cost".into())],
        "a second Enter sends it"
    );
    // `/clear`'s new session starts with no notes of the one left.
    assert!(!state.notes.is_empty());
    state.apply(soba_tui::state::UiEvent::ClearNotes);
    assert!(state.notes.is_empty());
}

/// Issue 36 item 7: Esc during a streamed answer keeps the partial text,
/// marked interrupted; the queued message goes back to the box instead of
/// being sent; the status leaves "cancelling the turn…".
#[test]
fn esc_keeps_the_partial_answer_and_holds_the_queued_message() {
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    use soba_tui::state::{Action, UiEvent};
    let mut state = running();
    state.streaming = "I'll add `lexes_last_token_at_eof` next to the other lexer tests and".into();
    state.queue.push_back("then bump the crate version".into());
    let actions = state.on_key(
        KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE),
        std::time::Instant::now(),
    );
    assert_eq!(actions, vec![Action::Cancel]);
    assert_eq!(state.hint.as_deref(), Some("cancelling the turn…"));
    let after = state.apply(UiEvent::Finished(Some(
        "turn cancelled: nothing more was appended; your message stays in the log unanswered"
            .into(),
    )));
    assert_eq!(after, Vec::<Action>::new(), "nothing is sent at once");
    assert_eq!(state.input.text, "then bump the crate version");
    assert!(state.queue.is_empty());
    assert!(
        state
            .hint
            .as_deref()
            .is_some_and(|hint| !hint.starts_with("cancelling")),
        "{:?}",
        state.hint
    );
    insta::assert_snapshot!("interrupted", frame(&state, 110, 30));
}

/// The sessions of the picker tests: a long session with a long title
/// and a short one, most recently modified first.
fn listed_sessions() -> Vec<(
    soba_store::reader::SessionSummary,
    soba_store::reader::SessionGlance,
)> {
    let at = |minutes: u64| {
        Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_796_625_120 + 60 * minutes))
    };
    let summary = |id: &str, size: u64, minutes: u64| soba_store::reader::SessionSummary {
        id: id.into(),
        path: format!("/s/{id}.jsonl").into(),
        created_at: Some("2026-12-07T06:32:00Z".into()),
        cwd: None,
        size,
        modified: at(minutes),
        problem: None,
    };
    let glance = |title: &str, n_messages: u64| soba_store::reader::SessionGlance {
        title: Some(title.into()),
        n_messages,
    };
    vec![
        (
            summary("01a24f30-0000-7000-8000-000000000000", 1_126, 40),
            glance("hi", 2),
        ),
        (
            summary("01a24f34-0000-7000-8000-000000000000", 2_516_582, 5),
            glance(
                "We are extending loglens, our access-log analyzer. Over this session add ten features, one at a time, each with its test.",
                373,
            ),
        ),
    ]
}

/// Issue 36 item 4: the `soba -r` picker at launch shows each session's
/// message count and first prompt, and the sidebar behind it shows no
/// placeholder figures while no session is open.
#[test]
fn resume_picker_at_launch() {
    let (header, items) = soba_tui::view::session_choices(&listed_sessions(), 8, true);
    let state = AppState {
        overlay: Some(Overlay::Picker(Picker {
            title: "Resume a session (most recently modified first)".into(),
            purpose: PickerPurpose::Resume,
            items,
            selected: 1,
            header: Some(header),
            note: None,
        })),
        ..AppState::default()
    };
    insta::assert_snapshot!("resume_picker", frame(&state, 110, 20));
}

/// Issue 36 (first hour) item 5: the session picker gives a title the
/// width there is (it was cut at about 56 characters on any terminal),
/// sizes in the unit the rest of soba uses (KiB, MiB: it said KB), and
/// labels its time column with what the list is ordered by (the log's
/// last change; the walk read activity order under "created").
#[test]
fn the_session_picker_uses_the_width_and_says_what_it_is_ordered_by() {
    let (header, items) = soba_tui::view::session_choices(&listed_sessions(), 8, false);
    assert!(
        header.contains("modified") && !header.contains("created"),
        "{header}"
    );
    let state = AppState {
        overlay: Some(Overlay::Picker(Picker {
            title: "Resume a session (most recently modified first)".into(),
            purpose: PickerPurpose::Resume,
            items,
            selected: 0,
            header: Some(header),
            note: None,
        })),
        ..AppState::default()
    };
    let screen = frame(&state, 200, 16);
    assert!(
        screen.contains("one at a time, each with its test."),
        "the whole title: {screen}"
    );
    assert!(
        screen.contains("2.4 MiB") && screen.contains("1.1 KiB"),
        "{screen}"
    );
    assert!(
        !screen.contains(" KB") && !screen.contains(" MB"),
        "{screen}"
    );
    assert!(
        screen.contains("2026-12-07 06:37") && screen.contains("2026-12-07 07:12"),
        "{screen}"
    );
    insta::assert_snapshot!("resume_picker_wide", screen);
}

/// Issue 36 item 4: Esc on the `soba -r` picker at launch does not leave
/// an empty screen: a note says what to do with no session open.
#[test]
fn esc_on_the_resume_picker_at_launch_says_what_now() {
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    let mut state = AppState {
        overlay: Some(Overlay::Picker(Picker {
            title: "Resume a session (most recent first)".into(),
            purpose: PickerPurpose::Resume,
            items: vec![PickerItem {
                key: String::new(),
                label: "(a new session)".into(),
            }],
            selected: 0,
            header: None,
            note: None,
        })),
        ..AppState::default()
    };
    let actions = state.on_key(
        KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE),
        std::time::Instant::now(),
    );
    assert!(actions.is_empty(), "{actions:?}");
    assert!(state.overlay.is_none());
    let screen = frame(&state, 110, 20);
    assert!(
        screen.contains("no session open: type a message to start a new one"),
        "{screen}"
    );
    insta::assert_snapshot!("resume_picker_esc", screen);
}

/// Issue 36 item 10: after an approved edit its diff stays in the
/// transcript, folded to its first lines (Ctrl-O shows it whole); a
/// denied edit says "denied" and shows what was denied.
#[test]
fn an_approved_edit_keeps_its_diff_and_a_denied_one_says_denied() {
    use soba_tui::view;
    let old: String = (1..=12).map(|n| format!("    line {n}\n")).collect();
    let new = old
        .replace("    line 3\n", "    line three\n")
        .replace("    line 9\n", "    line nine\n");
    let call = |id: &str, path: &str| soba_core::ToolUse {
        id: id.into(),
        name: "edit_file".into(),
        input: soba_core::ToolInput::from_value(
            serde_json::json!({"path": path, "oldString": old, "newString": new}),
        ),
    };
    let approved = call("c1", "src/lexer.rs");
    let denied = call("c2", "src/parser.rs");
    let mut state = working();
    state.history.truncate(5);
    state.history.push(HistoryItem::Tool {
        line: view::tool_line(
            &soba_engine::agent::describe_call(&approved),
            "edit_file",
            Some(("edited src/lexer.rs: 1 replacement", false)),
            false,
        ),
        is_error: false,
        output: Some(view::tool_output("edited src/lexer.rs: 1 replacement")),
        diff: view::change_lines(&approved),
    });
    state.history.push(HistoryItem::Tool {
        line: view::tool_line(
            &soba_engine::agent::describe_call(&denied),
            "edit_file",
            Some((soba_engine::tool::USER_DENIAL, true)),
            false,
        ),
        is_error: true,
        output: Some(view::tool_output(soba_engine::tool::USER_DENIAL)),
        diff: view::change_lines(&denied),
    });
    let screen = frame(&state, 110, 40);
    assert!(
        screen.contains("▸ edit_file: src/lexer.rs (output 34 B)"),
        "{screen}"
    );
    assert!(screen.contains("│ -     line 3"), "{screen}");
    assert!(screen.contains("│ +     line three"), "{screen}");
    assert!(
        screen.contains("▸ edit_file: src/parser.rs (denied)"),
        "{screen}"
    );
    assert!(!screen.contains("(error, "), "{screen}");
    assert!(
        screen.contains("more lines (Ctrl-O shows them)"),
        "{screen}"
    );
    insta::assert_snapshot!("edit_diff_kept", screen);
    state.expand_tools = true;
    let expanded = frame(&state, 110, 60);
    assert!(expanded.contains("│ +     line nine"), "{expanded}");
    assert!(!expanded.contains("Ctrl-O shows them"), "{expanded}");
    insta::assert_snapshot!("edit_diff_expanded", expanded);
}

/// Issue 36 item 11: after `soba -c` the notes shown under the live
/// stretch stay under it when PageUp loads the earlier conversation
/// above (they were anchored by index and landed between an earlier
/// question and its answer).
#[test]
fn pageup_after_resume_keeps_notes_below_the_loaded_conversation() {
    use soba_tui::state::UiEvent;
    let marker = HistoryItem::Event(
        "earlier conversation not loaded: PageUp loads it (/rewind lists every message)".into(),
    );
    let q = |n: u32| HistoryItem::User(format!("question {n}"));
    let a = |n: u32| HistoryItem::Assistant(format!("answer {n}"));
    let mut state = working();
    state.history.clear();
    state.apply(UiEvent::History(vec![marker, q(3), a(3)]));
    state.apply(UiEvent::Note(
        "resumed session 0190f3a2 (6 messages)".into(),
    ));
    state.apply(UiEvent::History(vec![q(1), a(1), q(2), a(2), q(3), a(3)]));
    assert_eq!(
        state.notes,
        vec![(6, "resumed session 0190f3a2 (6 messages)".to_owned())]
    );
    let screen = frame(&state, 110, 24);
    let order: Vec<usize> = ["question 2", "answer 2", "answer 3", "resumed session"]
        .iter()
        .map(|text| screen.find(text).unwrap())
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{screen}");
    insta::assert_snapshot!("pageup_after_resume", screen);
}

/// Issue 36 (first hour) item 1: beside the `/rewind` list the
/// conversation's own `›` marks showed through (two `›` on the selected
/// row): nothing of the screen beneath shows beside a box, on the rows
/// it covers.
#[test]
fn nothing_beneath_shows_beside_a_box() {
    let mut state = working();
    state.history = (1..=30)
        .flat_map(|n| {
            [
                HistoryItem::User(format!("question {n}")),
                HistoryItem::Assistant(format!("answer {n}")),
            ]
        })
        .collect();
    state.overlay = Some(Overlay::Picker(Picker {
        title: "Rewind to (newest first)".into(),
        purpose: PickerPurpose::Rewind,
        items: (1..=6)
            .map(|n| PickerItem {
                key: format!("e_{n}"),
                label: format!("e_0190f3a{n}  {n}. question {}", 31 - n),
            })
            .collect(),
        selected: 0,
        header: None,
        note: None,
    }));
    let screen = frame(&state, 110, 30);
    let rows: Vec<&str> = screen.lines().collect();
    let boxed: Vec<&&str> = rows
        .iter()
        .filter(|row| row.chars().nth(2) == Some('│'))
        .collect();
    assert!(boxed.len() >= 6, "{screen}");
    for row in boxed {
        let selected = usize::from(row.contains("1. question 30"));
        assert_eq!(row.matches('›').count(), selected, "{screen}");
        assert_eq!(row.chars().nth(1), Some(' '), "{screen}");
    }
    insta::assert_snapshot!("rewind_picker", screen);
    // The approval box too: it sits in the conversation, narrower.
    state.overlay = Some(Overlay::Approval(ApprovalView {
        tool: "bash".into(),
        summary: "cargo test".into(),
        scope: "bash commands starting with `cargo` this session".into(),
        preview: Vec::new(),
    }));
    let screen = frame(&state, 110, 30);
    for row in screen
        .lines()
        .filter(|row| row.contains("│ y run once") || row.contains("│ n deny"))
    {
        assert!(!row.contains('›'), "{screen}");
        assert!(!row.contains("answer"), "{screen}");
    }
}

/// Issue 36 (first hour) item 3: the diff under an approved edit keeps
/// the lines' indentation (tabs to the next multiple of four columns, as
/// everywhere): an `oldString` starting after a line's indentation showed
/// that line flush left, from the call's arguments; it is shown in the
/// file's whole lines, as the approval prompt showed it. An answer's code
/// and a tool's output keep theirs too (wrapping dropped it).
#[test]
fn an_edit_and_an_answer_keep_their_indentation() {
    use soba_core::{Block, Entry, EntryBody, EntryId, IdKind, Message, MessageEntry, Role};
    let dir = tempfile::tempdir().unwrap();
    let file = "def greet(name):\n\tif name:\n\t\treturn 'hi ' + name\n    return 'hi'\n";
    let edited = file.replace(
        "return 'hi ' + name",
        "return 'hello ' + name\n\t\t# greeted",
    );
    std::fs::write(dir.path().join("hello.py"), &edited).unwrap();
    let workspace = soba_engine::tool::Workspace::new(dir.path()).unwrap();
    let call = soba_core::ToolUse {
        id: "c1".into(),
        name: "edit_file".into(),
        input: soba_core::ToolInput::from_value(serde_json::json!({
            "path": "hello.py",
            "oldString": "return 'hi ' + name",
            "newString": "return 'hello ' + name\n\t\t# greeted",
        })),
    };
    let messages = [
        Message::user("greet by name"),
        Message::new(
            Role::Assistant,
            vec![Block::Text("Editing.".into()), Block::ToolUse(call)],
        ),
        Message::tool_result("c1", "replaced 1 occurrence in hello.py", false),
        Message::assistant("Done:\n\n\tif name:\n\t\treturn 'hello ' + name\n    return 'hi'"),
    ];
    let id = |n: u128| {
        EntryId::from_uuid(
            IdKind::Entry,
            0x0190_0000_0000_7000_8000_0000_0000_0000 | n << 16,
        )
    };
    let path: Vec<Entry> = messages
        .into_iter()
        .enumerate()
        .map(|(n, message)| Entry {
            id: id(n as u128 + 1),
            parent_id: (n > 0).then(|| id(n as u128)),
            timestamp: String::new(),
            body: EntryBody::Message(MessageEntry {
                message,
                tokens: None,
            }),
        })
        .collect();
    let mut state = working();
    state.history = soba_tui::view::history_items(&path, 4, false, &mut |call, ran| {
        preview::edit_in_file(&workspace, &call.input, ran)
    });
    let screen = frame(&state, 110, 30);
    for shown in [
        "│ -         return 'hi ' + name",
        "│ +         return 'hello ' + name",
        "│ +         # greeted",
        "│       return 'hi'",
        "│      if name:",
        "│          return 'hello ' + name",
    ] {
        assert!(screen.contains(shown), "{shown:?}:\n{screen}");
    }
    insta::assert_snapshot!("edit_indentation", screen);
}

/// Issue 36 (first hour) item 6: on an 80-column terminal (the sidebar
/// leaves the conversation 46 columns of text) every line of `/status`
/// fits: it wrapped its session, context and compaction lines.
#[test]
fn status_fits_an_80_column_terminal() {
    use soba_core::config::CompactionConfig;
    use soba_engine::session::{SessionConfig, SessionCore};
    use soba_store::log::{SequentialMinter, SessionHeader, WriterOptions};

    let dir = tempfile::tempdir().unwrap();
    let mut minter = SequentialMinter::new(1_735_689_600);
    let header = SessionHeader::new(&mut minter, "/ws");
    let config = SessionConfig {
        model: soba_engine::demo::demo_model(),
        compaction: CompactionConfig::default(),
        system_prompt: "You are a careful coding agent.".into(),
        tool_schemas: Vec::new(),
        counter: None,
    };
    let log = dir.path().join("s.jsonl");
    let mut core = SessionCore::create(
        &log,
        header,
        config,
        WriterOptions {
            durability: soba_store::log::Durability::Flush,
            minter: Box::new(minter),
        },
    )
    .unwrap();
    core.append_message(soba_core::Message::user("hello there"))
        .unwrap();
    let text = soba_tui::view::status_text(&core, std::path::Path::new("/s/0190f3a2.jsonl"));
    let mut state = working();
    state.notes.push((state.history.len(), text.clone()));
    let screen = frame(&state, 80, 30);
    // The note's text column: 80 − the sidebar's 30 − 2 borders − 2.
    for line in text.lines() {
        assert!(
            soba_tui::render::text_width(line) <= 46,
            "{line:?} is wider than 46 columns:\n{screen}"
        );
    }
    insta::assert_snapshot!("status_80", screen);
}
