//! The background engine task of the TUI: owns the open session and its
//! agent, runs turns and `/compact` on their own tasks, executes slash
//! commands, answers approval prompts through a channel, and reports to
//! the UI with [`UiEvent`]s. What acts at once during a barrier and what
//! waits follows SPEC §7.1.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::time::Instant;

use sha2::{Digest, Sha256};
use soba_core::entry::{SkillAction, SkillEntry};
use soba_core::render::CapsuleView;
use soba_core::tokens::group_thousands;
use soba_core::{Capsule, Entry, EntryBody, EntryId, Quality};
use soba_engine::EngineError;
use soba_engine::agent::Agent;
use soba_engine::barrier::{EventSink, Forced};
use soba_engine::event::{CompactionEnd, EngineEvent, Outcome, TurnEnd};
use soba_engine::session::SessionCore;
use soba_engine::tool::{
    ApprovalDecision, ApprovalFuture, ApprovalPolicy, ApprovalRequest, Approvals, Approver,
    ToolConfig, ToolContext, ToolRegistry, Workspace,
};
use soba_provider::client::ModelClient;
use soba_store::reader::SessionLog;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::sync::{Mutex, oneshot};
use tokio_util::sync::CancellationToken;

use super::command::{RewindTarget, SlashCommand};
use super::state::{
    Action, ApprovalView, Header, HistoryItem, Overlay, Picker, PickerItem, PickerPurpose,
    ResultLine, RewindPlan, UiEvent,
};
use super::view;
use crate::cmd::capsule::{self as capsule_files, ExportSource, HandoffInput};
use crate::context::Context;
use crate::engine::{self, ModelSetup};
use crate::error::{CliError, CliResult};

/// Which session to open at launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// A new session.
    New,
    /// The workspace's most recent session (`-c`).
    Continue,
    /// A session by id prefix or path (`-r ID`).
    Resume(String),
    /// A picker of the workspace's sessions (`-r` alone).
    Pick,
}

/// How the worker left the session it had open when the UI quit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed {
    /// The session id.
    pub id: String,
    /// The session was unused (nothing typed, nothing done) and its file
    /// was removed.
    pub removed: bool,
    /// Set when an append was refused because another program replaced or
    /// removed the log: the recovery file holding what was not written.
    pub recovery: Option<std::path::PathBuf>,
}

/// Everything resolved once at launch.
pub struct Launch {
    /// Configuration, workspace and locations.
    pub ctx: Context,
    /// `--model`, when given.
    pub model_flag: Option<String>,
    /// `--auto-approve`, `--allow`, `tools.allow`.
    pub policy: ApprovalPolicy,
    /// `tools.bash.timeoutMs`.
    pub tool_config: ToolConfig,
    /// The tools' confined workspace.
    pub workspace: Workspace,
    /// The agent's tools.
    pub tools: Arc<ToolRegistry>,
}

/// The approver the agent asks: it sends the prompt to the UI and waits
/// for the answer the worker forwards; a dropped answer denies.
pub struct ChannelApprover {
    ui: UnboundedSender<UiEvent>,
    pending: Arc<StdMutex<Option<oneshot::Sender<ApprovalDecision>>>>,
    /// Where a file change's preview reads the current file.
    workspace: Workspace,
}

impl Approver for ChannelApprover {
    fn decide<'a>(&'a self, request: ApprovalRequest<'a>) -> ApprovalFuture<'a> {
        let view = ApprovalView {
            tool: request.tool().to_owned(),
            summary: request.summary(),
            scope: request.session_scope(),
            preview: super::preview::approval_preview(
                &self.workspace,
                request.tool(),
                request.input(),
            ),
        };
        let (answer, wait) = oneshot::channel();
        *self.pending.lock().unwrap_or_else(PoisonError::into_inner) = Some(answer);
        let _ = self.ui.send(UiEvent::Approval(view));
        Box::pin(async move { wait.await.unwrap_or(ApprovalDecision::Deny) })
    }
}

/// What the worker hears from the tasks it started.
pub enum Internal {
    /// An engine event (from the event sink).
    Event(EngineEvent),
    /// A turn or an idle `/compact` finished.
    Done(Result<Finished, EngineError>),
}

/// How a run ended.
pub enum Finished {
    /// A user turn.
    Turn(TurnEnd),
    /// An idle `/compact` (its outcome is the barrier's result line).
    Compact,
}

/// The open session.
struct Live {
    core: Arc<Mutex<SessionCore>>,
    agent: Agent,
    setup: ModelSetup,
    /// The path the conversation view shows, → leaf: at open the core's
    /// live stretch (the newest part, so the first frame never waits on
    /// the whole log), and from the root once the user asks for earlier
    /// history (PageUp); the core keeps only the live stretch, so what
    /// compaction dropped from memory is kept here.
    shown: std::sync::Mutex<Vec<Entry>>,
    /// The ids of the whole file, once a background thread has read them.
    file_ids: FileIds,
}

/// The slot a background thread fills with the ids of the session's file.
type FileIds = Arc<std::sync::Mutex<Option<Vec<soba_core::EntryId>>>>;

/// A turn or `/compact` in progress.
struct Running {
    cancel: CancellationToken,
    /// An idle `/compact` (no inference follows), rather than a turn.
    compact: bool,
    /// `/compact --save`: mirror a full capsule into Project Memory.
    save: bool,
}

/// The background engine task.
pub struct Worker {
    launch: Launch,
    live: Option<Live>,
    ui: UnboundedSender<UiEvent>,
    internal: UnboundedSender<Internal>,
    pending_approval: Arc<StdMutex<Option<oneshot::Sender<ApprovalDecision>>>>,
    in_barrier: Arc<AtomicBool>,
    running: Option<Running>,
    /// `/auto-compact` typed during a barrier, appended after it.
    pending_auto_compact: Option<bool>,
    /// A rewind confirmed during a turn outside a barrier, applied when the
    /// cancelled turn has ended.
    pending_rewind: Option<RewindPlan>,
    /// A rewind was appended during a barrier: if the barrier still
    /// completed (it held the append mutex first), the turn is cancelled.
    rewound_in_barrier: bool,
    /// The open session's log and its approval gate with the session's
    /// "always" grants.
    approvals: Option<(PathBuf, Arc<Approvals>)>,
}

/// A session id as the header spells it: its first 8 characters.
fn note_error(err: impl std::fmt::Display) -> String {
    format!("error: {err}")
}

fn cli_note(err: &CliError) -> String {
    let mut text = format!("error: {}", err.message);
    if let Some(source) = &err.source {
        for cause in source.chain() {
            text.push_str(&format!(": {cause}"));
        }
    }
    for hint in &err.hints {
        text.push_str(&format!("\nhint: {hint}"));
    }
    text
}

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Worker {
    /// Builds the worker; nothing is opened yet.
    pub fn new(
        launch: Launch,
        ui: UnboundedSender<UiEvent>,
        internal: UnboundedSender<Internal>,
    ) -> Self {
        Worker {
            launch,
            live: None,
            ui,
            internal,
            pending_approval: Arc::new(StdMutex::new(None)),
            in_barrier: Arc::new(AtomicBool::new(false)),
            running: None,
            pending_auto_compact: None,
            pending_rewind: None,
            rewound_in_barrier: false,
            approvals: None,
        }
    }

    fn send(&self, event: UiEvent) {
        // The UI dropping its receiver means it is shutting down.
        let _ = self.ui.send(event);
    }

    fn note(&self, text: impl Into<String>) {
        self.send(UiEvent::Note(text.into()));
    }

    fn sink(&self) -> EventSink {
        let internal = self.internal.clone();
        let in_barrier = self.in_barrier.clone();
        Arc::new(move |event: EngineEvent| {
            match &event {
                EngineEvent::CompactionStart { .. } => in_barrier.store(true, Ordering::SeqCst),
                EngineEvent::CompactionEnd(_) => in_barrier.store(false, Ordering::SeqCst),
                _ => {}
            }
            let _ = internal.send(Internal::Event(event));
        })
    }

    /// Opens the session `start` names (before the terminal is taken over,
    /// so configuration errors print normally). Returns notes for the user.
    pub fn open_start(&mut self, start: &Start) -> CliResult<Vec<String>> {
        match start {
            Start::New => self.open_new(),
            Start::Continue => {
                let summary = self.launch.ctx.select_session(None)?;
                self.open_path(&summary.path)
            }
            Start::Resume(id) => {
                let summary = self.launch.ctx.select_session(Some(id))?;
                self.open_path(&summary.path)
            }
            Start::Pick => {
                // Resolve the model now so a missing key fails before the
                // terminal is taken over; the session is chosen in the UI.
                let ctx = &self.launch.ctx;
                let resolved = engine::resolve_model(ctx, self.launch.model_flag.as_deref())?;
                let setup = ModelSetup::resolve(ctx, &resolved.id)?;
                setup.budget(ctx)?;
                // The key too: the client reads it.
                setup.client(ctx)?;
                Ok(Vec::new())
            }
        }
    }

    fn setup_for(&self, id: &str) -> CliResult<ModelSetup> {
        let setup = ModelSetup::resolve(&self.launch.ctx, id)?;
        setup.budget(&self.launch.ctx)?;
        Ok(setup)
    }

    fn open_new(&mut self) -> CliResult<Vec<String>> {
        let resolved = engine::resolve_model(&self.launch.ctx, self.launch.model_flag.as_deref())?;
        let setup = self.setup_for(&resolved.id)?;
        self.live = None;
        let (core, warnings) =
            engine::create_session(&self.launch.ctx, &setup, &self.launch.tools)?;
        let mut notes = self.install(core, setup)?;
        notes.extend(warnings);
        Ok(notes)
    }

    fn open_path(&mut self, path: &Path) -> CliResult<Vec<String>> {
        // The session's model is on its live stretch (a `model_change` or
        // the latest capsule's state): read backwards, not the whole log.
        let entries: Vec<Entry> = soba_store::resume(path)?
            .stretch
            .into_iter()
            .map(|logged| logged.entry)
            .collect();
        let model = engine::model_for_session(
            &self.launch.ctx,
            self.launch.model_flag.as_deref(),
            &entries,
        )?;
        let setup = self.setup_for(&model)?;
        // Drop the open session first: its writer holds the file lock.
        self.live = None;
        let (mut core, diagnostics) =
            engine::open_session(&self.launch.ctx, path, &setup, &self.launch.tools)?;
        if engine::session_model(core.path()).as_deref() != Some(setup.info.id.as_str()) {
            core.append(EntryBody::ModelChange {
                model: setup.info.id.clone(),
            })?;
        }
        let mut notes: Vec<String> = diagnostics
            .into_iter()
            .map(|diagnostic| format!("warning: {diagnostic}"))
            .collect();
        notes.extend(self.install(core, setup)?);
        Ok(notes)
    }

    fn install(&mut self, mut core: SessionCore, setup: ModelSetup) -> CliResult<Vec<String>> {
        let ctx = &self.launch.ctx;
        let mut notes = Vec::new();
        let budget = setup.budget(ctx)?;
        if let engine::WindowSource::Server(source) = &setup.window_source {
            notes.push(format!(
                "context window {} tokens, from the server ({source})",
                soba_core::tokens::group_thousands(setup.info.context_window)
            ));
        }
        notes.extend(
            budget
                .warnings()
                .iter()
                .map(|warning| format!("warning: {warning}")),
        );
        let (_, warnings) = engine::snapshot_agents_md(&mut core, &ctx.workspace.root)?;
        notes.extend(
            warnings
                .into_iter()
                .map(|warning| format!("warning: {warning}")),
        );
        let summarizer = engine::summarizer(ctx, &setup, &mut notes)?;
        let client: Arc<dyn ModelClient> = Arc::from(setup.client(ctx)?);
        // A model switch reopens the session through here, so the native
        // compactor always follows the current model (SPEC §10.3).
        engine::install_native(ctx, &setup, &mut core)?;
        // "Always" grants last as long as the session: a model switch
        // reopens the same log and keeps them.
        let log = core.log_path().to_path_buf();
        let approvals = match self.approvals.take() {
            Some((path, approvals)) if path == log => approvals,
            _ => Arc::new(Approvals::interactive(
                self.launch.policy.clone(),
                Arc::new(ChannelApprover {
                    ui: self.ui.clone(),
                    pending: self.pending_approval.clone(),
                    workspace: self.launch.workspace.clone(),
                }),
            )),
        };
        // The grants the log recorded (a resumed session's "always"
        // answers) count as made in this run.
        if let Some(recorded) = core.derived().approvals {
            approvals.restore(&recorded);
        }
        self.approvals = Some((log, approvals.clone()));
        // The live stretch only: earlier history is read from the log when
        // the user scrolls up for it (`Action::LoadEarlier`).
        let shown = core.path().to_vec();
        let log_path = core.log_path().to_path_buf();
        let core = Arc::new(Mutex::new(core));
        // The short-id length needs every id of the file: a thread reads
        // them off the UI's path (a 1 GB log takes seconds) into a slot the
        // next refresh hands to the core; the stretch's length until then.
        // The thread never holds the core, so closing an unused session
        // still owns it and can remove it.
        let file_ids: FileIds = Arc::new(std::sync::Mutex::new(None));
        let filler = file_ids.clone();
        std::thread::spawn(move || {
            if let Ok(ids) = soba_store::reader::entry_ids(&log_path) {
                *filler.lock().unwrap_or_else(PoisonError::into_inner) = Some(ids);
            }
        });
        let agent = Agent {
            barrier: engine::barrier(core.clone(), self.sink(), summarizer),
            model: client,
            tools: self.launch.tools.clone(),
            approvals,
            tool_context: ToolContext::new(
                self.launch.workspace.clone(),
                self.launch.tool_config.clone(),
                CancellationToken::new(),
            ),
            provider_model: setup.info.wire_model.clone(),
            text_tool_calls: setup.text_tool_calls,
        };
        self.live = Some(Live {
            core,
            agent,
            setup,
            shown: std::sync::Mutex::new(shown),
            file_ids,
        });
        Ok(notes)
    }

    /// Sends the header, the conversation and the sidebar.
    async fn refresh(&self) {
        let Some(live) = &self.live else {
            self.send(UiEvent::Header(Header::default()));
            self.send(UiEvent::History(Vec::new()));
            return;
        };
        let core = live.core.lock().await;
        if let Some(ids) = live
            .file_ids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            core.prime_short_ids(&ids);
        }
        let short = core.short_id_len_now();
        self.send(UiEvent::Header(Header {
            model: core.model_id().to_owned(),
            session: core.header().id.as_str().chars().take(8).collect(),
        }));
        let items = {
            let mut shown = live
                .shown
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if !view::follow_stretch(&mut shown, core.path()) {
                // The stretch does not attach to what was shown (a rewind
                // elsewhere): show the new stretch; earlier history loads
                // on request again.
                *shown = core.path().to_vec();
            }
            let earlier = shown.first().is_some_and(|entry| entry.parent_id.is_some());
            let mut items = view::history_items(&shown, short, self.running.is_some());
            if earlier {
                items.insert(
                    0,
                    HistoryItem::Event(
                        "earlier conversation not loaded: PageUp loads it (/rewind lists every message)"
                            .to_owned(),
                    ),
                );
            }
            self.send(UiEvent::EarlierHistory(earlier));
            items
        };
        self.send(UiEvent::History(items));
        self.send(UiEvent::Sidebar(view::sidebar(&core)));
    }

    /// Runs until the UI quits (its action channel closes or sends Quit).
    pub async fn run(
        mut self,
        mut actions: UnboundedReceiver<Action>,
        mut internal: UnboundedReceiver<Internal>,
        start_notes: Vec<String>,
        pick_at_start: bool,
    ) -> Option<Closed> {
        self.refresh().await;
        for note in start_notes {
            self.note(note);
        }
        if pick_at_start {
            self.resume_picker(true);
        }
        loop {
            tokio::select! {
                biased;
                Some(message) = internal.recv() => match message {
                    Internal::Event(event) => self.on_event(event).await,
                    Internal::Done(result) => self.on_done(result).await,
                },
                action = actions.recv() => match action {
                    None | Some(Action::Quit) => break,
                    Some(action) => self.on_action(action).await,
                },
            }
        }
        self.shutdown(&mut internal).await;
        self.close_session().await
    }

    /// Closes the open session; an unused one (nothing but what opening it
    /// wrote) is removed, so opening `soba` and leaving leaves no file.
    /// Returns `None` when no session was open.
    async fn close_session(&mut self) -> Option<Closed> {
        let Live { core, agent, .. } = self.live.take()?;
        drop(agent);
        let id = core.lock().await.header().id.as_str().to_owned();
        // A task still holding the session (a turn that did not stop in
        // time) has appended a message: nothing to remove then.
        let Ok(core) = Arc::try_unwrap(core) else {
            return Some(Closed {
                id,
                removed: false,
                recovery: None,
            });
        };
        let core = core.into_inner();
        let recovery = core.recovery_file().map(std::path::Path::to_path_buf);
        let removed = match core.close_removing_if_unused() {
            Ok(removed) => removed,
            Err(err) => {
                tracing::warn!("the unused session {id} was not removed: {err}");
                false
            }
        };
        Some(Closed {
            id,
            removed,
            recovery,
        })
    }

    /// Cancels a running turn and waits (briefly) for it to end, so nothing
    /// is appended after the UI is gone.
    async fn shutdown(&mut self, internal: &mut UnboundedReceiver<Internal>) {
        let Some(running) = self.running.take() else {
            return;
        };
        self.deny_pending();
        running.cancel.cancel();
        let wait = async {
            while let Some(message) = internal.recv().await {
                if matches!(message, Internal::Done(_)) {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), wait).await;
    }

    fn deny_pending(&self) {
        if let Some(answer) = self
            .pending_approval
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = answer.send(ApprovalDecision::Deny);
        }
    }

    async fn on_action(&mut self, action: Action) {
        match action {
            Action::StartTurn(text) => self.start_turn(text).await,
            Action::Command(command) => self.on_command(command).await,
            Action::Cancel => {
                self.deny_pending();
                if let Some(running) = &self.running {
                    running.cancel.cancel();
                }
            }
            Action::Approve(decision) => {
                if let Some(answer) = self
                    .pending_approval
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take()
                {
                    let _ = answer.send(decision);
                }
            }
            Action::Picked(purpose, key) => self.on_picked(purpose, key).await,
            Action::Rewind(plan) => self.rewind(plan).await,
            Action::LoadEarlier => self.load_earlier().await,
            Action::Quit => {}
        }
    }

    /// Shows the whole path from the root: the log is read once, now.
    async fn load_earlier(&mut self) {
        let Some(live) = &self.live else {
            return;
        };
        let path = {
            let core = live.core.lock().await;
            core.full_path()
        };
        match path {
            Ok(path) => {
                *live
                    .shown
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = path;
                self.refresh().await;
            }
            Err(err) => self.send(UiEvent::Note(format!(
                "warning: the earlier conversation could not be read ({err})"
            ))),
        }
    }

    async fn ensure_session(&mut self) -> bool {
        if self.live.is_some() {
            return true;
        }
        match self.open_new() {
            Ok(notes) => {
                for note in notes {
                    self.note(note);
                }
                self.refresh().await;
                true
            }
            Err(err) => {
                self.note(cli_note(&err));
                false
            }
        }
    }

    async fn start_turn(&mut self, text: String) {
        if self.running.is_some() {
            // The UI queues input while a turn runs; this is a safety net.
            self.note("a turn is already running; the message was not sent");
            return;
        }
        if !self.ensure_session().await {
            self.send(UiEvent::Finished(None));
            return;
        }
        let Some(live) = &self.live else {
            return;
        };
        // AGENTS.md is snapshotted again at a turn start when it changed (SPEC §5).
        let snapshot = {
            let mut core = live.core.lock().await;
            engine::snapshot_agents_md(&mut core, &self.launch.ctx.workspace.root)
        };
        match snapshot {
            Ok((_, warnings)) => {
                for warning in warnings {
                    self.note(format!("warning: {warning}"));
                }
            }
            Err(err) => self.note(cli_note(&err)),
        }
        // `@path` mentions attach the files they name.
        let attached = super::mention::attach(&self.launch.workspace, &text);
        for note in attached.notes {
            self.note(note);
        }
        let agent = live.agent.clone();
        let cancel = CancellationToken::new();
        self.running = Some(Running {
            cancel: cancel.clone(),
            compact: false,
            save: false,
        });
        let internal = self.internal.clone();
        tokio::spawn(async move {
            let result = agent.run_turn_message(attached.message, &cancel).await;
            let _ = internal.send(Internal::Done(result.map(Finished::Turn)));
        });
    }

    async fn start_compact(&mut self, save: bool, instructions: Option<String>) {
        if self.running.is_some() {
            self.note("a turn is running; /compact waits until it ends");
            return;
        }
        if !self.ensure_session().await {
            self.send(UiEvent::Finished(None));
            return;
        }
        let Some(live) = &self.live else {
            return;
        };
        let barrier = live.agent.barrier.clone();
        let cancel = CancellationToken::new();
        self.running = Some(Running {
            cancel: cancel.clone(),
            compact: true,
            save,
        });
        let internal = self.internal.clone();
        tokio::spawn(async move {
            let result = barrier
                .preflight(Some(Forced::User { instructions }), &cancel)
                .await;
            let _ = internal.send(Internal::Done(result.map(|_| Finished::Compact)));
        });
    }

    async fn on_event(&mut self, event: EngineEvent) {
        match event {
            EngineEvent::TurnStarted { .. } | EngineEvent::ToolResult { .. } => {
                self.refresh().await
            }
            EngineEvent::Hygiene {
                reclaimed, stubbed, ..
            } => {
                self.note(format!(
                    "hygiene: {stubbed} old tool outputs stubbed, {} tokens reclaimed",
                    group_thousands(reclaimed.get())
                ));
                self.refresh().await;
            }
            EngineEvent::CompactionStart { estimate, .. } => {
                let idle = self.running.as_ref().is_some_and(|running| running.compact);
                if let Some(estimate) = estimate {
                    self.note(format!("{} · Esc cancels", estimate.line()));
                }
                self.send(UiEvent::BarrierStarted { idle });
            }
            EngineEvent::CompactionProgress { percent, .. } => {
                self.send(UiEvent::BarrierProgress(percent));
            }
            EngineEvent::CompactionEnd(end) => self.on_compaction_end(end).await,
            EngineEvent::TextDelta { text } => self.send(UiEvent::Delta(text)),
            EngineEvent::AssistantMessage { .. } => {
                self.send(UiEvent::StepDone);
                self.refresh().await;
            }
            EngineEvent::Warning { message } => self.note(format!("warning: {message}")),
            EngineEvent::Retrying { .. } => {
                if let Some(line) = event.retry_line() {
                    self.send(UiEvent::Retrying(line));
                }
            }
            EngineEvent::TurnEnded { .. } => {}
        }
    }

    fn short(&self, core: &SessionCore) -> usize {
        core.short_id_len_now()
    }

    /// The open session's short-id length now (the minimum without one):
    /// every id on one screen is spelled with it.
    async fn short_now(&self) -> usize {
        match &self.live {
            Some(live) => live.core.lock().await.short_id_len_now(),
            None => soba_core::id::MIN_SHORT_HEX,
        }
    }

    /// Reads the whole log (what lies before the core's live stretch), or
    /// says why `doing` cannot go on.
    fn read_log(&self, core: &SessionCore, doing: &str) -> Option<SessionLog> {
        core.read_log()
            .map_err(|err| self.note(format!("cannot {doing}: {err}")))
            .ok()
    }

    async fn on_compaction_end(&mut self, end: CompactionEnd) {
        let Some(live) = &self.live else {
            return;
        };
        let short = {
            let core = live.core.lock().await;
            self.short(&core)
        };
        let text = end.result_line(|id| id.short_with(short));
        if end.outcome == Outcome::Skipped && end.trigger.is_soft() {
            // Why no compaction ran past autoLimit (once a turn): longer
            // than the status bar, so the whole line goes in the
            // conversation too.
            self.note(text.clone());
        }
        let warn = end.outcome != Outcome::Completed || end.quality == Some(Quality::Degraded);
        self.send(UiEvent::BarrierEnded(ResultLine {
            text,
            warn,
            capsule: end.checkpoint_id.as_ref().map(|id| id.as_str().to_owned()),
        }));
        if self.rewound_in_barrier {
            self.rewound_in_barrier = false;
            if end.outcome == Outcome::Completed
                && let Some(running) = &self.running
            {
                // The barrier took the append mutex before the rewind, so
                // it completed; the turn must not go on from the new leaf.
                running.cancel.cancel();
            }
        }
        if let Some(on) = self.pending_auto_compact.take() {
            self.set_auto_compact(on).await;
        }
        if self.running.as_ref().is_some_and(|running| running.save) {
            self.save_to_memory(&end).await;
        }
        self.refresh().await;
    }

    async fn on_done(&mut self, result: Result<Finished, EngineError>) {
        self.running = None;
        self.in_barrier.store(false, Ordering::SeqCst);
        self.deny_pending();
        let reason = match result {
            Ok(Finished::Turn(TurnEnd::Completed)) => None,
            Ok(Finished::Turn(TurnEnd::Cancelled)) => Some(
                "turn cancelled: nothing more was appended; your message stays in the log unanswered"
                    .to_owned(),
            ),
            Ok(Finished::Turn(TurnEnd::Stale)) => {
                Some("turn ended: the conversation was rewound during compaction".to_owned())
            }
            Ok(Finished::Turn(TurnEnd::Failed(reason))) => Some(format!("turn failed: {reason}")),
            Ok(Finished::Turn(TurnEnd::Denied { call })) => Some(format!(
                "turn stopped: you denied {}; type what to do instead",
                soba_core::terminal::sanitize_line(&call)
            )),
            Ok(Finished::Compact) => None,
            Err(err) => Some(note_error(err)),
        };
        if let Some(on) = self.pending_auto_compact.take() {
            self.set_auto_compact(on).await;
        }
        let rewound = match self.pending_rewind.take() {
            Some(plan) => self.apply_rewind(&plan).await,
            None => None,
        };
        self.refresh().await;
        if let Some(note) = rewound {
            self.note(note);
        }
        self.send(UiEvent::Finished(reason));
    }

    async fn on_command(&mut self, command: SlashCommand) {
        let busy = self.running.is_some();
        if busy && !command.acts_during_turn() {
            // The UI queues these; answer rather than interleave with a turn.
            self.note("that command waits until the turn ends");
            return;
        }
        if !matches!(
            command,
            SlashCommand::Resume | SlashCommand::Help | SlashCommand::Quit | SlashCommand::Clear
        ) && !self.ensure_session().await
        {
            if matches!(command, SlashCommand::Compact { .. }) {
                self.send(UiEvent::Finished(None));
            }
            return;
        }
        match command {
            SlashCommand::Budget => {
                if let Some(live) = &self.live {
                    let text = view::budget_text(&*live.core.lock().await);
                    self.note(text);
                }
            }
            SlashCommand::Compact { save, instructions } => {
                self.start_compact(save, instructions).await
            }
            SlashCommand::AutoCompact(on) => {
                if self.in_barrier.load(Ordering::SeqCst) {
                    self.pending_auto_compact = Some(on);
                    self.note(format!(
                        "auto-compact {}: recorded when the running compaction ends",
                        if on { "on" } else { "off" }
                    ));
                } else {
                    self.set_auto_compact(on).await;
                }
            }
            SlashCommand::Model(None) => self.model_picker().await,
            SlashCommand::Model(Some(id)) => self.switch_model(&id).await,
            SlashCommand::CapsuleList => self.capsule_list().await,
            SlashCommand::CapsuleCreate { title, force } => {
                self.capsule_create(&title, force).await
            }
            SlashCommand::CapsuleExport {
                checkpoint,
                path,
                force,
            } => self.capsule_export(&checkpoint, &path, force).await,
            SlashCommand::CapsuleLoad { path } => self.capsule_load(&path).await,
            SlashCommand::Checkpoint { kind, note } => {
                let appended = self.append(EntryBody::Checkpoint { kind, note }).await;
                if let Some(entry) = appended {
                    let short = self.short_now().await;
                    self.note(format!(
                        "{} recorded as {}",
                        kind.as_str(),
                        entry.id.short_with(short)
                    ));
                }
            }
            SlashCommand::Rewind(target) => self.rewind_command(target).await,
            SlashCommand::Resume => self.resume_picker(false),
            SlashCommand::Skill { name, off } => self.skill(&name, off).await,
            SlashCommand::Help => self.note(super::command::help_text()),
            SlashCommand::Quit => {}
            SlashCommand::Clear => self.clear().await,
            SlashCommand::Usage => {
                if let Some(live) = &self.live {
                    let core = live.core.lock().await;
                    if let Some(log) = self.read_log(&core, "add up the usage") {
                        let entries: Vec<Entry> = log
                            .entries()
                            .iter()
                            .map(|logged| logged.entry.clone())
                            .collect();
                        let (prices, warnings) = match self.launch.ctx.config().price_table() {
                            Ok(priced) => (priced.table, priced.warnings),
                            Err(conflict) => (
                                soba_replay::price::PriceTable::new(),
                                vec![format!("{conflict}; the config's prices are not used")],
                            ),
                        };
                        let text = view::usage_text(core.model_id(), &entries, &prices);
                        drop(core);
                        for warning in warnings {
                            self.note(format!("warning: {warning}"));
                        }
                        self.note(text);
                    }
                }
            }
            SlashCommand::Status => {
                if let Some(live) = &self.live {
                    let core = live.core.lock().await;
                    let text = view::status_text(&core, core.log_path());
                    drop(core);
                    self.note(text);
                }
            }
        }
    }

    /// `/clear`: leaves this session (kept unless unused) for a new one,
    /// and says so.
    async fn clear(&mut self) {
        let previous = match &self.live {
            Some(live) => Some(live.core.lock().await.header().id.as_str().to_owned()),
            None => None,
        };
        // The screen starts empty: the notes shown were about the session
        // left (the new session's own notes follow).
        self.send(UiEvent::ClearNotes);
        self.on_picked(PickerPurpose::Resume, String::new()).await;
        let Some(live) = &self.live else {
            return;
        };
        let now = live.core.lock().await.header().id.as_str().to_owned();
        if previous.as_deref() == Some(now.as_str()) {
            return;
        }
        let dir = &self.launch.ctx.locations.sessions_dir;
        self.note(match previous {
            Some(previous) => {
                // Both were likely started within the minute: the prefix
                // that tells the previous one apart, for `soba -r`.
                let prefix = crate::context::session_prefix(dir, &previous);
                format!(
                    "new session {}; the previous one ({prefix}) is kept: /resume or `soba -r {prefix}` opens it (an unused one is removed)",
                    crate::context::session_prefix(dir, &now),
                )
            }
            None => format!(
                "new session {}",
                crate::context::session_prefix(dir, &now)
            ),
        });
    }

    /// Appends an entry to the open session, reporting failures as notes.
    async fn append(&self, body: EntryBody) -> Option<Entry> {
        let live = self.live.as_ref()?;
        let appended = live.core.lock().await.append(body);
        match appended {
            Ok(entry) => {
                self.refresh().await;
                Some(entry)
            }
            Err(err) => {
                self.note(note_error(err));
                None
            }
        }
    }

    async fn set_auto_compact(&self, on: bool) {
        if self
            .append(EntryBody::ConfigChange {
                auto_compact: Some(on),
                approvals: None,
            })
            .await
            .is_some()
        {
            self.note(format!(
                "auto-compact {}{}",
                if on { "on" } else { "off" },
                if on {
                    ""
                } else {
                    ": only hard_limit and context overflow compact now"
                }
            ));
        }
    }

    async fn rewind_command(&mut self, target: Option<RewindTarget>) {
        let Some(live) = &self.live else {
            return;
        };
        let core = live.core.lock().await;
        let short = self.short(&core);
        // Rewind targets may lie before the live stretch: read the log.
        let Some(log) = self.read_log(&core, "rewind") else {
            return;
        };
        let path: Vec<Entry> = log.path().into_iter().map(|l| l.entry.clone()).collect();
        let entries: Vec<Entry> = log.entries().iter().map(|l| l.entry.clone()).collect();
        drop(log);
        let found = match &target {
            None => {
                let items = view::rewind_choices(&path, short);
                drop(core);
                if items.is_empty() {
                    self.note("nothing to rewind to yet");
                } else {
                    self.send(UiEvent::Overlay(Overlay::Picker(Picker {
                        title: "Rewind to (newest first)".to_owned(),
                        purpose: PickerPurpose::Rewind,
                        items,
                        selected: 0,
                        note: None,
                    })));
                }
                return;
            }
            Some(RewindTarget::Nth(n)) => view::nth_user_message(&path, *n),
            Some(RewindTarget::Id(id)) => view::find_entry(&entries, id),
        };
        let planned = found.and_then(|entry| view::plan_rewind(&core, entry, &entries, &path));
        drop(core);
        match planned {
            Ok(plan) => self.send(UiEvent::Overlay(Overlay::ConfirmRewind(plan))),
            Err(problem) => self.note(problem),
        }
    }

    async fn rewind(&mut self, plan: RewindPlan) {
        if self.running.is_none() || self.in_barrier.load(Ordering::SeqCst) {
            // During a barrier the rewind acts at once: the barrier ends
            // stale and appends nothing (SPEC §7.1).
            self.rewound_in_barrier = self.running.is_some();
            let note = self.apply_rewind(&plan).await;
            self.refresh().await;
            // After the shorter conversation, so the note is not one of the
            // rewound-past notes the screen drops.
            if let Some(note) = note {
                self.note(note);
            }
        } else {
            // Outside a barrier a tool or a request may still append: end
            // the turn first, then move the leaf.
            self.pending_rewind = Some(plan);
            self.deny_pending();
            if let Some(running) = &self.running {
                running.cancel.cancel();
            }
            self.note("rewinding once the running turn has stopped");
        }
    }

    /// Moves the leaf for `plan`; returns the note to show once the
    /// shorter conversation is on screen.
    async fn apply_rewind(&mut self, plan: &RewindPlan) -> Option<String> {
        let live = self.live.as_ref()?;
        let target = match EntryId::parse(&plan.leaf) {
            Ok(target) => target,
            Err(err) => return Some(note_error(err)),
        };
        let result = live.core.lock().await.rewind(target.clone());
        match result {
            Ok(_) => {
                if let Some(text) = &plan.restore_input {
                    self.send(UiEvent::SetInput(text.clone()));
                    // The leaf is the entry before the message: name what the
                    // user picked, not an id the picker never showed.
                    Some(
                        "rewound to before your message, which is back in the input box; files on disk are unchanged"
                            .to_owned(),
                    )
                } else {
                    let short = self.short_now().await;
                    Some(format!(
                        "rewound to {}; files on disk are unchanged",
                        target.short_with(short)
                    ))
                }
            }
            Err(err) => Some(note_error(err)),
        }
    }

    fn resume_picker(&self, at_start: bool) {
        let dir = &self.launch.ctx.locations.sessions_dir;
        let sessions = match soba_store::reader::list_sessions(dir) {
            Ok(sessions) => sessions,
            Err(err) => {
                self.note(note_error(err));
                return;
            }
        };
        let mut items = Vec::new();
        if at_start {
            items.push(PickerItem {
                key: String::new(),
                label: "(a new session)".to_owned(),
            });
        }
        // Ids at the length that tells every session of the folder apart
        // (`soba -r` takes it): sessions started within the minute share
        // their first 8 characters.
        let ids: Vec<&str> = sessions.iter().map(|summary| summary.id.as_str()).collect();
        let id_len = crate::cmd::sessions::shortest_unique_prefix(
            &ids,
            crate::cmd::sessions::MIN_SHORT_SESSION,
        );
        // Unused sessions (left by a crash or an older version) are not
        // worth resuming.
        for summary in sessions.iter().filter(|summary| {
            summary.problem.is_none() && soba_store::reader::has_content(&summary.path)
        }) {
            let glance = soba_store::reader::session_glance(&summary.path);
            items.push(PickerItem {
                key: summary.path.display().to_string(),
                label: format!(
                    "{}  {}  {:>5} messages  {:>9}  {}",
                    summary.id.chars().take(id_len).collect::<String>(),
                    summary
                        .created_at
                        .as_deref()
                        .unwrap_or("?")
                        .chars()
                        .take(16)
                        .collect::<String>()
                        .replace('T', " "),
                    group_thousands(glance.n_messages),
                    view::format_size(usize::try_from(summary.size).unwrap_or(usize::MAX)),
                    glance
                        .title_line()
                        .unwrap_or_else(|| "(no message typed)".to_owned())
                ),
            });
        }
        if items.is_empty() {
            self.note(format!("no sessions in {}", dir.display()));
            return;
        }
        self.send(UiEvent::Overlay(Overlay::Picker(Picker {
            title: "Resume a session (most recent first)".to_owned(),
            purpose: PickerPurpose::Resume,
            items,
            selected: 0,
            note: None,
        })));
    }

    async fn on_picked(&mut self, purpose: PickerPurpose, key: String) {
        match purpose {
            PickerPurpose::Rewind => {
                self.rewind_command(Some(RewindTarget::Id(key))).await;
            }
            PickerPurpose::Resume => {
                if self.running.is_some() {
                    self.note("finish or cancel the running turn before switching sessions");
                    return;
                }
                let mut current = match &self.live {
                    Some(live) => Some(live.core.lock().await.log_path().to_path_buf()),
                    None => None,
                };
                if current.as_deref() == Some(Path::new(&key)) {
                    self.note("that session is already open");
                    return;
                }
                // Leaving an unused session removes it; there is nothing to
                // go back to then.
                if self
                    .close_session()
                    .await
                    .is_some_and(|closed| closed.removed)
                {
                    current = None;
                }
                let opened = if key.is_empty() {
                    self.open_new()
                } else {
                    self.open_path(&PathBuf::from(&key))
                };
                match opened {
                    Ok(notes) => {
                        for note in notes {
                            self.note(note);
                        }
                    }
                    Err(err) => {
                        self.note(cli_note(&err));
                        // Opening closed the current session first: go back to it.
                        if self.live.is_none()
                            && let Some(path) = current
                            && let Err(err) = self.open_path(&path)
                        {
                            self.note(cli_note(&err));
                        }
                    }
                }
                self.refresh().await;
            }
            PickerPurpose::Model => self.switch_model(&key).await,
        }
    }

    async fn model_picker(&self) {
        let current = match &self.live {
            Some(live) => live.core.lock().await.model_id().to_owned(),
            None => String::new(),
        };
        let ids = view::model_ids(self.launch.ctx.config(), &current);
        let (items, note) = view::model_choices(&ids, &current, |id| {
            view::model_access(&self.launch.ctx, id)
        });
        let selected = items
            .iter()
            .position(|item| item.key == current)
            .unwrap_or(0);
        self.send(UiEvent::Overlay(Overlay::Picker(Picker {
            title: "Switch model".to_owned(),
            purpose: PickerPurpose::Model,
            items,
            selected,
            note,
        })));
    }

    async fn switch_model(&mut self, id: &str) {
        if self.running.is_some() {
            self.note("/model waits until the turn ends");
            return;
        }
        // Everything the new model needs (limits, its key, its client) is
        // checked before the log says anything: a switch that cannot work
        // leaves the session, its model and its conversation as they are.
        let setup = match self
            .setup_for(id)
            .and_then(|setup| setup.client(&self.launch.ctx).map(|_| setup))
        {
            Ok(setup) => setup,
            Err(err) => {
                self.note(cli_note(&err));
                self.note("the model was not changed");
                return;
            }
        };
        let Some(live) = &self.live else {
            return;
        };
        let path = live.core.lock().await.log_path().to_path_buf();
        let previous = live.setup.info.id.clone();
        if live.setup.info.id == setup.info.id {
            self.note(format!("already using {}", setup.info.id));
            return;
        }
        if self
            .append(EntryBody::ModelChange {
                model: setup.info.id.clone(),
            })
            .await
            .is_none()
        {
            return;
        }
        // Reopen the session so its limits, counter and client follow the
        // new model (the log's model_change makes resume do the same).
        let flag = self.launch.model_flag.replace(setup.info.id.clone());
        let reopened = self.open_path(&path);
        self.launch.model_flag = flag;
        match reopened {
            Ok(notes) => {
                for note in notes {
                    self.note(note);
                }
                self.note(format!("model {}", setup.info.id));
            }
            Err(err) => {
                self.note(cli_note(&err));
                // Back to the model that worked, in the same session.
                let flag = self.launch.model_flag.replace(previous.clone());
                let restored = self.open_path(&path);
                self.launch.model_flag = flag;
                match restored {
                    Ok(_) => self.note(format!("still on {previous}")),
                    Err(err) => self.note(cli_note(&err)),
                }
            }
        }
        self.refresh().await;
    }

    async fn skill(&self, name: &str, off: bool) {
        let Some(live) = &self.live else {
            return;
        };
        let active = live.core.lock().await.live().pinned_state().skills;
        let current = active.iter().find(|skill| skill.name == name).cloned();
        let body = if off {
            let Some(current) = current else {
                self.note(format!("skill {name} is not active"));
                return;
            };
            SkillEntry {
                name: name.to_owned(),
                action: SkillAction::Deactivate,
                sha256: current.sha256,
                text: String::new(),
            }
        } else {
            let file = self
                .launch
                .ctx
                .workspace
                .project_dir()
                .join("skills")
                .join(format!("{name}.md"));
            let root = &self.launch.ctx.workspace.root;
            // Read beneath the workspace root, as the file tools read: no
            // link swapped in can lead outside, a FIFO never blocks.
            let read = file
                .strip_prefix(root)
                .map_err(|err| crate::engine::WorkspaceReadError::Refused(err.to_string()))
                .and_then(|rel| {
                    crate::engine::read_workspace_file(root, rel, crate::engine::SKILL_MAX_BYTES)
                });
            let text = match read.map(String::from_utf8) {
                Ok(Ok(text)) => text,
                Ok(Err(_)) => {
                    self.note(format!(
                        "skill {name} was not activated: it is not UTF-8 text; skills are markdown files in .soba/skills/"
                    ));
                    return;
                }
                Err(crate::engine::WorkspaceReadError::TooLarge { size }) => {
                    self.note(format!(
                        "skill {name} was not activated: it is {size} bytes, over {}; keep skills short",
                        crate::engine::SKILL_MAX_BYTES
                    ));
                    return;
                }
                Err(crate::engine::WorkspaceReadError::Missing) => {
                    self.note(format!(
                        "skill {name} was not activated: there is no .soba/skills/{name}.md (skills are markdown files in .soba/skills/)"
                    ));
                    return;
                }
                Err(why) => {
                    self.note(format!(
                        "skill {name} was not activated: {why} (skills are markdown files in .soba/skills/)"
                    ));
                    return;
                }
            };
            let sha256 = sha256_hex(&text);
            if current.as_ref().is_some_and(|skill| skill.sha256 == sha256) {
                self.note(format!("skill {name} is already active"));
                return;
            }
            SkillEntry {
                name: name.to_owned(),
                action: SkillAction::Activate,
                sha256,
                text,
            }
        };
        if self.append(EntryBody::Skill(body)).await.is_some() {
            self.note(format!(
                "skill {name} {}",
                if off {
                    "deactivated"
                } else {
                    "activated: its text is part of the system prompt"
                }
            ));
        }
    }

    async fn capsule_list(&self) {
        let Some(live) = &self.live else {
            return;
        };
        let core = live.core.lock().await;
        let short = self.short(&core);
        let Some(log) = self.read_log(&core, "list capsules") else {
            return;
        };
        let on_path: HashSet<&EntryId> = log.path().iter().map(|l| &l.entry.id).collect();
        let mut lines = vec!["capsules in this session (newest first):".to_owned()];
        let mut n = 0;
        for entry in log.entries().iter().rev().map(|l| &l.entry) {
            if let EntryBody::Capsule(capsule) = &entry.body {
                n += 1;
                lines.push(format!(
                    "  {}  {:<15} {:<8} {} → {} tokens{}",
                    entry.id.short_with(short),
                    capsule.trigger.as_str(),
                    capsule.quality.as_str(),
                    group_thousands(capsule.tokens_before.get()),
                    group_thousands(capsule.tokens_after.get()),
                    if on_path.contains(&entry.id) {
                        ""
                    } else {
                        "  (not on the current path)"
                    }
                ));
            }
        }
        if n == 0 {
            lines.push("  (none)".to_owned());
        }
        let project = self.launch.ctx.workspace.project_dir();
        for dir in ["capsules", "memory"] {
            let mut files: Vec<String> = std::fs::read_dir(project.join(dir))
                .into_iter()
                .flatten()
                .filter_map(|entry| entry.ok())
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .filter(|name| name.ends_with(".capsule.md"))
                .collect();
            files.sort();
            if !files.is_empty() {
                lines.push(format!(".soba/{dir}/:"));
                lines.extend(
                    files
                        .into_iter()
                        .map(|name| format!("  {}", soba_core::terminal::Line(&name))),
                );
            }
        }
        drop(core);
        self.note(lines.join("\n"));
    }

    async fn capsule_export(&self, wanted: &str, given: &str, force: bool) {
        let Some(live) = &self.live else {
            return;
        };
        let root = self.launch.ctx.workspace.root.clone();
        let prepared = {
            let core = live.core.lock().await;
            let leaf = core
                .leaf()
                .map(|id| id.as_str().to_owned())
                .unwrap_or_default();
            let Some(log) = self.read_log(&core, "export") else {
                return;
            };
            let entries: Vec<Entry> = log.entries().iter().map(|l| l.entry.clone()).collect();
            capsule_files::prepare_export(
                &root,
                ExportSource {
                    entries: &entries,
                    session: core.header().id.as_str(),
                    leaf: &leaf,
                    counter: core.counter().as_ref(),
                },
                wanted,
                Path::new(given),
            )
        };
        // The file is written without holding the session.
        let written = prepared.and_then(|export| {
            capsule_files::write_file(&root, &export.file, &export.rendered.text, force)
                .map(|()| export)
        });
        match written {
            Ok(export) => self.note(format!(
                "wrote {} ({} tokens; {})",
                capsule_files::display_path(&root, &export.file),
                group_thousands(export.rendered.tokens.get()),
                capsule_files::redaction_note(&export.rendered)
            )),
            Err(err) => self.note(cli_note(&err)),
        }
    }

    async fn capsule_load(&self, given: &str) {
        let Some(live) = &self.live else {
            return;
        };
        let root = self.launch.ctx.workspace.root.clone();
        let file = capsule_files::load_path(&root, Path::new(given));
        let text = match capsule_files::read_capsule_text(&root, &file) {
            Ok(text) => text,
            Err(err) => {
                self.note(cli_note(&err));
                return;
            }
        };
        let checked = {
            let core = live.core.lock().await;
            capsule_files::check_capsule_file(
                &root,
                &file,
                text,
                core.budget().auto_limit(),
                core.counter().as_ref(),
            )
        };
        let loadable = match checked {
            Ok(loadable) => loadable,
            Err(err) => {
                self.note(cli_note(&err));
                return;
            }
        };
        let (details, shown) = (loadable.details(), loadable.entry.path.clone());
        if let Some(appended) = self.append(EntryBody::Context(loadable.entry)).await {
            let short = self.short_now().await;
            self.note(format!(
                "loaded {shown} as {} ({} tokens{details}); the model sees it as untrusted data",
                appended.id.short_with(short),
                group_thousands(loadable.tokens.get()),
            ));
        }
    }

    async fn capsule_create(&self, title: &str, force: bool) {
        let Some(live) = &self.live else {
            return;
        };
        let started = Instant::now();
        let summarizer = live.agent.barrier.summarizer.clone();
        // Everything needed is taken under the lock; the summarizer runs
        // without it.
        let (span, previous, cwd, auto_limit, counter, session, leaf, limits, compaction) = {
            let core = live.core.lock().await;
            let previous: Option<Capsule> = core.path().iter().rev().find_map(|entry| match &entry
                .body
            {
                EntryBody::Capsule(capsule) => Some((**capsule).clone()),
                _ => None,
            });
            let span: Vec<Entry> = core.path()[core.live().region_start()..]
                .iter()
                .filter(|entry| !matches!(entry.body, EntryBody::Capsule(_)))
                .cloned()
                .collect();
            (
                span,
                previous,
                core.header().cwd.clone(),
                core.budget().auto_limit(),
                core.counter().clone(),
                core.header().id.as_str().to_owned(),
                core.leaf()
                    .map(|id| id.as_str().to_owned())
                    .unwrap_or_default(),
                core.flight_limits(),
                core.config().compaction.clone(),
            )
        };
        if span.is_empty() && previous.is_none() {
            self.note("nothing to hand off yet: send a message first");
            return;
        }
        let project_dir = self.launch.ctx.workspace.project_dir();
        let made = capsule_files::create_handoff(HandoffInput {
            title,
            force,
            root: &self.launch.ctx.workspace.root,
            project_dir: &project_dir,
            session: &session,
            leaf: &leaf,
            cwd: Some(&cwd),
            span: &span,
            previous: previous.as_ref(),
            summarizer: summarizer.as_deref(),
            compaction: &compaction,
            auto_limit,
            limits,
            counter: counter.as_ref(),
            started,
        })
        .await;
        match made {
            Ok(handoff) => {
                live.core.lock().await.flight(&handoff.record);
                let mut text = handoff.line(&self.launch.ctx.workspace.root);
                if let Some(reason) = &handoff.fallback {
                    text.push_str(&format!("\nfallback used: {reason}"));
                }
                self.note(text);
            }
            Err(err) => self.note(cli_note(&err)),
        }
    }

    async fn save_to_memory(&self, end: &CompactionEnd) {
        let (Outcome::Completed, Some(id)) = (end.outcome, &end.checkpoint_id) else {
            self.note(format!(
                "not saved to Project Memory: no capsule was made ({}){}",
                end.reason.as_deref().unwrap_or("nothing to compact"),
                if end.outcome == Outcome::Skipped {
                    "; to save the state as it is, write a handoff: /capsule create \"title\""
                } else {
                    ""
                }
            ));
            return;
        };
        if end.quality != Some(Quality::Full) {
            self.note("not saved to Project Memory: the capsule is degraded (fallback used); only full capsules are saved");
            return;
        }
        let Some(live) = &self.live else {
            return;
        };
        let core = live.core.lock().await;
        let Some(EntryBody::Capsule(capsule)) = core.entry(id).map(|entry| &entry.body) else {
            return;
        };
        let leaf = core
            .leaf()
            .map(|leaf| leaf.as_str().to_owned())
            .unwrap_or_default();
        let rendered = capsule_files::render_file(
            &CapsuleView::from(capsule.as_ref()),
            id.as_str(),
            &capsule_files::title_of(capsule, id, self.short(&core)),
            core.header().id.as_str(),
            &leaf,
            core.counter().as_ref(),
        );
        drop(core);
        let file = self
            .launch
            .ctx
            .workspace
            .project_dir()
            .join("memory")
            .join(format!("{id}.capsule.md"));
        match capsule_files::write_file(
            &self.launch.ctx.workspace.root,
            &file,
            &rendered.text,
            false,
        ) {
            Ok(()) => self.note(format!(
                "saved to Project Memory: .soba/memory/{id}.capsule.md ({})",
                capsule_files::redaction_note(&rendered)
            )),
            Err(err) => self.note(cli_note(&err)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;
    use soba_provider::fake::{Dialect, FakeServer, Reply, Script};
    use tokio::sync::mpsc;

    use super::*;
    use crate::cli::GlobalArgs;
    use crate::paths::Env;
    use crate::tui::command::RewindTarget;

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
        let ctx = Context::load_with(env, &ws, &GlobalArgs::default()).expect("config loads");
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
                Script::stream(Dialect::Anthropic, &reply)
                    .with_frame_delay(Duration::from_millis(40)),
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
            Some(vec![crate::tui::state::HistoryItem::Event(
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
        use crate::tui::state::HistoryItem;
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
                "earlier conversation not loaded: PageUp loads it (/rewind lists every message)"
                    .into()
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
                &Reply::text("Counting.").with_tool_call(
                    "c1",
                    "bash",
                    json!({"command": "seq 1 3"}),
                ),
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
        assert_eq!(lines[1], "window          24,000 tokens (maxOutput 2,000)");
        assert!(lines[2].starts_with("session         01"), "{status}");
        assert!(
            lines[3].starts_with("context         ") && lines[3].contains("% of hardLimit 21,000"),
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
        assert!(
            cost.starts_with("cost            $3.0000 ("),
            "{usage_text}"
        );
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
            .until("the list", |r| matches!(r, UiEvent::Note(text) if text.starts_with("capsules in this session")))
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
        let (records, _) =
            soba_store::flight::read_flight_records(&flight).expect("flight records");
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
}
