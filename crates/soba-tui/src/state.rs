//! The TUI's whole visible state ([`AppState`]) and its pure transitions:
//! key presses become [`Action`]s for the engine, engine reports
//! ([`UiEvent`]) update what is shown, and typed input waits in the queue
//! while a turn runs (SPEC §11.2). Rendering reads only this state.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use soba_engine::tool::ApprovalDecision;

use super::command::{self, SlashCommand};
use super::completion;
use super::history::InputHistory;
use super::preview::DiffLine;

/// A second Ctrl-C within this long exits (SPEC §11.2).
pub const DOUBLE_CTRL_C: Duration = Duration::from_secs(2);

/// One item of the conversation, built from the session path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HistoryItem {
    /// A real user message.
    User(String),
    /// Assistant text.
    Assistant(String),
    /// A tool call folded to one line, e.g. `bash: cargo test (exit 1, output 2.3 KiB)`.
    Tool {
        /// The folded line, without the marker.
        line: String,
        /// Whether the result is an error.
        is_error: bool,
        /// The result's text, shown when tool output is expanded (Ctrl-O).
        output: Option<ToolOutput>,
        /// What a file change did (`edit_file`, `write_file`), kept under
        /// the line once the call has run or was denied: folded to its
        /// first lines, whole with Ctrl-O.
        diff: Vec<DiffLine>,
    },
    /// A non-message entry worth showing: a capsule, a checkpoint, a model,
    /// skill or setting change, a loaded capsule file, a hygiene pass.
    Event(String),
}

/// A tool result's text as the expanded view shows it: its first lines,
/// raw (the renderer escapes them).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolOutput {
    /// The first lines.
    pub lines: Vec<String>,
    /// How many lines follow them.
    pub more_lines: usize,
}

/// The sidebar's figures (SPEC §11.2, §13).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sidebar {
    /// Effective tokens now.
    pub effective: u64,
    /// `provider_usage` or `estimated`.
    pub source: String,
    /// Why the figure is estimated although a response reported usage.
    pub source_note: Option<String>,
    /// hardLimit.
    pub hard_limit: u64,
    /// softLimit.
    pub soft_limit: u64,
    /// autoLimit, the soft threshold.
    pub auto_limit: u64,
    /// hygieneLimit.
    pub hygiene_limit: u64,
    /// Whether soft compaction is on.
    pub auto_compact: bool,
    /// The last compaction on the path, one line.
    pub last_compaction: Option<String>,
    /// The full id of the latest capsule on the path.
    pub latest_capsule: Option<String>,
    /// The newest plan on the path (`update_plan`), in its order.
    pub plan: Vec<soba_core::facts::PlanItem>,
}

/// The header: what is running where.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Header {
    /// The active model id.
    pub model: String,
    /// The session id, short.
    pub session: String,
}

/// The one compaction result line kept after a barrier (SPEC §11.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultLine {
    /// `CompactionEnd::result_line`.
    pub text: String,
    /// Whether a fallback was used (or the compaction did not complete).
    pub warn: bool,
    /// The full id of the capsule it reports, when one was made: the line
    /// goes once that capsule is no longer on the path (a rewind).
    pub capsule: Option<String>,
}

/// What the engine is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Activity {
    /// Waiting for input.
    #[default]
    Idle,
    /// A user turn runs (its barriers included).
    Turn,
    /// An idle `/compact` runs; no inference follows.
    Compact,
}

/// A tool call waiting for the user's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalView {
    /// The tool.
    pub tool: String,
    /// The command or path.
    pub summary: String,
    /// What `a` would approve.
    pub scope: String,
    /// What a file change would do: a diff, or a new file's first lines.
    pub preview: Vec<DiffLine>,
}

/// What a picker chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PickerPurpose {
    /// `/rewind`: real user messages and capsules.
    Rewind,
    /// `/resume`: sessions of this workspace.
    Resume,
    /// `/model`: models.
    Model,
}

/// One choice of a picker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PickerItem {
    /// What the engine gets back (an entry id, a session path, a model id).
    pub key: String,
    /// What the user sees.
    pub label: String,
}

/// A list to choose from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Picker {
    /// Its title.
    pub title: String,
    /// What it is for.
    pub purpose: PickerPurpose,
    /// The choices, in display order.
    pub items: Vec<PickerItem>,
    /// The highlighted choice.
    pub selected: usize,
    /// The labels of the choices' columns, shown above them.
    pub header: Option<String>,
    /// One line under the choices (e.g. how many were left out and why).
    pub note: Option<String>,
}

/// A rewind waiting for confirmation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewindPlan {
    /// The full id of the entry the leaf will point at.
    pub leaf: String,
    /// The user message's text to put back in the input box.
    pub restore_input: Option<String>,
    /// The confirmation's lines: target, files modified after it, the
    /// estimated context after the rewind.
    pub lines: Vec<String>,
}

/// A modal box over the conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Overlay {
    /// `y` / `a` / `n`.
    Approval(ApprovalView),
    /// A list to choose from.
    Picker(Picker),
    /// A rewind confirmation.
    ConfirmRewind(RewindPlan),
}

/// The line being typed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InputLine {
    /// The text, newlines included.
    pub text: String,
    /// The cursor, in characters.
    pub cursor: usize,
}

impl InputLine {
    fn byte_at(&self, cursor: usize) -> usize {
        self.text
            .char_indices()
            .nth(cursor)
            .map_or(self.text.len(), |(idx, _)| idx)
    }

    fn n_chars(&self) -> usize {
        self.text.chars().count()
    }

    /// Inserts text at the cursor.
    pub fn insert(&mut self, text: &str) {
        let at = self.byte_at(self.cursor);
        self.text.insert_str(at, text);
        self.cursor += text.chars().count();
    }

    /// Replaces the whole text, cursor at the end.
    pub fn set(&mut self, text: &str) {
        self.text = text.to_owned();
        self.cursor = self.n_chars();
    }

    /// Takes the text, leaving the line empty.
    pub fn take(&mut self) -> String {
        self.cursor = 0;
        std::mem::take(&mut self.text)
    }

    fn backspace(&mut self) {
        if self.cursor > 0 {
            let start = self.byte_at(self.cursor - 1);
            let end = self.byte_at(self.cursor);
            self.text.replace_range(start..end, "");
            self.cursor -= 1;
        }
    }

    fn delete(&mut self) {
        if self.cursor < self.n_chars() {
            let start = self.byte_at(self.cursor);
            let end = self.byte_at(self.cursor + 1);
            self.text.replace_range(start..end, "");
        }
    }

    /// Returns whether the cursor is on the first line of the text.
    pub fn is_on_first_line(&self) -> bool {
        !self.text[..self.byte_at(self.cursor)].contains('\n')
    }

    /// Returns whether the cursor is on the last line of the text.
    pub fn is_on_last_line(&self) -> bool {
        !self.text[self.byte_at(self.cursor)..].contains('\n')
    }

    /// Returns the (start, length) in characters of every line.
    fn lines(&self) -> Vec<(usize, usize)> {
        let mut lines = Vec::new();
        let mut start = 0;
        for line in self.text.split('\n') {
            let len = line.chars().count();
            lines.push((start, len));
            start += len + 1;
        }
        lines
    }

    /// Moves the cursor one line up or down, keeping its column where the
    /// line is long enough.
    fn move_line(&mut self, up: bool) {
        let lines = self.lines();
        let Some(row) = lines.iter().rposition(|(start, _)| *start <= self.cursor) else {
            return;
        };
        let target = if up {
            row.checked_sub(1)
        } else {
            Some(row + 1)
        };
        let Some((start, len)) = target.and_then(|target| lines.get(target)) else {
            return;
        };
        let column = self.cursor - lines[row].0;
        self.cursor = start + column.min(*len);
    }

    fn line_up(&mut self) {
        self.move_line(true);
    }

    fn line_down(&mut self) {
        self.move_line(false);
    }

    fn delete_word(&mut self) {
        let chars: Vec<char> = self.text.chars().collect();
        let mut start = self.cursor;
        while start > 0 && chars[start - 1].is_whitespace() {
            start -= 1;
        }
        while start > 0 && !chars[start - 1].is_whitespace() {
            start -= 1;
        }
        let (from, to) = (self.byte_at(start), self.byte_at(self.cursor));
        self.text.replace_range(from..to, "");
        self.cursor = start;
    }
}

/// What the UI asks of the engine (or of itself, for `Quit`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Start a turn with this real user message.
    StartTurn(String),
    /// Run a slash command.
    Command(SlashCommand),
    /// Cancel the running turn (Ctrl-C, Esc).
    Cancel,
    /// Answer the pending approval prompt.
    Approve(ApprovalDecision),
    /// A picker's choice.
    Picked(PickerPurpose, String),
    /// A confirmed rewind.
    Rewind(RewindPlan),
    /// Show the conversation before the live stretch (read from the log).
    LoadEarlier,
    /// Leave soba.
    Quit,
}

/// What the engine reports to the UI.
#[derive(Debug, Clone, PartialEq)]
pub enum UiEvent {
    /// Model and session changed.
    Header(Header),
    /// The conversation, rebuilt from the path.
    History(Vec<HistoryItem>),
    /// Whether the conversation shown starts after the session's first
    /// entry (only the live stretch was read): PageUp asks for the rest.
    EarlierHistory(bool),
    /// New sidebar figures.
    Sidebar(Sidebar),
    /// A piece of streamed assistant text.
    Delta(String),
    /// The streamed step was appended (its text is now in the history).
    StepDone,
    /// A barrier started; `idle` for a `/compact` no inference follows.
    BarrierStarted {
        /// No response follows this barrier.
        idle: bool,
    },
    /// Barrier progress, 0–99.
    BarrierProgress(u8),
    /// The barrier ended with this result line.
    BarrierEnded(ResultLine),
    /// The turn or the idle `/compact` ended; the text says how, when it
    /// did not simply complete.
    Finished(Option<String>),
    /// Something to tell the user (not part of the session log).
    Note(String),
    /// Open a modal box.
    Overlay(Overlay),
    /// An approval prompt (the answer goes back through [`Action::Approve`]).
    Approval(ApprovalView),
    /// Put this text in the input box (a rewound user message).
    SetInput(String),
    /// The provider request failed and is retried, e.g. `retrying in 4 s
    /// (attempt 2 of 5): connection refused`.
    Retrying(String),
    /// Another session replaces the one shown (`/resume`, `/clear`): the
    /// notes of the session left go with it, and the view returns to the
    /// end of the conversation.
    ClearNotes,
}

/// Everything the TUI shows; [`super::render::render`] is a pure function of it.
#[derive(Debug, Clone, Default)]
pub struct AppState {
    /// Model and session.
    pub header: Header,
    /// The conversation from the session path.
    pub history: Vec<HistoryItem>,
    /// The session `history` belongs to (the header's when it came).
    pub history_of: Option<String>,
    /// Local notes (command output), each shown after `anchor` history items.
    pub notes: Vec<(usize, String)>,
    /// Assistant text streaming in the current step.
    pub streaming: String,
    /// The input box.
    pub input: InputLine,
    /// Input typed while a turn ran, oldest first.
    pub queue: VecDeque<String>,
    /// What the engine is doing.
    pub activity: Activity,
    /// `Some(percent)` while a barrier runs; `idle` when no response follows.
    pub barrier: Option<(u8, bool)>,
    /// The last barrier's result line.
    pub result_line: Option<ResultLine>,
    /// The sidebar figures.
    pub sidebar: Sidebar,
    /// A modal box, if open.
    pub overlay: Option<Overlay>,
    /// A transient hint under the input (e.g. "Ctrl-C again to quit").
    pub hint: Option<String>,
    /// Lines scrolled up from the bottom of the conversation.
    pub scroll: usize,
    /// The conversation shown starts after the session's first entry.
    pub earlier_history: bool,
    /// When Ctrl-C was last pressed (not rendered).
    pub last_ctrl_c: Option<Instant>,
    /// Whether tool results are shown in full (Ctrl-O).
    pub expand_tools: bool,
    /// The provider retry in progress, one line.
    pub retry: Option<String>,
    /// Lines submitted in this workspace, for Up/Down.
    pub input_history: InputHistory,
    /// The workspace's files, for `@` completion.
    pub files: Vec<String>,
    /// A line starting with `/` that is not a command, shown once with a
    /// question: Enter again on the same text sends it as a message.
    pub confirm_slash: Option<String>,
    /// The user asked to cancel the running turn (Esc, Ctrl-C).
    pub cancelling: bool,
    /// When the open approval prompt appeared (not rendered).
    pub approval_shown: Option<Instant>,
    /// When the last key was pressed (not rendered).
    pub last_key: Option<Instant>,
}

/// How long an approval prompt must have been on screen, and the keyboard
/// quiet, before a letter answers it: letters typed ahead (a queued
/// message, "please hold on") go to the input box instead of approving.
/// Esc denies at once.
pub const APPROVAL_ARM: Duration = Duration::from_millis(400);

/// Returns how the conversation shown moved when `new` extends `old`
/// upwards (PageUp loaded the earlier conversation): `(skipped, added)`,
/// the leading items of `old` that `new` no longer has (the "earlier
/// conversation not loaded" line) and the items `new` has above the rest
/// of `old`. `None` when `new` does not hold `old`'s items below new ones.
/// Returns how many items `old` and `new` share from the start.
fn common_prefix(old: &[HistoryItem], new: &[HistoryItem]) -> usize {
    old.iter().zip(new).take_while(|(a, b)| a == b).count()
}

fn earlier_loaded(old: &[HistoryItem], new: &[HistoryItem]) -> Option<(usize, usize)> {
    let skipped = usize::from(matches!(
        old.first(),
        Some(HistoryItem::Event(text)) if text.starts_with("earlier conversation not loaded")
    ));
    let rest = &old[skipped..];
    if skipped == 0 || rest.is_empty() || new.len() < rest.len() {
        return None;
    }
    (0..=new.len() - rest.len())
        .find(|&at| new[at..at + rest.len()] == *rest)
        .map(|added| (skipped, added))
}

impl AppState {
    /// Returns whether a turn or an idle `/compact` is running.
    pub fn is_busy(&self) -> bool {
        self.activity != Activity::Idle
    }

    fn note(&mut self, text: impl Into<String>) {
        self.notes.push((self.history.len(), text.into()));
        self.scroll = 0;
    }

    /// Handles Enter: dispatches the typed line now or queues it.
    pub fn submit(&mut self) -> Vec<Action> {
        let line = self.input.text.trim().to_owned();
        if line.is_empty() {
            return Vec::new();
        }
        self.input_history.record(&line);
        if command::is_command(&line) {
            match command::parse(&line) {
                Err(err) if command::is_unknown(&err) => {
                    // An unknown command leaves the box, so the next one
                    // typed is not glued to it.
                    self.input.take();
                    self.note(err.to_string());
                    return Vec::new();
                }
                Err(err) => {
                    // A known command with bad arguments stays for editing.
                    self.note(err.to_string());
                    return Vec::new();
                }
                Ok(command) => {
                    self.input.take();
                    if self.is_busy() && !command.acts_during_turn() {
                        self.queue.push_back(line);
                        return Vec::new();
                    }
                    return self.dispatch_command(command);
                }
            }
        }
        if line.starts_with('/') && self.confirm_slash.as_deref() != Some(line.as_str()) {
            // `/clear/cost` or `/usr/bin/env is missing`: not a command,
            // maybe a slip; sent only when Enter is pressed on it again.
            let first = line[1..]
                .split(|c: char| c == '/' || c.is_whitespace())
                .next()
                .unwrap_or("");
            let known = command::closest(first)
                .map(|known| format!(" (did you mean /{known}?)"))
                .unwrap_or_default();
            self.confirm_slash = Some(line);
            self.hint = Some(format!(
                "not a command{known}: Enter again sends it to the model as text"
            ));
            return Vec::new();
        }
        self.confirm_slash = None;
        self.input.take();
        if self.is_busy() {
            self.queue.push_back(line);
            return Vec::new();
        }
        self.start_turn(line)
    }

    fn start_turn(&mut self, text: String) -> Vec<Action> {
        self.activity = Activity::Turn;
        self.streaming.clear();
        self.scroll = 0;
        vec![Action::StartTurn(text)]
    }

    fn dispatch_command(&mut self, command: SlashCommand) -> Vec<Action> {
        match command {
            SlashCommand::Help => {
                self.note(command::help_text());
                Vec::new()
            }
            SlashCommand::Quit => vec![Action::Quit],
            SlashCommand::Compact { .. } if !self.is_busy() => {
                self.activity = Activity::Compact;
                vec![Action::Command(command)]
            }
            other => vec![Action::Command(other)],
        }
    }

    /// Sends queued input, oldest first, until one item starts a turn or a
    /// compaction (SPEC §11.2: it becomes the next turn when the current
    /// one ends).
    pub fn drain_queue(&mut self) -> Vec<Action> {
        let mut actions = Vec::new();
        while !self.is_busy() {
            let Some(line) = self.queue.pop_front() else {
                break;
            };
            if command::is_command(&line) {
                match command::parse(&line) {
                    Ok(command) => actions.extend(self.dispatch_command(command)),
                    Err(err) => self.note(err.to_string()),
                }
            } else {
                actions.extend(self.start_turn(line));
            }
            if actions.contains(&Action::Quit) {
                break;
            }
        }
        actions
    }

    /// Applies one engine report; returns what follows from it (queued
    /// input sent when a turn ends).
    pub fn apply(&mut self, event: UiEvent) -> Vec<Action> {
        match event {
            UiEvent::Header(header) => {
                if header.session != self.header.session {
                    // Another session: the last one's result line is not about it.
                    self.result_line = None;
                }
                self.header = header;
            }
            UiEvent::EarlierHistory(earlier) => self.earlier_history = earlier,
            UiEvent::History(items) => {
                let shift = earlier_loaded(&self.history, &items);
                let same_session = self.history_of.as_ref() == Some(&self.header.session);
                if same_session && shift.is_none() && items.len() < self.history.len() {
                    // A rewind: notes written after the turns it went back
                    // past go with them, not onto the end of an earlier answer.
                    let kept = common_prefix(&self.history, &items);
                    self.notes.retain(|(anchor, _)| *anchor <= kept);
                }
                self.history = items;
                self.history_of = Some(self.header.session.clone());
                let len = self.history.len();
                for (anchor, _) in &mut self.notes {
                    if let Some((skipped, added)) = shift {
                        // Earlier conversation came in above: a note stays
                        // after the item it followed (a note at the top
                        // stays at the top).
                        if *anchor >= skipped {
                            *anchor = *anchor - skipped + added;
                        }
                    }
                    *anchor = (*anchor).min(len);
                }
            }
            UiEvent::Sidebar(sidebar) => {
                if let Some(line) = &self.result_line
                    && line.capsule.is_some()
                    && line.capsule != sidebar.latest_capsule
                {
                    // A rewind left the capsule the line reports.
                    self.result_line = None;
                }
                self.sidebar = sidebar;
            }
            UiEvent::Delta(text) => {
                self.retry = None;
                self.streaming.push_str(&text);
            }
            UiEvent::StepDone => {
                self.retry = None;
                self.streaming.clear();
            }
            UiEvent::BarrierStarted { idle } => {
                self.retry = None;
                self.barrier = Some((0, idle));
                self.result_line = None;
            }
            UiEvent::BarrierProgress(percent) => {
                if let Some((shown, _)) = &mut self.barrier {
                    *shown = (*shown).max(percent.min(99));
                }
            }
            UiEvent::BarrierEnded(line) => {
                self.barrier = None;
                self.result_line = Some(line);
            }
            UiEvent::Finished(reason) => {
                self.activity = Activity::Idle;
                self.retry = None;
                let partial = std::mem::take(&mut self.streaming);
                self.barrier = None;
                if matches!(self.overlay, Some(Overlay::Approval(_))) {
                    self.overlay = None;
                }
                let cancelled = std::mem::take(&mut self.cancelling);
                if cancelled {
                    if self
                        .hint
                        .as_deref()
                        .is_some_and(|hint| hint.starts_with("cancelling the turn"))
                    {
                        self.hint = None;
                    }
                    if !partial.trim().is_empty() {
                        // Kept on screen, marked; the log (and so the
                        // model) never got it.
                        self.note(format!(
                            "{}\n[interrupted: this partial answer was not saved and the model will not see it]",
                            partial.trim_end()
                        ));
                    }
                }
                if let Some(reason) = reason {
                    self.note(reason);
                }
                if cancelled && !self.queue.is_empty() {
                    // The user stopped the turn: what was queued waits in
                    // the box for them to send, edit or clear.
                    let queued: Vec<String> = self.queue.drain(..).collect();
                    let mut text = queued.join("\n");
                    if !self.input.text.trim().is_empty() {
                        text = format!("{text}\n{}", self.input.text);
                    }
                    self.input.set(&text);
                    self.hint = Some(
                        "the turn was cancelled: your queued message is back in the box (Enter sends it, Ctrl-U clears it)"
                            .to_owned(),
                    );
                    return Vec::new();
                }
                return self.drain_queue();
            }
            UiEvent::Note(text) => self.note(text),
            UiEvent::Overlay(overlay) => self.overlay = Some(overlay),
            UiEvent::Approval(view) => {
                self.overlay = Some(Overlay::Approval(view));
                self.approval_shown = Some(Instant::now());
            }
            UiEvent::SetInput(text) => self.input.set(&text),
            UiEvent::Retrying(text) => self.retry = Some(text),
            UiEvent::ClearNotes => {
                self.notes.clear();
                self.scroll = 0;
            }
        }
        Vec::new()
    }

    /// Handles one key press at time `now`.
    pub fn on_key(&mut self, key: KeyEvent, now: Instant) -> Vec<Action> {
        if key.kind == KeyEventKind::Release {
            return Vec::new();
        }
        let previous_key = self.last_key.replace(now);
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && key.code == KeyCode::Char('c') {
            return self.ctrl_c(now);
        }
        if let Some(overlay) = self.overlay.clone() {
            let typed_ahead = |shown: Option<Instant>| {
                [shown, previous_key]
                    .into_iter()
                    .flatten()
                    .any(|at| now.saturating_duration_since(at) < APPROVAL_ARM)
            };
            // Only a bare letter answers: Ctrl-A is the box's "start of
            // line", and Alt letters are other programs' keys.
            let modified = key
                .modifiers
                .intersects(KeyModifiers::CONTROL | KeyModifiers::ALT);
            let answer =
                !modified && matches!(key.code, KeyCode::Char('y' | 'Y' | 'a' | 'A' | 'n' | 'N'));
            if let Overlay::Approval(_) = overlay
                && let KeyCode::Char(ch) = key.code
                && (!answer || typed_ahead(self.approval_shown))
            {
                if modified {
                    // Not text either: a modified letter does nothing here.
                    return Vec::new();
                }
                self.input.insert(&ch.to_string());
                self.hint = Some(
                    "typed text goes to the box; answer the prompt with y, a or n after a pause (Esc denies)"
                        .to_owned(),
                );
                return Vec::new();
            }
            return self.overlay_key(overlay, key);
        }
        self.hint = None;
        match key.code {
            KeyCode::Esc if self.is_busy() => {
                self.cancelling = true;
                self.hint = Some("cancelling the turn…".to_owned());
                return vec![Action::Cancel];
            }
            KeyCode::Enter
                if key.modifiers.contains(KeyModifiers::ALT)
                    || key.modifiers.contains(KeyModifiers::SHIFT) =>
            {
                self.input.insert("\n");
            }
            KeyCode::Enter => return self.submit(),
            KeyCode::Char('j') if ctrl => self.input.insert("\n"),
            KeyCode::Char('d') if ctrl && self.input.text.is_empty() => return vec![Action::Quit],
            KeyCode::Char('a') if ctrl => self.input.cursor = 0,
            KeyCode::Char('e') if ctrl => self.input.cursor = self.input.n_chars(),
            KeyCode::Char('u') if ctrl => {
                self.input.take();
            }
            KeyCode::Char('w') if ctrl => self.input.delete_word(),
            KeyCode::Char('o') if ctrl => {
                self.expand_tools = !self.expand_tools;
                self.hint = Some(if self.expand_tools {
                    "tool output shown in full (Ctrl-O folds it again)".to_owned()
                } else {
                    "tool output folded (Ctrl-O shows it)".to_owned()
                });
            }
            KeyCode::Tab => self.complete(),
            KeyCode::Up if self.input.is_on_first_line() => {
                if let Some(text) = self.input_history.older(&self.input.text) {
                    self.input.set(&text);
                }
            }
            KeyCode::Down if self.input.is_on_last_line() && self.input_history.is_walking() => {
                if let Some(text) = self.input_history.newer() {
                    self.input.set(&text);
                }
            }
            KeyCode::Up => self.input.line_up(),
            KeyCode::Down => self.input.line_down(),
            KeyCode::Char(ch) if !ctrl => self.input.insert(&ch.to_string()),
            KeyCode::Backspace => self.input.backspace(),
            KeyCode::Delete => self.input.delete(),
            KeyCode::Left => self.input.cursor = self.input.cursor.saturating_sub(1),
            KeyCode::Right => self.input.cursor = (self.input.cursor + 1).min(self.input.n_chars()),
            KeyCode::Home => self.input.cursor = 0,
            KeyCode::End => self.input.cursor = self.input.n_chars(),
            KeyCode::PageUp if self.earlier_history => {
                self.scroll += 10;
                self.earlier_history = false;
                return vec![Action::LoadEarlier];
            }
            KeyCode::PageUp => self.scroll += 10,
            KeyCode::PageDown => self.scroll = self.scroll.saturating_sub(10),
            _ => {}
        }
        Vec::new()
    }

    /// Completes the word before the cursor (Tab): a command name, or an
    /// `@path` from [`AppState::files`].
    fn complete(&mut self) {
        let at = self.input.byte_at(self.input.cursor);
        let Some(done) = completion::complete(&self.input.text, at, &self.files) else {
            return;
        };
        let start_chars = self.input.text[..done.replace.start].chars().count();
        self.input
            .text
            .replace_range(done.replace.clone(), &done.with);
        self.input.cursor = start_chars + done.with.chars().count();
        self.hint = done.hint;
    }

    /// Returns whether the word before the cursor is an `@` mention (the
    /// UI refreshes [`AppState::files`] before a Tab there).
    pub fn wants_file_index(&self) -> bool {
        let before = &self.input.text[..self.input.byte_at(self.input.cursor)];
        before
            .rsplit(char::is_whitespace)
            .next()
            .is_some_and(|word| word.starts_with('@'))
    }

    /// Handles pasted text (bracketed paste): inserted as typed, newlines kept.
    /// A paste never answers an approval prompt: it goes to the box.
    pub fn on_paste(&mut self, text: &str, now: Instant) {
        // A paste is typing too: the letters right after it do not answer
        // an approval prompt.
        self.last_key = Some(now);
        if matches!(self.overlay, None | Some(Overlay::Approval(_))) {
            self.input
                .insert(&text.replace("\r\n", "\n").replace('\r', "\n"));
        }
    }

    fn ctrl_c(&mut self, now: Instant) -> Vec<Action> {
        if let Some(last) = self.last_ctrl_c
            && now.saturating_duration_since(last) <= DOUBLE_CTRL_C
        {
            return vec![Action::Quit];
        }
        self.last_ctrl_c = Some(now);
        let mut actions = Vec::new();
        if matches!(self.overlay, Some(Overlay::Approval(_))) {
            actions.push(Action::Approve(ApprovalDecision::Deny));
        }
        self.overlay = None;
        if self.is_busy() {
            actions.push(Action::Cancel);
            self.cancelling = true;
            self.hint = Some("cancelling the turn… (Ctrl-C again within 2 s quits)".to_owned());
        } else {
            self.input.take();
            self.hint = Some("press Ctrl-C again within 2 s to quit".to_owned());
        }
        actions
    }

    fn overlay_key(&mut self, overlay: Overlay, key: KeyEvent) -> Vec<Action> {
        match overlay {
            Overlay::Approval(_) => {
                let decision = match key.code {
                    KeyCode::Char('y' | 'Y') => ApprovalDecision::Once,
                    KeyCode::Char('a' | 'A') => ApprovalDecision::AlwaysForSession,
                    KeyCode::Char('n' | 'N') | KeyCode::Esc => ApprovalDecision::Deny,
                    _ => return Vec::new(),
                };
                self.overlay = None;
                vec![Action::Approve(decision)]
            }
            Overlay::Picker(mut picker) => match key.code {
                KeyCode::Esc | KeyCode::Char('q') => {
                    self.overlay = None;
                    if picker.purpose == PickerPurpose::Resume && self.header.model.is_empty() {
                        // `soba -r` closed without a choice: no session is
                        // open, and an empty screen does not say what now.
                        self.note(
                            "no session open: type a message to start a new one, /resume lists the sessions again, Ctrl-D quits",
                        );
                    }
                    Vec::new()
                }
                KeyCode::Up | KeyCode::Char('k') => {
                    picker.selected = picker.selected.saturating_sub(1);
                    self.overlay = Some(Overlay::Picker(picker));
                    Vec::new()
                }
                KeyCode::Down | KeyCode::Char('j') => {
                    if picker.selected + 1 < picker.items.len() {
                        picker.selected += 1;
                    }
                    self.overlay = Some(Overlay::Picker(picker));
                    Vec::new()
                }
                KeyCode::Enter => {
                    self.overlay = None;
                    match picker.items.get(picker.selected) {
                        Some(item) => vec![Action::Picked(picker.purpose, item.key.clone())],
                        None => Vec::new(),
                    }
                }
                _ => Vec::new(),
            },
            Overlay::ConfirmRewind(plan) => match key.code {
                KeyCode::Char('y' | 'Y') | KeyCode::Enter => {
                    self.overlay = None;
                    // The last compaction's line spoke of the path left behind.
                    self.result_line = None;
                    vec![Action::Rewind(plan)]
                }
                KeyCode::Char('n' | 'N') | KeyCode::Esc => {
                    self.overlay = None;
                    self.note("rewind cancelled");
                    Vec::new()
                }
                _ => Vec::new(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(state: &mut AppState, text: &str) -> Vec<Action> {
        state.input.set(text);
        state.submit()
    }

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    fn ctrl(ch: char) -> KeyEvent {
        KeyEvent::new(KeyCode::Char(ch), KeyModifiers::CONTROL)
    }

    #[test]
    fn idle_text_starts_a_turn() {
        let mut state = AppState::default();
        assert_eq!(
            typed(&mut state, "  fix the parser  "),
            [Action::StartTurn("fix the parser".into())]
        );
        assert_eq!(state.activity, Activity::Turn);
        assert!(state.input.text.is_empty());
        assert!(state.queue.is_empty());
    }

    #[test]
    fn input_during_a_turn_is_queued_and_becomes_the_next_turn() {
        let mut state = AppState::default();
        typed(&mut state, "first");
        assert_eq!(typed(&mut state, "second"), []);
        assert_eq!(
            typed(&mut state, "/checkpoint milestone \"parser done\""),
            []
        );
        assert_eq!(typed(&mut state, "third"), []);
        assert_eq!(
            state.queue,
            ["second", "/checkpoint milestone \"parser done\"", "third"]
        );
        // A barrier does not change that.
        state.apply(UiEvent::BarrierStarted { idle: false });
        assert_eq!(typed(&mut state, "/compact"), []);
        assert_eq!(state.queue.len(), 4);
        // The turn ends: exactly the next message starts; the rest waits.
        let actions = state.apply(UiEvent::Finished(None));
        assert_eq!(actions, [Action::StartTurn("second".into())]);
        assert_eq!(
            state.queue,
            ["/checkpoint milestone \"parser done\"", "third", "/compact"]
        );
        // The next end sends the queued command, then the next message.
        let actions = state.apply(UiEvent::Finished(None));
        assert_eq!(
            actions,
            [
                Action::Command(SlashCommand::Checkpoint {
                    kind: soba_core::CheckpointKind::Milestone,
                    note: "parser done".into()
                }),
                Action::StartTurn("third".into())
            ]
        );
        let actions = state.apply(UiEvent::Finished(None));
        assert_eq!(
            actions,
            [Action::Command(SlashCommand::Compact {
                save: false,
                instructions: None
            })]
        );
        assert_eq!(state.activity, Activity::Compact);
        assert_eq!(state.apply(UiEvent::Finished(None)), []);
        assert_eq!(state.activity, Activity::Idle);
    }

    #[test]
    fn immediate_commands_act_during_a_turn() {
        let mut state = AppState::default();
        typed(&mut state, "work");
        assert_eq!(
            typed(&mut state, "/budget"),
            [Action::Command(SlashCommand::Budget)]
        );
        assert_eq!(
            typed(&mut state, "/auto-compact off"),
            [Action::Command(SlashCommand::AutoCompact(false))]
        );
        assert_eq!(
            typed(&mut state, "/rewind 1"),
            [Action::Command(SlashCommand::Rewind(Some(
                super::super::command::RewindTarget::Nth(1)
            )))]
        );
        assert_eq!(typed(&mut state, "/help"), []);
        assert!(
            state
                .notes
                .last()
                .is_some_and(|(_, text)| text.contains("/budget"))
        );
        assert!(state.queue.is_empty());
    }

    #[test]
    fn a_bad_command_stays_in_the_box_with_usage() {
        let mut state = AppState::default();
        assert_eq!(typed(&mut state, "/auto-compact maybe"), []);
        assert_eq!(state.input.text, "/auto-compact maybe");
        let (_, note) = state.notes.last().expect("a note");
        assert!(note.contains("usage: /auto-compact on|off"), "{note}");
        assert_eq!(state.activity, Activity::Idle);
    }

    #[test]
    fn ctrl_c_cancels_then_quits_within_two_seconds() {
        let mut state = AppState::default();
        typed(&mut state, "work");
        let start = Instant::now();
        assert_eq!(state.on_key(ctrl('c'), start), [Action::Cancel]);
        assert_eq!(
            state.on_key(ctrl('c'), start + Duration::from_millis(1_500)),
            [Action::Quit]
        );
        let mut state = AppState::default();
        assert_eq!(state.on_key(ctrl('c'), start), []);
        assert_eq!(
            state.on_key(ctrl('c'), start + Duration::from_millis(2_500)),
            []
        );
        assert_eq!(
            state.on_key(ctrl('c'), start + Duration::from_millis(3_000)),
            [Action::Quit]
        );
    }

    #[test]
    fn esc_cancels_a_running_turn_only() {
        let mut state = AppState::default();
        assert_eq!(state.on_key(key(KeyCode::Esc), Instant::now()), []);
        typed(&mut state, "work");
        assert_eq!(
            state.on_key(key(KeyCode::Esc), Instant::now()),
            [Action::Cancel]
        );
    }

    #[test]
    fn letters_typed_ahead_of_an_approval_prompt_answer_nothing() {
        // The attack of session 22: "please hold on" typed as the prompt
        // appeared answered it with the `a` of "please".
        let mut state = AppState::default();
        state.apply(UiEvent::Approval(ApprovalView {
            tool: "bash".into(),
            summary: "touch /tmp/pwn".into(),
            scope: String::new(),
            preview: Vec::new(),
        }));
        let mut at = Instant::now();
        for ch in "please hold on, not yet".chars() {
            at += Duration::from_millis(60);
            assert_eq!(state.on_key(key(KeyCode::Char(ch)), at), [], "{ch}");
        }
        assert_eq!(state.input.text, "please hold on, not yet");
        assert!(matches!(state.overlay, Some(Overlay::Approval(_))));
        // A paste goes to the box too, and the letters right after it are
        // typing, not answers (the attack of session 23).
        state.on_paste(" yes", at);
        assert_eq!(state.input.text, "please hold on, not yet yes");
        at += APPROVAL_ARM / 2;
        assert_eq!(state.on_key(key(KeyCode::Char('a')), at), []);
        assert_eq!(state.input.text, "please hold on, not yet yesa");
        // Ctrl-A (the box's start of line) and Alt-Y never answer.
        let ctrl_a = KeyEvent::new(KeyCode::Char('a'), KeyModifiers::CONTROL);
        let alt_y = KeyEvent::new(KeyCode::Char('y'), KeyModifiers::ALT);
        assert_eq!(state.on_key(ctrl_a, at + APPROVAL_ARM * 3), []);
        assert_eq!(state.on_key(alt_y, at + APPROVAL_ARM * 6), []);
        assert!(matches!(state.overlay, Some(Overlay::Approval(_))));
        at += APPROVAL_ARM * 6;
        // Esc denies at once; after a pause a letter answers.
        let mut esc = state.clone();
        assert_eq!(
            esc.on_key(key(KeyCode::Esc), at),
            [Action::Approve(ApprovalDecision::Deny)]
        );
        assert_eq!(
            state.on_key(key(KeyCode::Char('n')), at + APPROVAL_ARM),
            [Action::Approve(ApprovalDecision::Deny)]
        );
    }

    #[test]
    fn approval_keys_answer_and_ctrl_c_denies() {
        let view = ApprovalView {
            tool: "bash".into(),
            summary: "cargo test".into(),
            scope: "bash commands starting with `cargo` this session".into(),
            preview: Vec::new(),
        };
        for (code, decision) in [
            (KeyCode::Char('y'), ApprovalDecision::Once),
            (KeyCode::Char('a'), ApprovalDecision::AlwaysForSession),
            (KeyCode::Char('n'), ApprovalDecision::Deny),
            (KeyCode::Esc, ApprovalDecision::Deny),
        ] {
            let mut state = AppState::default();
            typed(&mut state, "work");
            state.apply(UiEvent::Approval(view.clone()));
            let later = Instant::now() + APPROVAL_ARM;
            // A letter that answers nothing goes to the box.
            assert_eq!(state.on_key(key(KeyCode::Char('x')), later), []);
            assert_eq!(state.input.text, "x");
            let after_a_pause = later + APPROVAL_ARM;
            assert_eq!(
                state.on_key(key(code), after_a_pause),
                [Action::Approve(decision)]
            );
            assert_eq!(state.overlay, None);
        }
        let mut state = AppState::default();
        typed(&mut state, "work");
        state.apply(UiEvent::Approval(view));
        assert_eq!(
            state.on_key(ctrl('c'), Instant::now()),
            [Action::Approve(ApprovalDecision::Deny), Action::Cancel]
        );
    }

    #[test]
    fn barrier_progress_only_goes_up_and_leaves_one_result_line() {
        let mut state = AppState::default();
        state.apply(UiEvent::BarrierStarted { idle: false });
        state.apply(UiEvent::BarrierProgress(40));
        state.apply(UiEvent::BarrierProgress(20));
        assert_eq!(state.barrier, Some((40, false)));
        state.apply(UiEvent::BarrierProgress(100));
        assert_eq!(state.barrier, Some((99, false)));
        let line = ResultLine {
            text: "Compacted (user): 9,000 → 2,000 tokens (−78%) · ck_7f3a".into(),
            warn: false,
            capsule: None,
        };
        state.apply(UiEvent::BarrierEnded(line.clone()));
        assert_eq!(state.barrier, None);
        assert_eq!(state.result_line, Some(line));
        state.apply(UiEvent::BarrierStarted { idle: true });
        assert_eq!(state.result_line, None);
    }

    #[test]
    fn editing_keys() {
        let mut state = AppState::default();
        let now = Instant::now();
        for ch in "héllo world".chars() {
            state.on_key(key(KeyCode::Char(ch)), now);
        }
        state.on_key(ctrl('w'), now);
        assert_eq!(state.input.text, "héllo ");
        state.on_key(key(KeyCode::Home), now);
        state.on_key(key(KeyCode::Delete), now);
        state.on_key(key(KeyCode::Right), now);
        state.on_key(key(KeyCode::Backspace), now);
        assert_eq!(state.input.text, "llo ");
        state.on_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::ALT), now);
        assert_eq!(state.input.text, "\nllo ");
        state.on_paste("a\r\nb", Instant::now());
        assert_eq!(state.input.text, "\na\nbllo ");
        state.on_key(ctrl('u'), now);
        assert_eq!(state.on_key(ctrl('d'), now), [Action::Quit]);
    }

    #[test]
    fn picker_moves_and_chooses() {
        let mut state = AppState::default();
        state.apply(UiEvent::Overlay(Overlay::Picker(Picker {
            title: "Rewind to".into(),
            purpose: PickerPurpose::Rewind,
            items: vec![
                PickerItem {
                    key: "e_1".into(),
                    label: "one".into(),
                },
                PickerItem {
                    key: "e_2".into(),
                    label: "two".into(),
                },
            ],
            selected: 0,
            header: None,
            note: None,
        })));
        let now = Instant::now();
        state.on_key(key(KeyCode::Down), now);
        state.on_key(key(KeyCode::Down), now);
        assert_eq!(
            state.on_key(key(KeyCode::Enter), now),
            [Action::Picked(PickerPurpose::Rewind, "e_2".into())]
        );
        assert_eq!(state.overlay, None);
    }

    #[test]
    fn page_up_asks_once_for_earlier_history_when_only_the_stretch_is_shown() {
        let mut state = AppState::default();
        let now = Instant::now();
        assert!(state.on_key(key(KeyCode::PageUp), now).is_empty());
        state.apply(UiEvent::EarlierHistory(true));
        assert_eq!(
            state.on_key(key(KeyCode::PageUp), now),
            [Action::LoadEarlier]
        );
        assert!(
            state.on_key(key(KeyCode::PageUp), now).is_empty(),
            "asked once"
        );
        assert_eq!(state.scroll, 30);
    }

    #[test]
    fn history_rebuild_keeps_notes_in_range() {
        let mut state = AppState::default();
        state.apply(UiEvent::Header(Header {
            model: "m".into(),
            session: "0190f3a2".into(),
        }));
        state.apply(UiEvent::History(vec![
            HistoryItem::User("a".into()),
            HistoryItem::Assistant("b".into()),
        ]));
        state.apply(UiEvent::Note("after b".into()));
        assert_eq!(state.notes, [(2, "after b".to_owned())]);
        // No session open any more (it failed to open): the note stays.
        state.apply(UiEvent::Header(Header::default()));
        state.apply(UiEvent::History(vec![]));
        assert_eq!(state.notes, [(0, "after b".to_owned())]);
    }

    fn typed_keys(state: &mut AppState, text: &str) {
        for ch in text.chars() {
            state.on_key(key(KeyCode::Char(ch)), Instant::now());
        }
    }

    #[test]
    fn up_and_down_walk_the_input_history_and_restore_the_draft() {
        let mut state = AppState {
            input_history: InputHistory::new(vec!["first".into(), "second".into()]),
            ..AppState::default()
        };
        typed(&mut state, "third");
        state.apply(UiEvent::Finished(None));
        typed_keys(&mut state, "dra");
        let now = Instant::now();
        state.on_key(key(KeyCode::Up), now);
        assert_eq!(state.input.text, "third");
        state.on_key(key(KeyCode::Up), now);
        state.on_key(key(KeyCode::Up), now);
        assert_eq!(state.input.text, "first");
        // The oldest entry stays.
        state.on_key(key(KeyCode::Up), now);
        assert_eq!(state.input.text, "first");
        state.on_key(key(KeyCode::Down), now);
        assert_eq!(state.input.text, "second");
        state.on_key(key(KeyCode::Down), now);
        state.on_key(key(KeyCode::Down), now);
        assert_eq!(state.input.text, "dra");
        // Not walking: Down does nothing.
        state.on_key(key(KeyCode::Down), now);
        assert_eq!(state.input.text, "dra");
        assert_eq!(
            state.input_history.take_unsaved(),
            ["third"],
            "submitted lines are handed to the file"
        );
    }

    #[test]
    fn up_and_down_move_between_lines_of_a_multi_line_input_first() {
        let mut state = AppState {
            input_history: InputHistory::new(vec!["old".into()]),
            ..AppState::default()
        };
        state.input.set("one\ntwo long\nthree");
        let now = Instant::now();
        state.on_key(key(KeyCode::Up), now);
        assert_eq!(state.input.cursor, "one\ntwo l".chars().count());
        state.on_key(key(KeyCode::Up), now);
        assert_eq!(state.input.cursor, 3);
        state.on_key(key(KeyCode::Down), now);
        state.on_key(key(KeyCode::Down), now);
        assert_eq!(state.input.text, "one\ntwo long\nthree");
        state.on_key(key(KeyCode::Up), now);
        state.on_key(key(KeyCode::Up), now);
        // On the first line: the history.
        state.on_key(key(KeyCode::Up), now);
        assert_eq!(state.input.text, "old");
        state.on_key(key(KeyCode::Down), now);
        assert_eq!(state.input.text, "one\ntwo long\nthree");
        // An overlay takes the arrows.
        state.overlay = Some(Overlay::ConfirmRewind(RewindPlan {
            leaf: "e_1".into(),
            restore_input: None,
            lines: Vec::new(),
        }));
        state.on_key(key(KeyCode::Up), now);
        assert_eq!(state.input.text, "one\ntwo long\nthree");
    }

    #[test]
    fn a_confirmed_rewind_clears_the_last_result_line() {
        let mut state = AppState {
            result_line: Some(ResultLine {
                text: "Compaction skipped (user): nothing to compact before the keep window".into(),
                warn: false,
                capsule: None,
            }),
            ..AppState::default()
        };
        let plan = RewindPlan {
            leaf: "e_1".into(),
            restore_input: Some("again".into()),
            lines: Vec::new(),
        };
        state.overlay = Some(Overlay::ConfirmRewind(plan.clone()));
        let actions = state.on_key(key(KeyCode::Char('y')), Instant::now());
        assert_eq!(actions, [Action::Rewind(plan)]);
        assert_eq!(state.result_line, None);
    }

    #[test]
    fn a_rewind_takes_the_notes_of_the_turns_it_went_back_past() {
        let mut state = AppState::default();
        let first = vec![
            HistoryItem::User("one".into()),
            HistoryItem::Assistant("done one".into()),
        ];
        let mut both = first.clone();
        both.extend([
            HistoryItem::User("two".into()),
            HistoryItem::Assistant("done two".into()),
        ]);
        state.apply(UiEvent::History(first.clone()));
        state.apply(UiEvent::Note("after one".into()));
        state.apply(UiEvent::History(both));
        state.apply(UiEvent::Note("after two".into()));
        // The rewind's own note comes after the shorter conversation.
        state.apply(UiEvent::History(first));
        state.apply(UiEvent::Note("rewound".into()));
        let notes: Vec<(usize, &str)> = state
            .notes
            .iter()
            .map(|(at, text)| (*at, text.as_str()))
            .collect();
        assert_eq!(notes, [(2, "after one"), (2, "rewound")]);
    }

    #[test]
    fn tab_completes_commands_and_mentions() {
        let mut state = AppState {
            files: vec!["src/main.rs".into(), "src/map.rs".into()],
            ..AppState::default()
        };
        typed_keys(&mut state, "/com");
        state.on_key(key(KeyCode::Tab), Instant::now());
        assert_eq!(state.input.text, "/compact ");
        assert_eq!(state.input.cursor, 9);
        state.input.set("/c");
        state.on_key(key(KeyCode::Tab), Instant::now());
        assert_eq!(state.input.text, "/c");
        assert_eq!(
            state.hint.as_deref(),
            Some("/compact  /capsule  /checkpoint  /clear")
        );
        state.input.set("fix @src/ma now");
        state.input.cursor = "fix @src/ma".chars().count();
        assert!(state.wants_file_index());
        state.on_key(key(KeyCode::Tab), Instant::now());
        assert_eq!(state.hint.as_deref(), Some("src/main.rs  src/map.rs"));
        state.on_key(key(KeyCode::Char('i')), Instant::now());
        state.on_key(key(KeyCode::Tab), Instant::now());
        assert_eq!(state.input.text, "fix @src/main.rs  now");
        assert_eq!(state.hint, None);
        assert!(!state.wants_file_index());
    }

    #[test]
    fn ctrl_o_toggles_tool_output() {
        let mut state = AppState::default();
        state.on_key(ctrl('o'), Instant::now());
        assert!(state.expand_tools);
        state.on_key(ctrl('o'), Instant::now());
        assert!(!state.expand_tools);
        assert!(state.input.text.is_empty());
    }

    #[test]
    fn the_result_line_goes_with_its_session_or_its_capsule() {
        let line = ResultLine {
            text: "Compacted (user): 9,000 → 2,000 tokens (−78%) · ck_7f3a".into(),
            warn: false,
            capsule: Some("ck_7f3a".into()),
        };
        let header = |session: &str| Header {
            model: "m".into(),
            session: session.into(),
        };
        let sidebar = |capsule: Option<&str>| Sidebar {
            latest_capsule: capsule.map(str::to_owned),
            ..Sidebar::default()
        };
        let mut state = AppState::default();
        state.apply(UiEvent::Header(header("aaaa")));
        state.apply(UiEvent::BarrierEnded(line.clone()));
        state.apply(UiEvent::Sidebar(sidebar(Some("ck_7f3a"))));
        state.apply(UiEvent::Header(header("aaaa")));
        assert_eq!(state.result_line, Some(line.clone()));
        // A rewind before the capsule.
        state.apply(UiEvent::Sidebar(sidebar(None)));
        assert_eq!(state.result_line, None);
        // /resume or a new session.
        state.apply(UiEvent::BarrierEnded(line.clone()));
        state.apply(UiEvent::Header(header("bbbb")));
        assert_eq!(state.result_line, None);
        // A line without a capsule stays until the next barrier.
        let skipped = ResultLine {
            capsule: None,
            ..line
        };
        state.apply(UiEvent::BarrierEnded(skipped.clone()));
        state.apply(UiEvent::Sidebar(sidebar(None)));
        assert_eq!(state.result_line, Some(skipped));
    }

    #[test]
    fn a_retry_shows_until_the_response_streams() {
        let mut state = AppState::default();
        typed(&mut state, "work");
        state.apply(UiEvent::Retrying(
            "retrying in 1 s (attempt 2 of 5): connection refused".into(),
        ));
        assert!(state.retry.is_some());
        state.apply(UiEvent::Delta("Hi".into()));
        assert_eq!(state.retry, None);
        state.apply(UiEvent::Retrying("retrying".into()));
        state.apply(UiEvent::Finished(Some("turn failed".into())));
        assert_eq!(state.retry, None);
    }
}
