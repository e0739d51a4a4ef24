use std::time::Duration;

use serde_json::json;
use soba_provider::fake::{Dialect, FakeServer, Reply, Script};
use tokio::sync::mpsc;

use super::*;
use crate::command::RewindTarget;
use soba_workspace::Options;
use soba_workspace::paths::Env;

/// A worker on a new session whose model and summarizer are the fake
/// server's, driven through its channels as the UI drives it.
struct Rig {
    server: FakeServer,
    dir: tempfile::TempDir,
    actions: UnboundedSender<Action>,
    reports: UnboundedReceiver<UiEvent>,
    task: tokio::task::JoinHandle<Option<Closed>>,
}

const SUMMARY: &str = "## Goal\nCount the numbers.\n## Constraints\n(none)\n## Done\nListed them.\n## In progress\n(none)\n\
                       ## Pending\n(none)\n## Decisions\n(none)\n## Blockers\n(none)\n## Next steps\nAnswer.\nEND-OF-SUMMARY";

async fn rig() -> Rig {
    rig_with(|_| {}).await
}

/// A rig whose user config is the default one changed by `patch`.
async fn rig_with(patch: impl FnOnce(&mut serde_json::Value)) -> Rig {
    let server = FakeServer::start().await.expect("the fake server starts");
    let dir = tempfile::tempdir().expect("a temporary directory");
    rig_at(server, dir, &Start::New, patch)
}

/// A rig in `dir` (a workspace and home made before, or new) opening
/// the session `start` names.
fn rig_at(
    server: FakeServer,
    dir: tempfile::TempDir,
    start: &Start,
    patch: impl FnOnce(&mut serde_json::Value),
) -> Rig {
    let home = dir.path().join("home");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&home).expect("home");
    std::fs::create_dir_all(&ws).expect("workspace");
    let mut config = json!({
        "model": "fake/test-model",
        "providers": {
            "fake": {"api": "openai-chat", "baseUrl": server.url()},
            "fakesum": {"api": "anthropic-messages", "baseUrl": server.url()}
        },
        "models": {
            "fake/test-model": {"contextWindow": 24000, "maxOutputTokens": 2000},
            "fakesum/summarizer": {"contextWindow": 24000, "maxOutputTokens": 2000},
            "fake/other-model": {"contextWindow": 32000, "maxOutputTokens": 4000}
        },
        "compaction": {
            "summarizer": {"model": "fakesum/summarizer"},
            "safetyReserveTokens": 1000,
            "keepRecentTokens": 256,
            // Set, so the small window does not scale it: the warning
            // below is SPEC §4.3's.
            "minTokensForAutoCompact": 32000,
            "compactOnTurnComplete": false,
            "timeoutMs": 5000
        }
    });
    patch(&mut config);
    std::fs::write(home.join("config.json"), config.to_string()).expect("user config");
    let env = Env::from_pairs([
        ("SOBA_HOME", home.display().to_string()),
        ("HOME", dir.path().display().to_string()),
    ]);
    let ctx = Context::load_with(env, &ws, &Options::default()).expect("config loads");
    let launch = Launch {
        workspace: Workspace::new(&ctx.workspace.root).expect("workspace"),
        ctx,
        model_flag: None,
        policy: ApprovalPolicy::default(),
        tool_config: ToolConfig::default(),
        tools: Arc::new(ToolRegistry::builtin()),
    };
    let (ui_tx, reports) = mpsc::unbounded_channel();
    let (internal_tx, internal_rx) = mpsc::unbounded_channel();
    let (actions, action_rx) = mpsc::unbounded_channel();
    let mut worker = Worker::new(launch, ui_tx, internal_tx);
    let notes = worker.open_start(start).expect("the session opens");
    let task = tokio::spawn(worker.run(action_rx, internal_rx, notes, false));
    Rig {
        server,
        dir,
        actions,
        reports,
        task,
    }
}

impl Rig {
    fn send(&self, action: Action) {
        self.actions.send(action).expect("the worker runs");
    }

    /// Collects reports until one matches, failing after 10 s.
    async fn until(&mut self, what: &str, pred: impl Fn(&UiEvent) -> bool) -> Vec<UiEvent> {
        let mut seen = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let report = tokio::time::timeout_at(deadline, self.reports.recv())
                .await
                .unwrap_or_else(|_| panic!("no {what} within 10 s; saw {seen:#?}"))
                .expect("the worker runs");
            let done = pred(&report);
            seen.push(report);
            if done {
                return seen;
            }
        }
    }

    /// Runs one turn with a `bash` call the UI approves once.
    async fn approved_turn(&mut self) {
        self.server.push_for(
            "/chat/completions",
            Script::stream(
                Dialect::Chat,
                &Reply::text("Counting.").with_tool_call(
                    "c1",
                    "bash",
                    json!({"command": "seq 1 3000"}),
                ),
            ),
        );
        self.server.push_for(
            "/chat/completions",
            Script::stream(Dialect::Chat, &Reply::text("Done counting.")),
        );
        self.send(Action::StartTurn("list the numbers".into()));
        let seen = self
            .until("an approval prompt", |r| matches!(r, UiEvent::Approval(_)))
            .await;
        let Some(UiEvent::Approval(view)) = seen.last() else {
            unreachable!("until returned on an approval")
        };
        assert_eq!(view.tool, "bash");
        assert_eq!(view.summary, "seq 1 3000");
        self.send(Action::Approve(ApprovalDecision::Once));
        let seen = self
            .until("the turn's end", |r| matches!(r, UiEvent::Finished(_)))
            .await;
        assert_eq!(seen.last(), Some(&UiEvent::Finished(None)));
    }

    fn slow_summary(&self) {
        let mut reply = Reply::text(SUMMARY);
        reply.chunk_chars = 10;
        self.server.push_for(
            "/v1/messages",
            Script::stream(Dialect::Anthropic, &reply).with_frame_delay(Duration::from_millis(40)),
        );
    }

    /// Returns the log's entry types in file order.
    fn log_types(&self) -> Vec<String> {
        let dir = self.dir.path().join("home").join("sessions");
        let slug_dir = std::fs::read_dir(&dir)
            .expect("sessions dir")
            .next()
            .expect("one project")
            .expect("readable")
            .path();
        let log = std::fs::read_dir(&slug_dir)
            .expect("project sessions")
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .find(|path| {
                let name = path.display().to_string();
                name.ends_with(".jsonl") && !name.ends_with(".flight.jsonl")
            })
            .expect("a session log");
        std::fs::read_to_string(log)
            .expect("log readable")
            .lines()
            .skip(1)
            .map(|line| {
                let value: serde_json::Value = serde_json::from_str(line).expect("json line");
                value["type"].as_str().unwrap_or_default().to_owned()
            })
            .collect()
    }

    async fn quit(self) -> Option<Closed> {
        self.quit_keeping_files().await.0
    }

    /// Quits and hands back the temporary directory, so the files can
    /// be looked at afterwards.
    async fn quit_keeping_files(self) -> (Option<Closed>, tempfile::TempDir) {
        let (closed, dir, _) = self.quit_keeping_all().await;
        (closed, dir)
    }

    /// Quits and hands back the directory and the fake server, for a
    /// rig that resumes the session.
    async fn quit_keeping_all(self) -> (Option<Closed>, tempfile::TempDir, FakeServer) {
        drop(self.actions);
        let closed = tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("the worker stops when the UI is gone")
            .expect("the worker does not panic");
        (closed, self.dir, self.server)
    }

    /// Returns the session logs of the rig's workspace.
    fn session_logs(&self) -> Vec<PathBuf> {
        let dir = self.dir.path().join("home").join("sessions");
        let mut logs: Vec<PathBuf> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(|project| project.ok())
            .flat_map(|project| std::fs::read_dir(project.path()).into_iter().flatten())
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| path.display().to_string().ends_with(".jsonl"))
            .collect();
        logs.sort();
        logs
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_compact_during_a_barrier_is_appended_after_it() {
    let mut rig = rig().await;
    rig.approved_turn().await;
    rig.slow_summary();
    rig.send(Action::Command(SlashCommand::Compact {
        save: false,
        instructions: None,
    }));
    rig.until("the barrier", |r| {
        matches!(r, UiEvent::BarrierStarted { idle: true })
    })
    .await;
    rig.send(Action::Command(SlashCommand::AutoCompact(false)));
    let seen = rig
        .until("the end", |r| matches!(r, UiEvent::Finished(_)))
        .await;
    assert!(seen.contains(&UiEvent::Note(
        "auto-compact off: recorded when the running compaction ends".into()
    )));
    let result = seen
        .iter()
        .find_map(|r| match r {
            UiEvent::BarrierEnded(line) => Some(line.text.clone()),
            _ => None,
        })
        .expect("a result line");
    assert!(result.starts_with("Compacted (user): "), "{result}");
    let types = rig.log_types();
    assert_eq!(
        &types[types.len() - 2..],
        ["capsule", "config_change"],
        "{types:?}"
    );
    let sidebar = seen.iter().rev().find_map(|r| match r {
        UiEvent::Sidebar(sidebar) => Some(sidebar.clone()),
        _ => None,
    });
    assert_eq!(sidebar.map(|s| s.auto_compact), Some(false));
    rig.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_during_a_barrier_makes_it_stale_and_restores_the_message() {
    let mut rig = rig().await;
    rig.approved_turn().await;
    rig.slow_summary();
    rig.send(Action::Command(SlashCommand::Compact {
        save: false,
        instructions: None,
    }));
    rig.until("the barrier", |r| {
        matches!(r, UiEvent::BarrierStarted { .. })
    })
    .await;
    rig.send(Action::Command(SlashCommand::Rewind(Some(
        RewindTarget::Nth(1),
    ))));
    let seen = rig
        .until("a confirmation", |r| {
            matches!(r, UiEvent::Overlay(Overlay::ConfirmRewind(_)))
        })
        .await;
    let Some(UiEvent::Overlay(Overlay::ConfirmRewind(plan))) = seen.last() else {
        unreachable!("until returned on a confirmation")
    };
    assert!(
        plan.lines[0].starts_with("Rewind to before your message \"list the numbers\""),
        "{:?}",
        plan.lines
    );
    assert_eq!(plan.lines[1], "No files were modified after it.");
    assert!(
        plan.lines[2].starts_with("Estimated context after: "),
        "{:?}",
        plan.lines
    );
    rig.send(Action::Rewind(plan.clone()));
    let seen = rig
        .until("the end", |r| matches!(r, UiEvent::Finished(_)))
        .await;
    assert!(
        seen.contains(&UiEvent::SetInput("list the numbers".into())),
        "{seen:#?}"
    );
    let result = seen
        .iter()
        .find_map(|r| match r {
            UiEvent::BarrierEnded(line) => Some(line.clone()),
            _ => None,
        })
        .expect("a result line");
    assert_eq!(
        result.text,
        "Compaction stale (user): the session leaf moved during the barrier"
    );
    assert!(result.warn);
    let types = rig.log_types();
    assert!(
        !types.contains(&"capsule".to_owned()),
        "nothing appended: {types:?}"
    );
    assert_eq!(types.last().map(String::as_str), Some("leaf"));
    let history = seen.iter().rev().find_map(|r| match r {
        UiEvent::History(items) => Some(items.clone()),
        _ => None,
    });
    assert_eq!(
        history,
        Some(vec![crate::state::HistoryItem::Event(
            "model fake/test-model".into()
        )])
    );
    rig.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sidebar_uses_the_provider_usage_after_a_turn() {
    let mut rig = rig_with(|config| {
        config["compaction"]["compactOnTurnComplete"] = json!(true);
    })
    .await;
    // Near the local count of the request (system prompt and tool
    // schemas, about 1,800 tokens): under 80 % of it reads as truncation.
    let usage = soba_core::Usage {
        input: 1_734,
        output: 5,
        ..soba_core::Usage::default()
    };
    rig.server.push_for(
        "/chat/completions",
        Script::stream(
            Dialect::Chat,
            &Reply::text("Looking.")
                .with_tool_call("c1", "list_files", json!({}))
                .with_usage(usage),
        ),
    );
    rig.server.push_for(
        "/chat/completions",
        Script::stream(Dialect::Chat, &Reply::text("Hello.").with_usage(usage)),
    );
    rig.send(Action::StartTurn("hi".into()));
    let seen = rig
        .until("the turn's end", |r| matches!(r, UiEvent::Finished(_)))
        .await;
    let sidebar = seen
        .iter()
        .rev()
        .find_map(|r| match r {
            UiEvent::Sidebar(sidebar) => Some(sidebar.clone()),
            _ => None,
        })
        .expect("a sidebar");
    assert_eq!(sidebar.source, "provider_usage", "{sidebar:?}");
    // The reported prompt plus the answer as it will be re-sent.
    assert!(sidebar.effective > 1_734, "{sidebar:?}");
    rig.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_port_shows_the_retry_then_cancels() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let mut rig = rig_with(|config| {
        config["providers"]["fake"]["baseUrl"] = json!(format!("http://127.0.0.1:{port}"));
    })
    .await;
    rig.send(Action::StartTurn("hello?".into()));
    let seen = rig
        .until("a retry", |r| matches!(r, UiEvent::Retrying(_)))
        .await;
    let Some(UiEvent::Retrying(line)) = seen.last() else {
        unreachable!("until returned on a retry")
    };
    assert!(
        line.starts_with("retrying in ") && line.contains(" (attempt 2 of 5): "),
        "{line}"
    );
    assert!(line.ends_with("connection refused"), "{line}");
    rig.send(Action::Cancel);
    rig.until("the end", |r| matches!(r, UiEvent::Finished(_)))
        .await;
    rig.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mentioned_files_are_attached_and_shown_as_one_line() {
    let mut rig = rig().await;
    std::fs::write(rig.dir.path().join("ws/notes.md"), "alpha\nbeta\n").expect("a file");
    rig.server.push_for(
        "/chat/completions",
        Script::stream(Dialect::Chat, &Reply::text("Read it.")),
    );
    rig.send(Action::StartTurn("summarize @notes.md and @nope.md".into()));
    let seen = rig
        .until("the turn's end", |r| matches!(r, UiEvent::Finished(_)))
        .await;
    assert!(
        note_texts(&seen)
            .contains(&"@nope.md not attached: no such file in the workspace".to_owned()),
        "{seen:#?}"
    );
    let history = seen
        .iter()
        .rev()
        .find_map(|r| match r {
            UiEvent::History(items) => Some(items.clone()),
            _ => None,
        })
        .expect("a history");
    use crate::state::HistoryItem;
    assert_eq!(
        history[1..3],
        [
            HistoryItem::User("summarize @notes.md and @nope.md".into()),
            HistoryItem::Event("@notes.md (2 lines attached)".into()),
        ]
    );
    let request = rig.server.requests().pop().expect("a request");
    let sent = request.body.to_string();
    assert!(sent.contains("alpha\\nbeta"), "{sent}");
    assert!(
        sent.contains("<attached-file path=\\\"notes.md\\\" lines=2"),
        "{sent}"
    );
    rig.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_picker_hides_models_without_a_key() {
    let mut rig = rig().await;
    rig.send(Action::Command(SlashCommand::Model(None)));
    let seen = rig
        .until("the picker", |r| {
            matches!(r, UiEvent::Overlay(Overlay::Picker(_)))
        })
        .await;
    let Some(UiEvent::Overlay(Overlay::Picker(picker))) = seen.last() else {
        unreachable!("until returned on a picker")
    };
    let keys: Vec<&str> = picker.items.iter().map(|item| item.key.as_str()).collect();
    assert!(keys.contains(&"fake/test-model"), "{keys:?}");
    assert!(
        keys.iter().all(|key| !key.starts_with("anthropic/")
            && !key.starts_with("openai/")
            && !key.starts_with("openrouter/")),
        "{keys:?}"
    );
    let note = picker.note.as_deref().unwrap_or_default();
    assert!(note.contains(" more models hidden: set "), "{note}");
    assert!(note.contains("ANTHROPIC_API_KEY"), "{note}");
    assert_eq!(picker.items[picker.selected].key, "fake/test-model");
    rig.quit().await;
}

/// Issue 33: a log replaced by rename while the TUI has it open (what
/// an editor does on save) is not written through the old handle; what
/// the next turn had goes to a recovery file (the turn stops at its
/// first refused append), and the exit line says NOT saved and names
/// it instead of "resume with".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_replaced_while_open_is_not_called_saved_and_the_message_is_recovered() {
    let mut rig = rig().await;
    rig.approved_turn().await;
    let log = rig
        .session_logs()
        .into_iter()
        .find(|path| !path.display().to_string().ends_with(".flight.jsonl"))
        .expect("the session log");
    let copy = log.with_extension("edited");
    std::fs::copy(&log, &copy).unwrap();
    std::fs::rename(&copy, &log).unwrap();
    rig.send(Action::StartTurn(
        "the message that must not be lost".into(),
    ));
    rig.until("the turn's end", |r| matches!(r, UiEvent::Finished(_)))
        .await;
    let (closed, dir) = rig.quit_keeping_files().await;
    let closed = closed.expect("a session was open");
    let recovery = closed.recovery.clone().expect("a recovery file");
    let kept = std::fs::read_to_string(&recovery).unwrap();
    assert!(kept.contains("the message that must not be lost"), "{kept}");
    assert!(
        !std::fs::read_to_string(&log)
            .unwrap()
            .contains("the message that must not be lost")
    );
    let line = super::super::exit_line(&closed, &dir.path().join("home").join("sessions"))
        .expect("a line");
    assert!(line.contains("was NOT saved in full"), "{line}");
    assert!(line.contains(&recovery.display().to_string()), "{line}");
    assert!(!line.contains("resume"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaving_an_unused_session_removes_it_and_a_used_one_stays() {
    // Opened and left: the log and its flight file are removed.
    let mut unused = rig().await;
    unused.send(Action::Command(SlashCommand::AutoCompact(false)));
    unused
        .until(
            "the setting",
            |r| matches!(r, UiEvent::Note(text) if text.starts_with("auto-compact off")),
        )
        .await;
    let logs = unused.session_logs();
    assert_eq!(logs.len(), 2, "the log and its flight file");
    let (closed, _dir) = unused.quit_keeping_files().await;
    assert!(closed.expect("a session was open").removed);
    assert!(logs.iter().all(|log| !log.exists()), "{logs:?}");

    // A session with a message is kept.
    let mut used = rig().await;
    used.approved_turn().await;
    let logs = used.session_logs();
    let (closed, _dir) = used.quit_keeping_files().await;
    assert!(!closed.expect("a session was open").removed);
    assert!(logs.iter().all(|log| log.exists()));

    // Switching away from an unused session removes it too.
    let mut switching = rig().await;
    let before = switching.session_logs();
    // The header of the start, then the one of the new session.
    switching
        .until("the header", |r| matches!(r, UiEvent::Header(_)))
        .await;
    switching.send(Action::Picked(PickerPurpose::Resume, String::new()));
    switching
        .until("the new header", |r| matches!(r, UiEvent::Header(_)))
        .await;
    let after = switching.session_logs();
    assert!(
        before.iter().all(|log| !after.contains(log)),
        "{before:?} {after:?}"
    );
    assert_eq!(after.len(), 2, "{after:?}");
    switching.quit().await;
}

/// Issue 18: a resumed session opens on its live stretch (the first
/// frame never waits on reading the whole log); PageUp's
/// `LoadEarlier` reads the rest once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_session_opens_on_its_live_stretch_and_loads_earlier_history_on_request() {
    let mut first = rig().await;
    first.approved_turn().await;
    first.approved_turn().await;
    first.send(Action::Command(SlashCommand::Compact {
        save: false,
        instructions: None,
    }));
    first
        .until("the compaction's end", |r| {
            matches!(r, UiEvent::Finished(_))
        })
        .await;
    let (_, dir, server) = first.quit_keeping_all().await;

    let users = |items: &[HistoryItem]| {
        items
            .iter()
            .filter(|item| matches!(item, HistoryItem::User(_)))
            .count()
    };
    let mut resumed = rig_at(server, dir, &Start::Continue, |_| {});
    let seen = resumed
        .until(
            "the history",
            |r| matches!(r, UiEvent::History(items) if !items.is_empty()),
        )
        .await;
    assert!(seen.contains(&UiEvent::EarlierHistory(true)), "{seen:?}");
    let Some(UiEvent::History(stretch)) = seen.last() else {
        unreachable!("until returned on a history")
    };
    assert_eq!(
        stretch.first(),
        Some(&HistoryItem::Event(
            "earlier conversation not loaded: PageUp loads it (/rewind lists every message)".into()
        ))
    );
    assert!(users(stretch) < 2, "{stretch:?}");

    resumed.send(Action::LoadEarlier);
    let seen = resumed
        .until(
            "the whole history",
            |r| matches!(r, UiEvent::History(items) if users(items) == 2),
        )
        .await;
    assert!(seen.contains(&UiEvent::EarlierHistory(false)), "{seen:?}");
    let Some(UiEvent::History(whole)) = seen.last() else {
        unreachable!("until returned on a history")
    };
    // From the root: the session's first entry, its model.
    assert_eq!(
        whole.first(),
        Some(&HistoryItem::Event("model fake/test-model".into()))
    );
    resumed.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_approvals_survive_resume_and_rewind() {
    let mut first = rig().await;
    first.server.push_for(
        "/chat/completions",
        Script::stream(
            Dialect::Chat,
            &Reply::text("Counting.").with_tool_call("c1", "bash", json!({"command": "seq 1 3"})),
        ),
    );
    first.server.push_for(
        "/chat/completions",
        Script::stream(Dialect::Chat, &Reply::text("Done.")),
    );
    first.send(Action::StartTurn("count".into()));
    first
        .until("an approval prompt", |r| matches!(r, UiEvent::Approval(_)))
        .await;
    first.send(Action::Approve(ApprovalDecision::AlwaysForSession));
    first
        .until("the turn's end", |r| matches!(r, UiEvent::Finished(_)))
        .await;
    let types = first.log_types();
    assert!(types.contains(&"config_change".to_owned()), "{types:?}");
    let (_, dir, server) = first.quit_keeping_all().await;

    // `-c`: the same command runs without a prompt, also after a rewind
    // to before the grant.
    let mut resumed = rig_at(server, dir, &Start::Continue, |_| {});
    resumed.send(Action::Command(SlashCommand::Rewind(Some(
        RewindTarget::Nth(1),
    ))));
    let seen = resumed
        .until("a confirmation", |r| {
            matches!(r, UiEvent::Overlay(Overlay::ConfirmRewind(_)))
        })
        .await;
    let Some(UiEvent::Overlay(Overlay::ConfirmRewind(plan))) = seen.last() else {
        unreachable!("until returned on a confirmation")
    };
    resumed.send(Action::Rewind(plan.clone()));
    let seen = resumed
        .until(
            "the rewind note",
            |r| matches!(r, UiEvent::Note(text) if text.starts_with("rewound to ")),
        )
        .await;
    // A message rewind names the message, not the entry before it.
    assert_eq!(
        note_texts(&seen).pop().as_deref(),
        Some(
            "rewound to before your message, which is back in the input box; files on disk are unchanged"
        )
    );
    resumed.server.push_for(
        "/chat/completions",
        Script::stream(
            Dialect::Chat,
            &Reply::text("Again.").with_tool_call("c2", "bash", json!({"command": "seq 1 5"})),
        ),
    );
    resumed.server.push_for(
        "/chat/completions",
        Script::stream(Dialect::Chat, &Reply::text("Done again.")),
    );
    resumed.send(Action::StartTurn("count again".into()));
    let seen = resumed
        .until("the turn's end", |r| matches!(r, UiEvent::Finished(_)))
        .await;
    assert!(
        !seen.iter().any(|r| matches!(r, UiEvent::Approval(_))),
        "{seen:#?}"
    );
    assert_eq!(seen.last(), Some(&UiEvent::Finished(None)));
    let requests = resumed.server.requests();
    let last = requests.last().expect("requests");
    assert!(
        last.body.to_string().contains("4\\n5"),
        "the command ran: {}",
        last.body
    );
    resumed.quit().await;
}

/// The walk: a denied call did not end the turn (the model went on,
/// tried something else). Now a "no" stops the turn, as in Claude Code
/// and Codex; the batch's later calls are answered, not run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_call_stops_the_turn() {
    let mut rig = rig().await;
    rig.server.push_for(
        "/chat/completions",
        Script::stream(
            Dialect::Chat,
            &Reply::text("Cleaning.")
                .with_tool_call("c1", "bash", json!({"command": "rm -r build"}))
                .with_tool_call("c2", "bash", json!({"command": "ls"})),
        ),
    );
    rig.send(Action::StartTurn("clean up".into()));
    rig.until("an approval prompt", |r| matches!(r, UiEvent::Approval(_)))
        .await;
    rig.send(Action::Approve(ApprovalDecision::Deny));
    let seen = rig
        .until("the turn's end", |r| matches!(r, UiEvent::Finished(_)))
        .await;
    assert_eq!(
        seen.last(),
        Some(&UiEvent::Finished(Some(
            "turn stopped: you denied bash: rm -r build; type what to do instead".into()
        )))
    );
    assert!(
        !seen.iter().any(|r| matches!(r, UiEvent::Approval(_))),
        "the second call was not asked about: {seen:#?}"
    );
    let chats = rig
        .server
        .requests()
        .iter()
        .filter(|request| request.path == "/chat/completions")
        .count();
    assert_eq!(chats, 1, "no request after the denial");
    let types = rig.log_types();
    assert_eq!(
        &types[types.len() - 3..],
        ["message", "message", "message"],
        "the assistant's calls and both results: {types:?}"
    );
    rig.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_keeps_auto_compact_off() {
    let mut rig = rig().await;
    rig.approved_turn().await;
    rig.send(Action::Command(SlashCommand::AutoCompact(false)));
    rig.send(Action::Command(SlashCommand::Rewind(Some(
        RewindTarget::Nth(1),
    ))));
    let seen = rig
        .until("a confirmation", |r| {
            matches!(r, UiEvent::Overlay(Overlay::ConfirmRewind(_)))
        })
        .await;
    let Some(UiEvent::Overlay(Overlay::ConfirmRewind(plan))) = seen.last() else {
        unreachable!("until returned on a confirmation")
    };
    rig.send(Action::Rewind(plan.clone()));
    let seen = rig
        .until(
            "the rewind note",
            |r| matches!(r, UiEvent::Note(text) if text.starts_with("rewound to ")),
        )
        .await;
    // The note follows the rewound conversation and its sidebar.
    let sidebar = seen
        .iter()
        .rev()
        .find_map(|r| match r {
            UiEvent::Sidebar(sidebar) => Some(sidebar),
            _ => None,
        })
        .expect("a sidebar before the note");
    assert!(!sidebar.auto_compact);
    let types = rig.log_types();
    assert_eq!(
        &types[types.len() - 2..],
        ["leaf", "config_change"],
        "{types:?}"
    );
    rig.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_switch_that_cannot_work_changes_nothing() {
    let mut rig = rig().await;
    rig.approved_turn().await;
    let before = rig.log_types();
    // No ANTHROPIC_API_KEY in the rig's environment.
    rig.send(Action::Command(SlashCommand::Model(Some(
        "anthropic/claude-sonnet-4-5".into(),
    ))));
    let seen = rig
        .until(
            "the refusal",
            |r| matches!(r, UiEvent::Note(text) if text == "the model was not changed"),
        )
        .await;
    let notes = note_texts(&seen);
    assert!(
        notes.iter().any(|note| note.contains("ANTHROPIC_API_KEY")),
        "{notes:?}"
    );
    assert!(
        !seen
            .iter()
            .any(|r| matches!(r, UiEvent::Header(h) if h.model != "fake/test-model")),
        "{seen:?}"
    );
    assert_eq!(rig.log_types(), before);
    // The same session goes on with the same model.
    rig.approved_turn().await;
    assert_eq!(rig.log_types()[..before.len()], before[..]);
    rig.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_turn_during_a_barrier_appends_nothing() {
    let mut rig = rig().await;
    rig.approved_turn().await;
    rig.slow_summary();
    rig.send(Action::Command(SlashCommand::Compact {
        save: true,
        instructions: Some("keep the numbers".into()),
    }));
    rig.until("the barrier", |r| {
        matches!(r, UiEvent::BarrierStarted { .. })
    })
    .await;
    let before = rig.log_types();
    rig.send(Action::Cancel);
    let seen = rig
        .until("the end", |r| matches!(r, UiEvent::Finished(_)))
        .await;
    let result = seen
        .iter()
        .find_map(|r| match r {
            UiEvent::BarrierEnded(line) => Some(line.text.clone()),
            _ => None,
        })
        .expect("a result line");
    assert_eq!(result, "Compaction cancelled (user): cancelled by the user");
    assert!(seen.contains(&UiEvent::Note(
        "not saved to Project Memory: no capsule was made (cancelled by the user)".into()
    )));
    assert_eq!(rig.log_types(), before);
    rig.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_that_change_the_session_append_their_entries() {
    let mut rig = rig().await;
    let skills = rig.dir.path().join("ws/.soba/skills");
    std::fs::create_dir_all(&skills).expect("skills dir");
    std::fs::write(skills.join("terse.md"), "Answer in one sentence.").expect("skill file");
    rig.send(Action::Command(SlashCommand::Checkpoint {
        kind: soba_core::CheckpointKind::Milestone,
        note: "parser done".into(),
    }));
    rig.send(Action::Command(SlashCommand::Skill {
        name: "terse".into(),
        off: false,
    }));
    rig.send(Action::Command(SlashCommand::Skill {
        name: "missing".into(),
        off: false,
    }));
    rig.send(Action::Command(SlashCommand::Skill {
        name: "terse".into(),
        off: true,
    }));
    rig.send(Action::Command(SlashCommand::Budget));
    let seen = rig
        .until(
            "the budget",
            |r| matches!(r, UiEvent::Note(text) if text.starts_with("/budget")),
        )
        .await;
    let notes: Vec<&str> = seen
        .iter()
        .filter_map(|r| match r {
            UiEvent::Note(text) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    // hardLimit 21,000 ≤ 32,001: SPEC §4.3's warning, shown in the TUI.
    assert_eq!(
        notes[0],
        "warning: soft compaction fires only one token below the hard limit for this model; \
         set compaction.minTokensForAutoCompact below 16,800 to compact earlier"
    );
    assert!(
        notes[1].starts_with("milestone recorded as e_"),
        "{notes:?}"
    );
    assert_eq!(
        notes[2],
        "skill terse activated: its text is part of the system prompt"
    );
    assert_eq!(
        notes[3],
        "skill missing was not activated: there is no .soba/skills/missing.md (skills are markdown files in .soba/skills/)"
    );
    assert_eq!(notes[4], "skill terse deactivated");
    // hardLimit = window 24,000 − output 2,000 − reserve 1,000.
    assert!(
        notes[5]
            .lines()
            .any(|line| line.split_whitespace().eq(["hardLimit", "21,000"])),
        "{}",
        notes[5]
    );
    assert_eq!(
        rig.log_types(),
        ["model_change", "checkpoint", "skill", "skill"]
    );
    rig.quit().await;
}

/// Issue 36 item 6: `/usage` adds up the recorded usage (with a price
/// when the model has one), `/status` names model, window, session and
/// context use, `/clear` opens a new session and says so, keeping the
/// old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_status_and_clear() {
    let mut rig = rig().await;
    let usage = soba_core::Usage {
        input: 1_734,
        output: 5,
        ..soba_core::Usage::default()
    };
    rig.server.push_for(
        "/chat/completions",
        Script::stream(Dialect::Chat, &Reply::text("Hello.").with_usage(usage)),
    );
    rig.send(Action::StartTurn("hi".into()));
    rig.until("the turn's end", |r| matches!(r, UiEvent::Finished(_)))
        .await;
    rig.send(Action::Command(SlashCommand::Usage));
    let seen = rig
        .until(
            "the usage",
            |r| matches!(r, UiEvent::Note(text) if text.starts_with("/usage")),
        )
        .await;
    let usage_text = note_texts(&seen).pop().expect("a note");
    assert_eq!(
        usage_text,
        "/usage · 1 request recorded usage\n\
         input                  1,734\n\
         cacheRead                  0\n\
         cacheWrite                 0\n\
         output                     5\n\
         cost            not priced: soba has no price for fake/test-model; set \
         models.\"fake/test-model\".inputPrice and outputPrice (US dollars per million \
         tokens) in your config"
    );
    rig.send(Action::Command(SlashCommand::Status));
    let seen = rig
        .until(
            "the status",
            |r| matches!(r, UiEvent::Note(text) if text.starts_with("/status")),
        )
        .await;
    let status = note_texts(&seen).pop().expect("a note");
    let lines: Vec<&str> = status.lines().collect();
    assert_eq!(lines[0], "/status · fake/test-model");
    assert_eq!(lines[1], "window    24,000 tokens, maxOutput 2,000");
    assert!(lines[2].starts_with("context   "), "{status}");
    assert!(lines[4].ends_with("% of hardLimit 21,000"), "{status}");
    assert_eq!(lines[5], "auto-compact on");
    assert_eq!(lines[6], "capsule   none yet");
    assert!(lines[7].starts_with("session   01"), "{status}");
    assert!(
        lines[8].starts_with("log       ") && lines[8].ends_with(".jsonl"),
        "{status}"
    );
    let before = rig.session_logs();
    rig.send(Action::Command(SlashCommand::Clear));
    let seen = rig
        .until(
            "the new session",
            |r| matches!(r, UiEvent::Note(text) if text.starts_with("new session ")),
        )
        .await;
    assert!(seen.contains(&UiEvent::ClearNotes), "{seen:?}");
    let cleared = note_texts(&seen).pop().expect("a note");
    // Issue 36 item 5: the two sessions started within the minute and
    // share their first 8 characters; the hint's prefix names the
    // previous one alone.
    let prefix = cleared
        .split("`soba -r ")
        .nth(1)
        .and_then(|rest| rest.split('`').next())
        .expect("a resume hint");
    assert!(
        cleared.ends_with(&format!(
            "the previous one ({prefix}) is kept: /resume or `soba -r {prefix}` opens it (an unused one is removed)"
        )),
        "{cleared}"
    );
    let dir = before[0].parent().expect("the sessions folder");
    let found = soba_store::reader::find_session(dir, prefix).expect("one session");
    assert!(before.contains(&found.path), "{cleared}");
    // The new session's id is spelled so that no earlier one shares it
    // (a walk found `new session 01a2512a`, which matched 2).
    let new_prefix = cleared
        .strip_prefix("new session ")
        .and_then(|rest| rest.split(';').next())
        .expect("the new session's id");
    assert!(
        before.iter().all(|path| !path
            .file_name()
            .and_then(|name| name.to_str())
            .is_some_and(|name| name.starts_with(new_prefix))),
        "{cleared}"
    );
    // The resume picker spells it the same way.
    rig.send(Action::Command(SlashCommand::Resume));
    let seen = rig
        .until("the picker", |r| {
            matches!(r, UiEvent::Overlay(Overlay::Picker(_)))
        })
        .await;
    let Some(UiEvent::Overlay(Overlay::Picker(picker))) = seen.last() else {
        unreachable!("until returned on a picker")
    };
    let row = picker
        .items
        .iter()
        .find(|item| item.key == found.path.display().to_string())
        .expect("the previous session's row");
    assert!(
        row.label.starts_with(&format!("{prefix}  ")),
        "{}",
        row.label
    );
    let after = rig.session_logs();
    assert!(
        before.iter().all(|log| after.contains(log)),
        "the old session stays"
    );
    assert_eq!(after.len(), before.len() + 2, "{after:?}");
    rig.quit().await;
}

/// `/usage` prices with the config's `models.<id>.inputPrice` and
/// `outputPrice`, as `soba replay` does (the walk: it said "not priced"
/// with prices set).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_prices_with_the_configs_prices() {
    let mut rig = rig_with(|config| {
        config["models"]["fake/test-model"]["inputPrice"] = json!(2.0);
        config["models"]["fake/test-model"]["outputPrice"] = json!(10.0);
    })
    .await;
    let usage = soba_core::Usage {
        input: 1_000_000,
        output: 100_000,
        ..soba_core::Usage::default()
    };
    rig.server.push_for(
        "/chat/completions",
        Script::stream(Dialect::Chat, &Reply::text("Hello.").with_usage(usage)),
    );
    rig.send(Action::StartTurn("hi".into()));
    rig.until("the turn's end", |r| matches!(r, UiEvent::Finished(_)))
        .await;
    rig.send(Action::Command(SlashCommand::Usage));
    let seen = rig
        .until(
            "the usage",
            |r| matches!(r, UiEvent::Note(text) if text.starts_with("/usage")),
        )
        .await;
    let usage_text = note_texts(&seen).pop().expect("a note");
    let cost = usage_text.lines().last().expect("a cost line");
    assert_eq!(cost, "cost            $3.0000 (prices from your config)");
}

fn note_texts(seen: &[UiEvent]) -> Vec<String> {
    seen.iter()
        .filter_map(|r| match r {
            UiEvent::Note(text) => Some(text.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capsule_commands_and_model_switch() {
    let mut rig = rig().await;
    rig.approved_turn().await;
    // /compact makes a capsule to export.
    rig.slow_summary();
    rig.send(Action::Command(SlashCommand::Compact {
        save: false,
        instructions: None,
    }));
    let seen = rig
        .until("the end", |r| matches!(r, UiEvent::Finished(_)))
        .await;
    let checkpoint = seen
        .iter()
        .find_map(|r| match r {
            UiEvent::BarrierEnded(line) => line.text.rsplit(" · ").next().map(str::to_owned),
            _ => None,
        })
        .expect("a result line with the checkpoint id");
    assert!(checkpoint.starts_with("ck_"), "{checkpoint}");
    rig.send(Action::Command(SlashCommand::CapsuleExport {
        checkpoint: checkpoint.clone(),
        path: "handoff.capsule.md".into(),
        force: false,
    }));
    rig.send(Action::Command(SlashCommand::CapsuleExport {
        checkpoint: checkpoint.clone(),
        path: "../outside.capsule.md".into(),
        force: false,
    }));
    rig.send(Action::Command(SlashCommand::CapsuleLoad {
        path: "handoff.capsule.md".into(),
    }));
    rig.send(Action::Command(SlashCommand::CapsuleExport {
        checkpoint: "ck_ffff".into(),
        path: "x.capsule.md".into(),
        force: false,
    }));
    std::fs::write(rig.dir.path().join("ws/bad.capsule.md"), "no front matter")
        .expect("a bad capsule file");
    rig.send(Action::Command(SlashCommand::CapsuleLoad {
        path: "bad.capsule.md".into(),
    }));
    rig.send(Action::Command(SlashCommand::CapsuleList));
    let seen = rig
        .until(
            "the list",
            |r| matches!(r, UiEvent::Note(text) if text.starts_with("capsules in this session")),
        )
        .await;
    let notes = note_texts(&seen);
    assert!(
        notes[0].starts_with("wrote handoff.capsule.md ("),
        "{notes:?}"
    );
    assert!(notes[0].ends_with("no secrets found)"), "{notes:?}");
    assert!(
        notes[1].starts_with("error: ../outside.capsule.md is outside the workspace"),
        "{notes:?}"
    );
    assert!(
        notes[2].starts_with("loaded handoff.capsule.md as e_"),
        "{notes:?}"
    );
    assert!(
        notes[2].ends_with("the model sees it as untrusted data"),
        "{notes:?}"
    );
    // The same helpers and messages as `soba capsule`.
    assert!(
            notes[3].starts_with(
                "error: no capsule ck_ffff in this session\n\
                 hint: list the capsules with `soba capsule list` (in soba: /capsule); the newest is ck_"
            ),
            "{}",
            notes[3]
        );
    assert!(
        notes[4].starts_with(&format!(
            "error: cannot load {}: ",
            rig.dir.path().join("ws/bad.capsule.md").display()
        )),
        "{notes:?}"
    );
    assert!(
        notes[5].contains(&format!("  {checkpoint}  user ")),
        "{notes:?}"
    );
    assert!(rig.dir.path().join("ws/handoff.capsule.md").is_file());
    // A handoff of the whole live input, with the LLM summary.
    rig.slow_summary();
    rig.send(Action::Command(SlashCommand::CapsuleCreate {
        title: "Counting handoff".into(),
        force: false,
    }));
    let seen = rig
        .until("the handoff", |r| matches!(r, UiEvent::Note(text) if text.starts_with("wrote ") || text.starts_with("error")))
        .await;
    let note = note_texts(&seen).pop().unwrap_or_default();
    assert!(note.starts_with("wrote .soba/capsules/"), "{note}");
    assert!(note.contains("-counting-handoff.capsule.md ("), "{note}");
    assert!(
        !note.contains("ck_"),
        "the handoff's id is in no session: {note}"
    );
    assert!(
        note.contains("load it into a session with `soba capsule load .soba/capsules/"),
        "{note}"
    );
    assert!(note.contains(", full; "), "{note}");
    // Nothing appended; one flight record, sized by the span it covers.
    let flight = std::fs::read_dir(
        std::fs::read_dir(rig.dir.path().join("home/sessions"))
            .expect("sessions dir")
            .next()
            .expect("one project")
            .expect("readable")
            .path(),
    )
    .expect("project sessions")
    .filter_map(|entry| entry.ok().map(|entry| entry.path()))
    .find(|path| path.display().to_string().ends_with(".flight.jsonl"))
    .expect("a flight log");
    let (records, _) = soba_store::flight::read_flight_records(&flight).expect("flight records");
    let handoff = records.last().expect("a record");
    assert_eq!(
        handoff.level,
        soba_store::flight::FlightLevel::CapsuleCreate
    );
    assert!(handoff.tokens_before.get() > 0, "{handoff:?}");
    // /model appends model_change and reopens the session on the new model.
    rig.send(Action::Command(SlashCommand::Model(Some(
        "fake/other-model".into(),
    ))));
    let seen = rig
        .until(
            "the new header",
            |r| matches!(r, UiEvent::Header(h) if h.model == "fake/other-model"),
        )
        .await;
    drop(seen);
    rig.send(Action::Command(SlashCommand::Budget));
    let seen = rig
        .until(
            "the budget",
            |r| matches!(r, UiEvent::Note(text) if text.starts_with("/budget")),
        )
        .await;
    let budget = note_texts(&seen).pop().unwrap_or_default();
    // hardLimit = 32,000 − 4,000 − 1,000.
    assert!(
        budget
            .lines()
            .any(|line| line.split_whitespace().eq(["hardLimit", "27,000"])),
        "{budget}"
    );
    let types = rig.log_types();
    assert_eq!(
        types.iter().filter(|t| *t == "model_change").count(),
        2,
        "{types:?}"
    );
    assert_eq!(
        types.iter().filter(|t| *t == "context").count(),
        1,
        "{types:?}"
    );
    rig.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conversation_model_as_summarizer_is_warned_about_in_the_conversation() {
    let mut rig = rig_with(|config| {
        config["compaction"]["summarizer"]["model"] = json!("fake/test-model");
    })
    .await;
    rig.send(Action::Command(SlashCommand::Help));
    let seen = rig
        .until(
            "the help",
            |r| matches!(r, UiEvent::Note(text) if text.contains("/budget")),
        )
        .await;
    let notes = note_texts(&seen);
    assert!(
        notes.contains(
            &"warning: compaction.summarizer.model is the conversation model fake/test-model: \
              each compaction costs about as much as a turn; name a cheaper model or \"deterministic\""
                .to_owned()
        ),
        "{notes:?}"
    );
    rig.quit().await;
}

/// Runs one text-only turn answered through OpenAI Responses.
async fn responses_turn(rig: &mut Rig, text: &str) {
    rig.server.push_for(
        "/responses",
        Script::stream(Dialect::Responses, &Reply::text("Noted.")),
    );
    rig.send(Action::StartTurn(text.into()));
    let seen = rig
        .until("the turn's end", |r| matches!(r, UiEvent::Finished(_)))
        .await;
    assert_eq!(seen.last(), Some(&UiEvent::Finished(None)), "{seen:#?}");
}

/// Runs an idle `/compact` and returns its result line.
async fn compact(rig: &mut Rig) -> String {
    rig.send(Action::Command(SlashCommand::Compact {
        save: false,
        instructions: None,
    }));
    let seen = rig
        .until("the end", |r| matches!(r, UiEvent::Finished(_)))
        .await;
    seen.iter()
        .find_map(|r| match r {
            UiEvent::BarrierEnded(line) => Some(line.text.clone()),
            _ => None,
        })
        .expect("a result line")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_continuation_follows_the_model() {
    let mut rig = rig_with(|config| {
        config["providers"]["fake"]["api"] = json!("openai-responses");
        config["models"]["fake/other-model"] =
            json!({"contextWindow": 32000, "maxOutputTokens": 4000});
        config["compaction"]["native"] = json!("auto");
        config["compaction"]["summarizer"]["model"] = json!("deterministic");
    })
    .await;
    let long: String = (0..800).map(|i| format!("w{i} ")).collect();
    responses_turn(&mut rig, &format!("remember {long}")).await;
    responses_turn(&mut rig, "and this").await;
    rig.server
        .push_for("/responses/compact", Script::compaction("gAAAA-first"));
    let result = compact(&mut rig).await;
    assert!(result.starts_with("Compacted (user): "), "{result}");
    // The next request carries the native item instead of the capsule.
    responses_turn(&mut rig, "go on").await;
    let requests = rig.server.requests();
    let compacts: Vec<&serde_json::Value> = requests
        .iter()
        .filter(|r| r.path == "/responses/compact")
        .map(|r| &r.body)
        .collect();
    assert_eq!(compacts.len(), 1);
    assert_eq!(compacts[0]["model"], json!("test-model"));
    let last = requests.last().expect("requests");
    assert_eq!(last.path, "/responses");
    assert!(
        last.body.to_string().contains("gAAAA-first"),
        "{}",
        last.body
    );

    // After /model the compactor is the new model's.
    rig.send(Action::Command(SlashCommand::Model(Some(
        "fake/other-model".into(),
    ))));
    rig.until(
        "the new header",
        |r| matches!(r, UiEvent::Header(h) if h.model == "fake/other-model"),
    )
    .await;
    responses_turn(&mut rig, &format!("more {long}")).await;
    rig.server
        .push_for("/responses/compact", Script::compaction("gAAAA-second"));
    let result = compact(&mut rig).await;
    assert!(result.starts_with("Compacted (user): "), "{result}");
    let models: Vec<serde_json::Value> = rig
        .server
        .requests()
        .iter()
        .filter(|r| r.path == "/responses/compact")
        .map(|r| r.body["model"].clone())
        .collect();
    assert_eq!(models, [json!("test-model"), json!("other-model")]);
    rig.quit().await;
}

/// Issue 36 (first hour) item 4: `/resume` to another session leaves
/// nothing of the session left on screen: its notes (a `/status` of the
/// other session showed in the middle of the resumed conversation) and
/// its scroll position go, and the notes of opening the resumed session
/// follow its conversation instead of landing where the other one ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_another_session_leaves_nothing_of_the_one_left() {
    let mut rig = rig().await;
    let mut state = crate::state::AppState::default();
    let apply = |state: &mut crate::state::AppState, seen: Vec<UiEvent>| {
        for report in seen {
            state.apply(report);
        }
    };
    for text in ["one", "two", "three"] {
        rig.server.push_for(
            "/chat/completions",
            Script::stream(Dialect::Chat, &Reply::text(format!("answer {text}"))),
        );
        rig.send(Action::StartTurn(text.into()));
        let seen = rig
            .until("the turn's end", |r| matches!(r, UiEvent::Finished(_)))
            .await;
        apply(&mut state, seen);
    }
    let first = rig
        .session_logs()
        .into_iter()
        .find(|path| !path.display().to_string().ends_with(".flight.jsonl"))
        .expect("the first session's log");
    rig.send(Action::Command(SlashCommand::Clear));
    let seen = rig
        .until(
            "the new session",
            |r| matches!(r, UiEvent::Note(text) if text.starts_with("new session ")),
        )
        .await;
    apply(&mut state, seen);
    rig.send(Action::Command(SlashCommand::Status));
    let seen = rig
        .until(
            "the status",
            |r| matches!(r, UiEvent::Note(text) if text.starts_with("/status")),
        )
        .await;
    apply(&mut state, seen);
    // Scrolled up in the session left.
    state.scroll = 20;
    rig.send(Action::Picked(
        PickerPurpose::Resume,
        first.display().to_string(),
    ));
    // Its conversation, then the notes of opening it (the budget's
    // warning).
    let seen = rig
        .until(
            "the warning of opening it",
            |r| matches!(r, UiEvent::Note(text) if text.starts_with("warning: ")),
        )
        .await;
    assert!(
        seen.iter()
            .any(|r| matches!(r, UiEvent::History(items) if items.len() > 3)),
        "{seen:#?}"
    );
    apply(&mut state, seen);
    assert_eq!(state.scroll, 0);
    let len = state.history.len();
    assert!(
        state
            .notes
            .iter()
            .all(|(at, text)| *at == len && !text.starts_with("/status")),
        "{:#?}",
        state.notes
    );
    assert!(
        state
            .notes
            .iter()
            .any(|(_, text)| text.starts_with("warning: ")),
        "{:#?}",
        state.notes
    );
    insta::assert_snapshot!("resumed_after_another", screen(&state, 100, 24));
    rig.quit().await;
}

/// Draws `state` on a test terminal; the screen as text, one line per
/// row, ids and token figures (the log's timestamps and ids are counted
/// too) normalized.
fn screen(state: &crate::state::AppState, width: u16, height: u16) -> String {
    let mut terminal = ratatui::Terminal::new(ratatui::backend::TestBackend::new(width, height))
        .expect("a test terminal");
    terminal
        .draw(|frame| crate::render::render(frame, state))
        .expect("drawn");
    let buffer = terminal.backend().buffer();
    let rows: Vec<String> = (0..height)
        .map(|y| {
            let row: String = (0..width).map(|x| buffer[(x, y)].symbol()).collect();
            row.trim_end().to_owned()
        })
        .collect();
    let mut text = rows.join("\n");
    let hex = regex::Regex::new(r"(session |\bck_)[0-9a-f]{4,}").expect("a regex");
    text = hex
        .replace_all(&text, |caps: &regex::Captures<'_>| {
            let id = &caps[0][caps[1].len()..];
            format!("{}{}", &caps[1], "X".repeat(id.len()))
        })
        .into_owned();
    let figures =
        regex::Regex::new(r"[0-9][0-9,]* → [0-9][0-9,]* tokens|│[0-9,]+ tokens").expect("a regex");
    figures
        .replace_all(&text, |caps: &regex::Captures<'_>| {
            caps[0].replace(|ch: char| ch.is_ascii_digit(), "N")
        })
        .into_owned()
}

/// Issue 36 (first hour) item 2: a resumed session opened in the middle
/// of its newest turn (the live stretch starts where the latest capsule
/// keeps from, often after the turn's message): it opens on the newest
/// turn whole, from the message that started it, at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_session_opens_on_its_newest_turn_whole() {
    let mut first = rig().await;
    first.approved_turn().await;
    first.approved_turn().await;
    first.send(Action::Command(SlashCommand::Compact {
        save: false,
        instructions: None,
    }));
    first
        .until("the compaction's end", |r| {
            matches!(r, UiEvent::Finished(_))
        })
        .await;
    let (_, dir, server) = first.quit_keeping_all().await;

    let mut resumed = rig_at(server, dir, &Start::Continue, |_| {});
    let seen = resumed
        .until(
            "the history",
            |r| matches!(r, UiEvent::History(items) if !items.is_empty()),
        )
        .await;
    let Some(UiEvent::History(items)) = seen.last() else {
        unreachable!("until returned on a history")
    };
    assert_eq!(
        items.first(),
        Some(&HistoryItem::Event(
            "earlier conversation not loaded: PageUp loads it (/rewind lists every message)".into()
        )),
        "{items:#?}"
    );
    // The marker, then the newest turn from its message: the last turn
    // ran `seq` and answered.
    assert_eq!(
        items.get(1),
        Some(&HistoryItem::User("list the numbers".into())),
        "{items:#?}"
    );
    assert_eq!(
        items
            .iter()
            .filter(|item| matches!(item, HistoryItem::User(_)))
            .count(),
        1,
        "{items:#?}"
    );
    let mut state = crate::state::AppState::default();
    for report in seen {
        state.apply(report);
    }
    insta::assert_snapshot!("resumed_mid_turn", screen(&state, 78, 20));
    resumed.quit().await;
}
