//! The background engine task of the TUI: owns the open session and its
//! agent (opening, installing, closing), runs turns and `/compact` on their
//! own tasks, dispatches slash commands, answers approval prompts through a
//! channel, and reports to the UI with [`UiEvent`]s. What acts at once
//! during a barrier and what waits follows SPEC §7.1. The session commands
//! are in [`session_ops`], the capsule commands in [`capsules`].

mod capsules;
mod session_ops;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::time::Instant;

use soba_core::tokens::group_thousands;
use soba_core::{Capsule, Entry, EntryBody, Quality};
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
use super::preview::DiffLine;
use super::state::{
    Action, ApprovalView, Header, HistoryItem, Overlay, Picker, PickerPurpose, ResultLine,
    RewindPlan, UiEvent,
};
use super::view;
use soba_workspace::capsule::handoff::{self, HandoffInput};
use soba_workspace::capsule::load as capsule_file;
use soba_workspace::capsule::{self, ExportSource, ListedKind};
use soba_workspace::context::Context;
use soba_workspace::error::{Result, WorkspaceError};
use soba_workspace::memory::{self, MemoryError, NotSaved};
use soba_workspace::setup::{self, ModelSetup};
use soba_workspace::tools::{self, RecordedGrants};
use soba_workspace::{session, skill};

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
    /// live stretch from the start of the turn it begins in
    /// ([`stretch_shown`]: the newest part, so the first frame never waits
    /// on the whole log), and from the root once the user asks for earlier
    /// history (PageUp); the core keeps only the live stretch, so what
    /// compaction dropped from memory is kept here.
    shown: std::sync::Mutex<Vec<Entry>>,
    /// The ids of the whole file, once a background thread has read them.
    file_ids: FileIds,
    /// Edits as their files showed them once they had run or were denied
    /// (whole lines, indentation, context), by call id; `None` where the
    /// file no longer told. Read once each: every refresh rebuilds the view.
    edits: std::sync::Mutex<HashMap<String, Option<Vec<DiffLine>>>>,
}

/// The most bytes read back from the end of a log for the start of the
/// turn a live stretch begins in (the stretch's own lines included): a
/// turn longer than that opens on the part of it the bound reached.
const TURN_START_MAX_BYTES: u64 = 16 << 20;

/// Returns the path the conversation shows for the core's live stretch:
/// the stretch, from the message that started the turn it begins in when
/// it begins mid-turn (it starts where the latest capsule keeps from,
/// often after the turn's message), so the newest turn is shown whole, as
/// other agents show it on resume. The entries above the stretch are read
/// back from the log, bounded by [`TURN_START_MAX_BYTES`]; an unreadable
/// log shows the stretch alone.
fn stretch_shown(core: &SessionCore) -> Vec<Entry> {
    let stretch = core.path();
    let is_message = |entry: &Entry| match &entry.body {
        EntryBody::Message(stored) => Some(stored.message.is_real_user()),
        _ => None,
    };
    let starts_a_turn = stretch.iter().find_map(is_message).unwrap_or(false);
    let Some(parent) = stretch
        .first()
        .and_then(|entry| entry.parent_id.as_ref())
        .filter(|_| !starts_a_turn)
    else {
        return stretch.to_vec();
    };
    let mut shown =
        soba_store::resume::ancestors(core.log_path(), parent, TURN_START_MAX_BYTES, |entry| {
            is_message(entry) == Some(true)
        })
        .unwrap_or_else(|err| {
            tracing::warn!("the start of the newest turn was not read: {err}");
            Vec::new()
        });
    shown.extend_from_slice(stretch);
    shown
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

/// Returns an error as a note, with every cause: "session log" alone
/// hid what failed and where the unsaved lines went.
fn note_error(err: impl std::error::Error) -> String {
    let mut text = format!("error: {err}");
    let mut source = err.source();
    while let Some(cause) = source {
        // Some errors print their cause already: say each once.
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(&format!(": {cause_text}"));
        }
        source = cause.source();
    }
    text
}

fn cli_note(err: &WorkspaceError) -> String {
    let mut text = format!("error: {}", err.message);
    for cause in err.causes() {
        text.push_str(&format!(": {cause}"));
    }
    for hint in &err.hints {
        text.push_str(&format!("\nhint: {hint}"));
    }
    text
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
    pub fn open_start(&mut self, start: &Start) -> Result<Vec<String>> {
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
                let resolved = setup::resolve_model(ctx, self.launch.model_flag.as_deref())?;
                let setup = ModelSetup::resolve(ctx, &resolved.id)?;
                setup.budget(ctx)?;
                // The key too: the client reads it.
                setup.client(ctx)?;
                Ok(Vec::new())
            }
        }
    }

    fn setup_for(&self, id: &str) -> Result<ModelSetup> {
        let setup = ModelSetup::resolve(&self.launch.ctx, id)?;
        setup.budget(&self.launch.ctx)?;
        Ok(setup)
    }

    fn open_new(&mut self) -> Result<Vec<String>> {
        let resolved = setup::resolve_model(&self.launch.ctx, self.launch.model_flag.as_deref())?;
        let setup = self.setup_for(&resolved.id)?;
        self.live = None;
        let (core, warnings) = setup::create_session(&self.launch.ctx, &setup, &self.launch.tools)?;
        let mut notes = self.install(core, setup)?;
        notes.extend(warnings);
        Ok(notes)
    }

    fn open_path(&mut self, path: &Path) -> Result<Vec<String>> {
        // The session's model is on its live stretch (a `model_change` or
        // the latest capsule's state): read backwards, not the whole log.
        let entries: Vec<Entry> = soba_store::resume(path)?
            .stretch
            .into_iter()
            .map(|logged| logged.entry)
            .collect();
        let model = setup::model_for_session(
            &self.launch.ctx,
            self.launch.model_flag.as_deref(),
            &entries,
        )?;
        let setup = self.setup_for(&model)?;
        // Drop the open session first: its writer holds the file lock.
        self.live = None;
        let (core, diagnostics) =
            session::resume_on(&self.launch.ctx, path, &setup, &self.launch.tools)?;
        let mut notes: Vec<String> = diagnostics
            .into_iter()
            .map(|diagnostic| format!("warning: {diagnostic}"))
            .collect();
        notes.extend(self.install(core, setup)?);
        Ok(notes)
    }

    fn install(&mut self, mut core: SessionCore, setup: ModelSetup) -> Result<Vec<String>> {
        let ctx = &self.launch.ctx;
        let mut notes = Vec::new();
        let budget = setup.budget(ctx)?;
        notes.extend(session::server_window_line(&setup));
        notes.extend(
            budget
                .warnings()
                .iter()
                .map(|warning| format!("warning: {warning}")),
        );
        let (_, warnings) = setup::snapshot_agents_md(&mut core, &ctx.workspace.root)?;
        notes.extend(
            warnings
                .into_iter()
                .map(|warning| format!("warning: {warning}")),
        );
        let summarizer = setup::summarizer(ctx, &setup, &mut notes)?;
        let client: Arc<dyn ModelClient> = Arc::from(setup.client(ctx)?);
        // A model switch reopens the session through here, so the native
        // compactor always follows the current model (SPEC §10.3).
        setup::install_native(ctx, &setup, &mut core)?;
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
        match tools::recorded_grants(&self.launch.ctx, &core) {
            RecordedGrants::Restored(recorded) => approvals.restore(&recorded),
            RecordedGrants::Ignored(note) => self.note(note),
            RecordedGrants::None => {}
        }
        self.approvals = Some((log, approvals.clone()));
        // The live stretch (from its turn's start): earlier history is
        // read from the log when the user scrolls up for it
        // (`Action::LoadEarlier`).
        let shown = stretch_shown(&core);
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
            barrier: setup::barrier(core.clone(), self.sink(), summarizer),
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
            edits: std::sync::Mutex::new(HashMap::new()),
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
                *shown = stretch_shown(&core);
            }
            let earlier = shown.first().is_some_and(|entry| entry.parent_id.is_some());
            let mut edits = live.edits.lock().unwrap_or_else(PoisonError::into_inner);
            let workspace = &self.launch.workspace;
            let mut items =
                view::history_items(&shown, short, self.running.is_some(), &mut |call, ran| {
                    edits
                        .entry(call.id.clone())
                        .or_insert_with(|| {
                            super::preview::edit_in_file(workspace, &call.input, ran)
                        })
                        .clone()
                });
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

    /// The preamble of a turn and of an idle `/compact`: nothing may be
    /// running (else `busy` is noted) and a session must be open (opened
    /// or created here; else the UI is told nothing runs). Returns whether
    /// the run can start.
    async fn ready_to_run(&mut self, busy: &str) -> bool {
        if self.running.is_some() {
            self.note(busy);
            return false;
        }
        if !self.ensure_session().await {
            self.send(UiEvent::Finished(None));
            return false;
        }
        self.live.is_some()
    }

    /// Marks a run as started and returns its cancel token and the channel
    /// its end is reported on.
    fn begin_run(
        &mut self,
        compact: bool,
        save: bool,
    ) -> (CancellationToken, UnboundedSender<Internal>) {
        let cancel = CancellationToken::new();
        self.running = Some(Running {
            cancel: cancel.clone(),
            compact,
            save,
        });
        (cancel, self.internal.clone())
    }

    async fn start_turn(&mut self, text: String) {
        // The UI queues input while a turn runs; this is a safety net.
        if !self
            .ready_to_run("a turn is already running; the message was not sent")
            .await
        {
            return;
        }
        let Some(live) = &self.live else {
            return;
        };
        // AGENTS.md is snapshotted again at a turn start when it changed (SPEC §5).
        let snapshot = {
            let mut core = live.core.lock().await;
            setup::snapshot_agents_md(&mut core, &self.launch.ctx.workspace.root)
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
        let (cancel, internal) = self.begin_run(false, false);
        tokio::spawn(async move {
            let result = agent.run_turn_message(attached.message, &cancel).await;
            let _ = internal.send(Internal::Done(result.map(Finished::Turn)));
        });
    }

    async fn start_compact(&mut self, save: bool, instructions: Option<String>) {
        if !self
            .ready_to_run("a turn is running; /compact waits until it ends")
            .await
        {
            return;
        }
        let Some(live) = &self.live else {
            return;
        };
        let barrier = live.agent.barrier.clone();
        let (cancel, internal) = self.begin_run(true, save);
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
        // Leaving the session takes its notes off the screen (`on_picked`).
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
                let prefix = soba_workspace::context::session_prefix(dir, &previous);
                format!(
                    "new session {}; the previous one ({prefix}) is kept: /resume or `soba -r {prefix}` opens it (an unused one is removed)",
                    soba_workspace::context::session_prefix(dir, &now),
                )
            }
            None => format!(
                "new session {}",
                soba_workspace::context::session_prefix(dir, &now)
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
}

#[cfg(test)]
mod tests;
