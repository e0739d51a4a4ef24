//! The interactive agent (`soba`, SPEC §11.2–§11.3): a ratatui terminal UI
//! over a background engine task, a front door over `soba-workspace` (the
//! `soba` binary calls [`run`]). The UI loop reads keys from a polling
//! thread and engine reports from a channel, updates `state::AppState`
//! and draws it with the pure `render::render`; the `worker::Worker`
//! owns the session, runs turns and `/compact` on their own tasks and
//! executes slash commands.

#![warn(missing_docs)]

pub mod command;
pub mod completion;
pub mod history;
pub mod mention;
pub mod preview;
pub mod render;
pub mod state;
pub mod view;
mod worker;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossterm::event::{self, Event, KeyCode};
use ratatui::DefaultTerminal;
use soba_engine::tool::ToolRegistry;
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};

use history::HistoryFile;
use soba_workspace::context::{Context, Options};
use soba_workspace::error::{Result, WorkspaceError};
use soba_workspace::setup;
use soba_workspace::tools::{AgentTools, agent_tools};
use state::{Action, AppState, UiEvent};
use worker::{Launch, Start, Worker};

/// How often the key thread checks whether the UI has gone.
const KEY_POLL: Duration = Duration::from_millis(100);
/// How long the `@` completion list is reused before the workspace is
/// walked again.
const FILE_INDEX_TTL: Duration = Duration::from_secs(10);

/// What the UI loop itself reads and writes: the input history file and
/// the workspace walked for `@` completion.
struct UiFiles {
    history: HistoryFile,
    root: PathBuf,
    indexed_at: Option<Instant>,
}

/// What the agent is told on the command line (`soba [--model ID]
/// [--auto-approve] [--allow TOOL]… [-c | -r [ID]]`).
#[derive(Debug, Clone, Default)]
pub struct Args {
    /// The model (`--model`), else the configured one.
    pub model: Option<String>,
    /// Run every tool call without asking (`--auto-approve`).
    pub auto_approve: bool,
    /// Tools that run without asking (`--allow`).
    pub allow: Vec<String>,
    /// Open the most recent session (`-c`).
    pub continue_session: bool,
    /// Open a session by id, or pick one when empty (`-r [ID]`).
    pub resume: Option<String>,
}

/// How the interactive agent ended, once the terminal is restored.
#[derive(Debug)]
pub struct Ended {
    /// The line to print: how to resume the session, or that it was not
    /// saved in full and where the rest is; none for a session removed as
    /// unused.
    pub exit_line: Option<String>,
    /// Whether the UI itself failed (the terminal could not be drawn).
    pub outcome: Result,
}

/// Returns which session to open from `-c` and `-r [ID]`.
fn start_of(args: &Args) -> Start {
    match (&args.resume, args.continue_session) {
        (Some(id), _) if !id.trim().is_empty() => Start::Resume(id.trim().to_owned()),
        (Some(_), _) => Start::Pick,
        (None, true) => Start::Continue,
        (None, false) => Start::New,
    }
}

/// Runs the interactive agent. Configuration problems (no model, a bad
/// key, an impossible budget, an unknown session) are returned before the
/// terminal is taken over, so they are reported with the usual exit codes.
pub fn run(options: &Options, args: &Args) -> Result<Ended> {
    let ctx = Context::load(options)?;
    // Shown inside the TUI: stderr is hidden behind the alternate screen.
    let config_warnings: Vec<String> = ctx
        .loaded
        .warnings
        .iter()
        .map(|warning| format!("warning: {warning}"))
        .collect();
    let AgentTools {
        policy,
        config: tool_config,
        workspace,
    } = agent_tools(&ctx, args.auto_approve, &args.allow)?;
    let files = UiFiles {
        history: HistoryFile::in_dir(&ctx.locations.sessions_dir),
        root: workspace.root().to_path_buf(),
        indexed_at: None,
    };
    let sessions_dir = ctx.locations.sessions_dir.clone();
    let launch = Launch {
        ctx,
        model_flag: args.model.clone(),
        policy,
        tool_config,
        workspace,
        tools: Arc::new(ToolRegistry::builtin()),
    };
    let start = start_of(args);
    let (ui_tx, ui_rx) = mpsc::unbounded_channel();
    let (internal_tx, internal_rx) = mpsc::unbounded_channel();
    let (action_tx, action_rx) = mpsc::unbounded_channel();
    let mut worker = Worker::new(launch, ui_tx, internal_tx);
    let runtime = setup::runtime()?;
    let mut notes = config_warnings;
    notes.extend(runtime.block_on(async { worker.open_start(&start) })?);
    let mut terminal = ratatui::try_init()
        .map_err(|err| WorkspaceError::internal("cannot take over the terminal").caused_by(err))?;
    #[allow(clippy::disallowed_methods, reason = "a mode switch, no text")]
    let _ = crossterm::execute!(std::io::stdout(), event::EnableBracketedPaste);
    let result = runtime.block_on(async {
        let worker_task =
            tokio::spawn(worker.run(action_rx, internal_rx, notes, start == Start::Pick));
        let result = ui_loop(&mut terminal, ui_rx, action_tx, files).await;
        // The worker cancels a running turn and stops once the UI's action
        // channel is closed.
        let closed = worker_task.await.ok().flatten();
        (result, closed)
    });
    let (result, closed) = result;
    #[allow(clippy::disallowed_methods, reason = "a mode switch, no text")]
    let _ = crossterm::execute!(std::io::stdout(), event::DisableBracketedPaste);
    ratatui::restore();
    Ok(Ended {
        exit_line: closed.and_then(|closed| exit_line(&closed, &sessions_dir)),
        outcome: result,
    })
}

/// The line printed when the TUI closes a session: how to resume it, or,
/// when another program replaced or removed its log while it was open,
/// that it was NOT saved in full and where the rest is ("saved" only for
/// what is on disk at the path). Nothing for a session removed as unused.
fn exit_line(closed: &worker::Closed, sessions_dir: &std::path::Path) -> Option<String> {
    if closed.removed {
        return None;
    }
    Some(match &closed.recovery {
        Some(recovery) => format!(
            "session {} was NOT saved in full: another program replaced or removed its log while it was open; \
             what soba could not write is in {} (look at it, then append it to the log with cat if you want it back)",
            closed.id,
            soba_core::terminal::sanitize_line(&recovery.display().to_string())
        ),
        None => soba_workspace::context::resume_hint(sessions_dir, &closed.id),
    })
}

/// The most waiting key events applied between two frames: a burst is
/// one frame, and the screen still moves during a very long one.
const KEYS_PER_FRAME: usize = 4_096;

/// Reads terminal events on a thread (crossterm's reader blocks) until the
/// UI drops its receiver or sets `stop`.
fn spawn_key_reader(stop: Arc<AtomicBool>) -> UnboundedReceiver<Event> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            match event::poll(KEY_POLL) {
                Ok(true) => match event::read() {
                    Ok(event) => {
                        if tx.send(event).is_err() {
                            break;
                        }
                    }
                    Err(_) => break,
                },
                Ok(false) => {}
                Err(_) => break,
            }
        }
    });
    rx
}

/// Applies one terminal event to the state; a Tab on an `@` mention first
/// refreshes the workspace's file list when it is older than
/// [`FILE_INDEX_TTL`].
fn on_terminal_event(state: &mut AppState, files: &mut UiFiles, event: Event) -> Vec<Action> {
    match event {
        Event::Key(key) => {
            if key.code == KeyCode::Tab
                && state.overlay.is_none()
                && state.wants_file_index()
                && files
                    .indexed_at
                    .is_none_or(|at| at.elapsed() > FILE_INDEX_TTL)
            {
                state.files = mention::file_index(&files.root);
                files.indexed_at = Some(Instant::now());
            }
            state.on_key(key, Instant::now())
        }
        Event::Paste(text) => {
            state.on_paste(&text, Instant::now());
            Vec::new()
        }
        // A resize simply redraws at the new size.
        _ => Vec::new(),
    }
}

/// The UI loop: draw, then wait for a key, an engine report or a tick.
async fn ui_loop(
    terminal: &mut DefaultTerminal,
    mut reports: UnboundedReceiver<UiEvent>,
    actions: UnboundedSender<Action>,
    mut files: UiFiles,
) -> Result {
    let stop = Arc::new(AtomicBool::new(false));
    let mut keys = spawn_key_reader(stop.clone());
    let mut state = AppState::default();
    let (input_history, note) = files.history.load();
    state.input_history = input_history;
    if let Some(note) = note {
        state.notes.push((0, note));
    }
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let outcome = loop {
        if let Err(err) = terminal.draw(|frame| render::render(frame, &state)) {
            break Err(WorkspaceError::internal("cannot draw the terminal").caused_by(err));
        }
        let mut pending = tokio::select! {
            Some(event) = keys.recv() => on_terminal_event(&mut state, &mut files, event),
            report = reports.recv() => match report {
                Some(report) => state.apply(report),
                None => break Ok(()),
            },
            _ = tick.tick() => {
                if state.last_ctrl_c.is_some_and(|at| at.elapsed() > state::DOUBLE_CTRL_C) {
                    state.last_ctrl_c = None;
                    state.hint = None;
                }
                Vec::new()
            }
        };
        let submitted = state.input_history.take_unsaved();
        if let Some(note) = files.history.append(&submitted) {
            state.notes.push((state.history.len(), note));
        }
        // Apply whatever else is already waiting before drawing again, so a
        // burst of streamed text or of typed keys costs one frame (a walk's
        // 4,389 characters typed at once took a frame each: 22 s).
        while let Ok(report) = reports.try_recv() {
            pending.extend(state.apply(report));
        }
        for _ in 0..KEYS_PER_FRAME {
            let Ok(event) = keys.try_recv() else {
                break;
            };
            pending.extend(on_terminal_event(&mut state, &mut files, event));
        }
        let mut quit = false;
        for action in pending {
            if action == Action::Quit {
                quit = true;
                break;
            }
            if actions.send(action).is_err() {
                quit = true;
                break;
            }
        }
        if quit {
            break Ok(());
        }
    };
    stop.store(true, Ordering::SeqCst);
    drop(actions);
    outcome
}
