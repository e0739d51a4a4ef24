//! `soba run "<prompt>"` (SPEC §11.4): one turn, non-interactively.
//! Assistant text goes to stdout; tool calls, barriers and result lines to
//! stderr — on a terminal a barrier shows its live percentage in place
//! until its result line replaces it (SPEC §11.2) — and `--json` writes
//! the engine's events as JSON lines on stdout. Exit
//! codes: 0 completed, 1 failed or configuration error, 2 usage, 130
//! SIGINT, 143 SIGTERM, 129 SIGHUP, 255 internal; the last stderr line
//! names the reason. A signal mid-reply saves the text streamed so far as
//! an assistant message ending in an `[interrupted by …]` mark.

use std::io::Write;
use std::sync::{Arc, Mutex};

use soba_engine::agent::Agent;
use soba_engine::barrier::EventSink;
use soba_engine::event::{EngineEvent, TurnEnd};
use soba_engine::session::SessionCore;
use soba_engine::tool::{ApprovalPolicy, Approvals, ToolContext, ToolRegistry};
use soba_provider::client::ModelClient;
use tokio_util::sync::CancellationToken;

use crate::cli::{GlobalArgs, RunArgs};
use crate::error::{CliError, CliResult, ErrorKind};
use soba_workspace::context::Context;
use soba_workspace::session;
use soba_workspace::setup::{self, ModelSetup};
use soba_workspace::tools::{AgentTools, RecordedGrants, agent_tools, result_verdict};

/// The status text of a running barrier (SPEC §11.2), followed by ` · NN%`.
const BARRIER_STATUS: &str = "Compacting context before response";

/// Erases the terminal line the cursor is on and returns to its start.
const CLEAR_LINE: &str = "\r\x1b[2K";

/// `soba run`'s stderr: whole lines, plus the barrier's live percentage.
/// On a terminal the percentage line is redrawn in place with `\r` and
/// replaced by the barrier's result line; elsewhere (a file, a pipe) only
/// the result line is written, so logs hold no control characters.
struct Stderr {
    out: Box<dyn Write + Send>,
    terminal: bool,
    /// The percentage on the live line while a barrier runs on a terminal.
    progress: Option<u8>,
}

impl Stderr {
    fn new(out: Box<dyn Write + Send>, terminal: bool) -> Self {
        Stderr {
            out,
            terminal,
            progress: None,
        }
    }

    /// Shows `percent` on the live line; the figure never goes down.
    fn progress(&mut self, percent: u8) {
        if !self.terminal {
            return;
        }
        let percent = self.progress.map_or(percent, |shown| shown.max(percent));
        self.progress = Some(percent);
        let _ = write!(self.out, "{CLEAR_LINE}{BARRIER_STATUS} · {percent}%");
        let _ = self.out.flush();
    }

    /// Writes one line, keeping a live percentage line below it.
    fn line(&mut self, text: &str) {
        if self.progress.is_some() {
            let _ = write!(self.out, "{CLEAR_LINE}");
        }
        let _ = writeln!(self.out, "{}", soba_core::terminal::sanitize(text));
        if let Some(percent) = self.progress {
            let _ = write!(self.out, "{BARRIER_STATUS} · {percent}%");
        }
        let _ = self.out.flush();
    }

    /// Replaces the live percentage line with the barrier's result line.
    fn finish(&mut self, result_line: &str) {
        if self.progress.take().is_some() {
            let _ = write!(self.out, "{CLEAR_LINE}");
        }
        let _ = writeln!(self.out, "{}", soba_core::terminal::sanitize(result_line));
        let _ = self.out.flush();
    }
}

/// Prints engine events for `soba run`.
struct Printer {
    json: bool,
    tools: Arc<ToolRegistry>,
    policy: ApprovalPolicy,
    /// Whether stdout ends with a newline (or nothing was written).
    at_line_start: Mutex<bool>,
    stderr: Mutex<Stderr>,
    /// The session log, read for the length that keeps its ids unique.
    log: Option<std::path::PathBuf>,
    /// The text streamed since the last appended assistant message: what
    /// a signal mid-reply saves as the interrupted reply.
    streamed: Mutex<String>,
}

impl Printer {
    fn end_stdout_line(&self) {
        if let Ok(mut at_start) = self.at_line_start.lock()
            && !*at_start
        {
            let mut stdout = crate::output::stdout();
            let _ = writeln!(stdout);
            let _ = stdout.flush();
            *at_start = true;
        }
    }

    fn with_stderr(&self, write: impl FnOnce(&mut Stderr)) {
        if let Ok(mut stderr) = self.stderr.lock() {
            write(&mut stderr);
        }
    }

    fn eprint(&self, text: &str) {
        self.with_stderr(|stderr| stderr.line(text));
    }

    fn print(&self, event: EngineEvent) {
        if let Ok(mut streamed) = self.streamed.lock() {
            match &event {
                EngineEvent::TextDelta { text } => streamed.push_str(text),
                EngineEvent::AssistantMessage { .. } => streamed.clear(),
                _ => {}
            }
        }
        if self.json {
            let mut stdout = crate::output::stdout();
            let _ = writeln!(
                stdout,
                "{}",
                soba_core::terminal::sanitize_json(&event.to_json().to_string())
            );
            let _ = stdout.flush();
            return;
        }
        match event {
            EngineEvent::TextDelta { text } => {
                if text.is_empty() {
                    return;
                }
                // The flag's lock is taken first, as in `end_stdout_line`.
                if let Ok(mut at_start) = self.at_line_start.lock() {
                    let mut stdout = crate::output::stdout();
                    let _ = stdout.write_all(text.as_bytes());
                    let _ = stdout.flush();
                    *at_start = text.ends_with('\n');
                }
            }
            EngineEvent::AssistantMessage { tool_calls, .. } if !tool_calls.is_empty() => {
                self.end_stdout_line();
            }
            EngineEvent::ToolResult {
                name,
                call,
                is_error,
                bytes,
            } => {
                let verdict = result_verdict(&self.tools, &self.policy, &name, is_error, bytes);
                // The call names model-chosen arguments: one line, escaped.
                self.eprint(&format!(
                    "tool {} → {verdict}",
                    soba_core::terminal::Line(&call)
                ));
            }
            EngineEvent::Hygiene {
                reclaimed, stubbed, ..
            } => {
                self.eprint(&format!(
                    "hygiene: {stubbed} tool outputs pruned, {reclaimed} tokens reclaimed"
                ));
            }
            EngineEvent::CompactionStart { estimate, .. } => {
                self.end_stdout_line();
                if let Some(estimate) = estimate {
                    // The model id comes from configuration: one line, escaped.
                    self.eprint(&format!(
                        "{} · Ctrl-C cancels",
                        soba_core::terminal::Line(&estimate.line())
                    ));
                }
                self.with_stderr(|stderr| stderr.progress(0));
            }
            EngineEvent::CompactionProgress { percent, .. } => {
                self.with_stderr(|stderr| stderr.progress(percent));
            }
            EngineEvent::CompactionEnd(end) => {
                let short = self
                    .log
                    .as_deref()
                    .map_or(soba_core::id::MIN_SHORT_HEX, setup::short_id_len);
                let line = end.result_line(|id| id.short_with(short));
                self.with_stderr(|stderr| stderr.finish(&line));
            }
            EngineEvent::Warning { message } => {
                self.end_stdout_line();
                self.eprint(&format!("warning: {message}"));
            }
            _ => {}
        }
    }
}

/// Opens the session the turn runs in: a new one, the most recent one
/// (`-c`) or the one named by `--resume`.
fn open(
    ctx: &Context,
    args: &RunArgs,
    setup: &ModelSetup,
    tools: &ToolRegistry,
) -> CliResult<SessionCore> {
    let wanted = match (&args.resume, args.continue_session) {
        (Some(id), _) => Some(id.as_str()),
        (None, true) => None,
        (None, false) => {
            let (core, warnings) = setup::create_session(ctx, setup, tools)?;
            for warning in warnings {
                crate::output::errln!("warning: {warning}");
            }
            return Ok(core);
        }
    };
    let summary = ctx.select_session(wanted)?;
    let (core, diagnostics) = session::resume_on(ctx, &summary.path, setup, tools)?;
    for diagnostic in diagnostics {
        crate::output::errln!("warning: session {}: {diagnostic}", summary.id);
    }
    Ok(core)
}

/// Runs `soba run`. Hints are folded into the error line, so the last
/// line on stderr always names the reason (SPEC §11.4).
pub fn cmd_run(args: &RunArgs, global: &GlobalArgs) -> CliResult {
    run_turn(args, global).map_err(|mut err| {
        if !err.hints.is_empty() {
            err.message = format!("{} ({})", err.message, err.hints.join("; "));
            err.hints.clear();
        }
        err
    })
}

/// Prints an error's hints (the onboarding of a missing model or key) as
/// lines of their own before it, so the error stays the last line.
fn guide_first(mut err: CliError) -> CliError {
    for hint in err.hints.drain(..) {
        crate::output::errln!("hint: {hint}");
    }
    err
}

fn run_turn(args: &RunArgs, global: &GlobalArgs) -> CliResult {
    let ctx = Context::load(&global.options())?;
    let _logs = crate::logging::init(&ctx.env);
    crate::output::print_warnings(&ctx);
    let resolved = setup::resolve_model(&ctx, args.model.as_deref()).map_err(guide_first)?;
    let setup = ModelSetup::resolve(&ctx, &resolved.id)?;
    let budget = setup.budget(&ctx)?;
    if let Some(line) = session::server_window_line(&setup) {
        crate::output::errln!("{line}");
    }
    for warning in budget.warnings() {
        crate::output::errln!("warning: {warning}");
    }
    let client: Arc<dyn ModelClient> = Arc::from(setup.client(&ctx).map_err(guide_first)?);
    let mut notes = Vec::new();
    let summarizer = setup::summarizer(&ctx, &setup, &mut notes)?;
    for note in notes {
        crate::output::errln!("{note}");
    }
    let AgentTools {
        policy,
        config: tool_config,
        workspace,
    } = agent_tools(&ctx, args.auto_approve, &args.allow)?;
    let tools = Arc::new(ToolRegistry::builtin());
    let mut core = open(&ctx, args, &setup, &tools)?;
    setup::install_native(&ctx, &setup, &mut core)?;
    let (_, warnings) = setup::snapshot_agents_md(&mut core, &ctx.workspace.root)?;
    for warning in warnings {
        crate::output::errln!("warning: {warning}");
    }
    let session_id = core.header().id.clone();
    // A resumed session's "always" answers still hold (SPEC §11.1: they
    // last as long as the session).
    let approvals = Arc::new(Approvals::non_interactive(policy.clone()));
    match soba_workspace::tools::recorded_grants(&ctx, &core) {
        RecordedGrants::Restored(recorded) => approvals.restore(&recorded),
        RecordedGrants::Ignored(note) => crate::output::errln!("note: {note}"),
        RecordedGrants::None => {}
    }
    tracing::info!(
        session = %session_id,
        model = %setup.info.id,
        provider = %setup.provider.name,
        base_url = %soba_provider::probe::shown_url(&setup.provider.base_url),
        "soba run: turn starts"
    );
    let log = core.log_path().to_path_buf();
    let core = Arc::new(tokio::sync::Mutex::new(core));
    let session = core.clone();
    let printer = Arc::new(Printer {
        log: Some(log),
        json: args.json,
        tools: tools.clone(),
        policy: policy.clone(),
        at_line_start: Mutex::new(true),
        streamed: Mutex::new(String::new()),
        stderr: Mutex::new(Stderr::new(
            Box::new(crate::output::raw_stderr()),
            crate::output::stderr_is_terminal(),
        )),
    });
    let sink_printer = printer.clone();
    let sink: EventSink = Arc::new(move |event| sink_printer.print(event));
    let agent = Agent {
        barrier: setup::barrier(core, sink, summarizer),
        model: client,
        tools,
        approvals,
        tool_context: ToolContext::new(workspace, tool_config, CancellationToken::new()),
        provider_model: setup.info.wire_model.clone(),
        text_tool_calls: setup.text_tool_calls,
    };
    let runtime = setup::runtime()?;
    let (end, stopped) = runtime.block_on(async {
        let mut signals = StopSignals::install()?;
        let cancel = CancellationToken::new();
        let turn = agent.run_turn(&args.prompt, &cancel);
        tokio::pin!(turn);
        let mut stopped: Option<Stop> = None;
        loop {
            tokio::select! {
                end = &mut turn => break Ok::<_, CliError>((end, stopped)),
                stop = signals.recv() => {
                    if stopped.is_some() {
                        // A second signal does not wait for the turn.
                        break Ok((Ok(TurnEnd::Cancelled), stopped));
                    }
                    stopped = Some(stop);
                    cancel.cancel();
                }
            }
        }
    })?;
    printer.end_stdout_line();
    let end = end?;
    tracing::info!(session = %session_id, end = ?end, "soba run: turn ended");
    let in_session = format!("session {session_id}");
    match end {
        TurnEnd::Completed => {
            crate::output::errln!("completed · {in_session}");
            crate::output::errln!(
                "{}",
                soba_workspace::context::resume_hint(
                    &ctx.locations.sessions_dir,
                    session_id.as_str()
                )
            );
            Ok(())
        }
        TurnEnd::Failed(reason) => Err(CliError::user(format!(
            "turn failed: {reason} ({in_session})"
        ))),
        TurnEnd::Cancelled => match stopped {
            Some(stop) => {
                let partial = printer
                    .streamed
                    .lock()
                    .map(|mut streamed| std::mem::take(&mut *streamed))
                    .unwrap_or_default();
                Err(save_interrupted(
                    &runtime,
                    &session,
                    stop,
                    partial,
                    &ctx.locations.sessions_dir,
                    session_id.as_str(),
                ))
            }
            None => Err(CliError::user(format!(
                "the turn was cancelled ({in_session})"
            ))),
        },
        TurnEnd::Denied { call } => Err(CliError::user(format!(
            "the turn stopped: {} was denied ({in_session})",
            soba_core::terminal::sanitize_line(&call)
        ))),
        TurnEnd::Stale => Err(CliError::user(format!(
            "the turn ended: the session moved during compaction ({in_session})"
        ))),
    }
}

/// A signal that stops `soba run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// SIGINT (Ctrl-C): exit 130.
    Interrupt,
    /// SIGTERM: exit 143.
    Terminate,
    /// SIGHUP (the terminal was closed): exit 129.
    HangUp,
}

impl Stop {
    fn name(self) -> &'static str {
        match self {
            Stop::Interrupt => "SIGINT",
            Stop::Terminate => "SIGTERM",
            Stop::HangUp => "SIGHUP",
        }
    }

    fn kind(self) -> ErrorKind {
        match self {
            Stop::Interrupt => ErrorKind::Interrupted,
            Stop::Terminate => ErrorKind::Terminated,
            Stop::HangUp => ErrorKind::HungUp,
        }
    }
}

/// The handlers of the signals that stop a turn.
struct StopSignals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Installs the handlers; must run inside the runtime.
    fn install() -> CliResult<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        let install = |kind| {
            signal(kind).map_err(|err| {
                CliError::internal("cannot install the signal handlers").caused_by(err)
            })
        };
        Ok(StopSignals {
            interrupt: install(SignalKind::interrupt())?,
            terminate: install(SignalKind::terminate())?,
            hangup: install(SignalKind::hangup())?,
        })
    }

    /// Waits for the next stop signal.
    async fn recv(&mut self) -> Stop {
        tokio::select! {
            _ = self.interrupt.recv() => Stop::Interrupt,
            _ = self.terminate.recv() => Stop::Terminate,
            _ = self.hangup.recv() => Stop::HangUp,
        }
    }
}

/// Appends the text a signal cut off as an assistant message marked
/// interrupted, and returns the error `soba run` exits with: one line
/// saying what was saved and how to resume.
fn save_interrupted(
    runtime: &tokio::runtime::Runtime,
    session: &Arc<tokio::sync::Mutex<SessionCore>>,
    stop: Stop,
    partial: String,
    sessions_dir: &std::path::Path,
    session_id: &str,
) -> CliError {
    let signal = stop.name();
    let error = |message: String| CliError {
        kind: stop.kind(),
        message,
        source: None,
        hints: Vec::new(),
    };
    if partial.trim().is_empty() {
        return error(format!(
            "interrupted ({signal}): the turn was cancelled before any reply; {}",
            soba_workspace::context::resume_hint(sessions_dir, session_id)
        ));
    }
    let chars = partial.chars().count();
    let appended = runtime.block_on(async {
        let mut core = session.lock().await;
        session::append_interrupted_reply(&mut core, partial, signal)
    });
    match appended {
        Ok(chars) => error(format!(
            "interrupted ({signal}): the turn was cancelled; its partial reply ({chars} characters, marked interrupted) is in the log; {}",
            soba_workspace::context::resume_hint(sessions_dir, session_id)
        )),
        Err(cause) => {
            let mut failed = error(format!(
                "interrupted ({signal}): the turn was cancelled and its partial reply ({chars} characters) could not be saved: {}",
                cause.message
            ));
            failed.source = cause.source;
            failed.hints = cause.hints;
            failed
        }
    }
}

#[cfg(test)]
mod tests {
    use soba_core::{EntryId, IdKind, Quality, TokenCount, Trigger};
    use soba_engine::event::{CompactionEnd, Outcome};

    use super::*;

    /// A stderr that tests can read back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn end() -> CompactionEnd {
        CompactionEnd {
            operation_id: "op_1".into(),
            outcome: Outcome::Completed,
            trigger: Trigger::AutoThreshold,
            tokens_before: TokenCount::new(41_210),
            tokens_after: TokenCount::new(23_480),
            reclaimed: TokenCount::new(17_730),
            checkpoint_id: Some(EntryId::from_uuid(IdKind::Capsule, 0x7f3a_u128 << 64)),
            quality: Some(Quality::Full),
            duration_ms: 900,
            reason: None,
        }
    }

    /// Feeds a barrier with a warning in the middle through a printer and
    /// returns what reached stderr.
    fn check(terminal: bool, expected: &str) {
        let captured = Captured::default();
        let printer = Printer {
            log: None,
            json: false,
            tools: Arc::new(ToolRegistry::builtin()),
            policy: ApprovalPolicy::default(),
            at_line_start: Mutex::new(true),
            streamed: Mutex::new(String::new()),
            stderr: Mutex::new(Stderr::new(Box::new(captured.clone()), terminal)),
        };
        let progress = |percent| EngineEvent::CompactionProgress {
            operation_id: "op_1".into(),
            percent,
        };
        printer.print(EngineEvent::CompactionStart {
            operation_id: "op_1".into(),
            trigger: Trigger::AutoThreshold,
            plan: String::new(),
            tokens_before: TokenCount::new(41_210),
            estimate: None,
        });
        printer.print(progress(12));
        printer.print(EngineEvent::Warning {
            message: "slow summarizer".into(),
        });
        // Progress only goes up on screen, even if an event says less.
        printer.print(progress(7));
        printer.print(progress(82));
        printer.print(EngineEvent::CompactionEnd(end()));
        let written = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        assert_eq!(written, expected);
    }

    #[test]
    fn a_terminal_shows_the_live_percentage_and_keeps_only_the_result_line() {
        let result = end().result_line(|id| id.short_with(4));
        assert!(
            result.starts_with("Compacted (auto_threshold): 41,210 → 23,480 tokens (−43%) · ck_")
        );
        let status = "Compacting context before response";
        check(
            true,
            &format!(
                "\r\x1b[2K{status} · 0%\
                 \r\x1b[2K{status} · 12%\
                 \r\x1b[2Kwarning: slow summarizer\n{status} · 12%\
                 \r\x1b[2K{status} · 12%\
                 \r\x1b[2K{status} · 82%\
                 \r\x1b[2K{result}\n"
            ),
        );
    }

    #[test]
    fn elsewhere_only_the_result_line_is_written() {
        let result = end().result_line(|id| id.short_with(4));
        check(false, &format!("warning: slow summarizer\n{result}\n"));
    }
}
