//! The engine's view of one session: the log writer, the live stretch of
//! the current path, and what a preflight reads of it (model input,
//! derived state, active model, calibration), each maintained
//! incrementally as entries are appended.
//!
//! Memory and resume time follow the live stretch, not the history (SPEC
//! §3.3): a session opens with the store's backward [`soba_store::resume()`],
//! and every capsule appended drops the entries before its retained tail.
//! Whatever needs older entries (a rewind to before the stretch, a list of
//! every capsule) reads the log file, which the writer keeps durable.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use serde_json::Value;
use soba_core::budget::Budget;
use soba_core::calibration::{self, Calibration, CalibrationInput, Factor, Measurement};
use soba_core::config::{CompactionConfig, NativeMode};
use soba_core::derived::DerivedState;
use soba_core::id::ShortIds;
use soba_core::input::{InputConfig, InputSetup, LiveInput};
use soba_core::tokens::BpeCounter;
use soba_core::trigger::TurnState;
use soba_core::{Encoding, Entry, EntryBody, EntryId, Message, Role, TokenCount, TokenCounter};
use soba_store::flight::{FlightAppender, FlightRecord, flight_path};
use soba_store::log::{SessionHeader, SessionWriter, WriterOptions};
use soba_store::reader::{SessionLog, read_log};

use crate::error::EngineError;
use crate::native::{NativeCompactor, NativeTarget};

/// The model a session talks to, as the registry and config resolved it.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    /// `provider/model`.
    pub id: String,
    /// The context window.
    pub context_window: TokenCount,
    /// `max_tokens` sent with every request.
    pub max_output_tokens: TokenCount,
    /// The tokenizer its counts use.
    pub encoding: Encoding,
    /// The calibration seed (SPEC §4.1).
    pub seed: Factor,
}

/// Everything a session needs besides its log.
#[derive(Clone)]
pub struct SessionConfig {
    /// The model.
    pub model: ModelSpec,
    /// `compaction.*`.
    pub compaction: CompactionConfig,
    /// The rendered system prompt.
    pub system_prompt: String,
    /// The tool schemas sent with every request.
    pub tool_schemas: Vec<Value>,
    /// The token counter; `None` uses the model's BPE vocabulary.
    pub counter: Option<Arc<dyn TokenCounter>>,
}

impl std::fmt::Debug for SessionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionConfig")
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

/// Called with every entry once its append returned: written, and synced
/// as `session.durability` says.
pub type AppendObserver = Arc<dyn Fn(&Entry) + Send + Sync>;

/// One open session: the single writer of its log plus derived state.
pub struct SessionCore {
    writer: SessionWriter,
    flight: Option<FlightAppender>,
    header: SessionHeader,
    /// The live stretch of the path, root-most first: from the latest
    /// capsule's first kept entry (the capsule when it keeps nothing) to
    /// the leaf; the whole path while it holds no capsule.
    path: Vec<Entry>,
    /// The position of every entry of `path`.
    index: HashMap<EntryId, usize>,
    live: LiveInput,
    derived: DerivedState,
    /// The active model: the latest `model_change` or capsule `state.model`
    /// on the path, else the configured one.
    model: String,
    /// The calibration of `model` over `path`.
    calibration: Calibration,
    /// Every id of the log, loaded from the file the first time a short id
    /// length is asked for.
    short_ids: OnceLock<ShortIds>,
    config: SessionConfig,
    budget: Budget,
    counter: Arc<dyn TokenCounter>,
    native: Option<Arc<dyn NativeCompactor>>,
    observer: Option<AppendObserver>,
    /// The in-memory soft-cap mark (SPEC §6.2).
    pub turn: TurnState,
    /// The turn (its starting user message) in which hygiene was considered.
    pub hygiene_considered: Option<Option<EntryId>>,
    /// The turn in which the user was told why no compaction ran past
    /// autoLimit (once a turn, not at every step).
    pub skip_told: Option<Option<EntryId>>,
    /// When the latest request of this process was prepared (RFC 3339),
    /// for the idle gap the `cache_expired` trigger reads.
    pub last_request_at: Option<String>,
}

impl std::fmt::Debug for SessionCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCore")
            .field("path", &self.writer.path())
            .finish_non_exhaustive()
    }
}

/// Says what a resumed session loses when the capsule the model input
/// starts from (the last one on the path) keeps from an entry that is not
/// before it (a hand edit, or a line pasted from another session): the
/// input has the capsule and what follows it, not the tail it meant to keep.
fn foreign_kept_from(stretch: &[Entry]) -> Option<String> {
    let (idx, capsule) =
        stretch
            .iter()
            .enumerate()
            .rev()
            .find_map(|(idx, entry)| match &entry.body {
                EntryBody::Capsule(capsule) => Some((idx, capsule)),
                _ => None,
            })?;
    let first = capsule.first_kept_entry_id.as_ref()?;
    if stretch[..idx].iter().any(|entry| &entry.id == first) {
        return None;
    }
    Some(format!(
        "capsule {} keeps from entry {first}, which is not before it in this session (a hand edit, or a line from another session): the tail that capsule meant to keep is not in the model input, only the capsule and what follows it; `soba show --check` for details",
        stretch[idx].id
    ))
}

impl SessionCore {
    fn setup(
        config: &SessionConfig,
        budget: &Budget,
        counter: Arc<dyn TokenCounter>,
        native: Option<&NativeTarget>,
        cwd: &str,
    ) -> InputSetup {
        let setup = InputSetup::new(counter, InputConfig::new(budget, &config.compaction))
            .with_cwd(Some(cwd.to_owned()))
            .with_system_prompt(config.system_prompt.clone())
            .with_tool_schemas(config.tool_schemas.clone())
            .with_renderer(Arc::new(|capsule| {
                soba_core::render::capsule_input(&soba_core::render::CapsuleView::from(capsule))
            }));
        match native {
            Some(target) => setup.with_native_match(target.native_match()),
            None => setup,
        }
    }

    fn assemble(
        writer: SessionWriter,
        header: SessionHeader,
        stretch: Vec<Entry>,
        config: SessionConfig,
        flight_dir: Option<&Path>,
    ) -> Result<Self, EngineError> {
        let budget = Budget::compute(
            config.model.context_window,
            config.model.max_output_tokens,
            &config.compaction,
        )
        .map_err(|err| EngineError::Budget(err.to_string()))?;
        let counter: Arc<dyn TokenCounter> = config
            .counter
            .clone()
            .unwrap_or_else(|| Arc::new(BpeCounter::new(config.model.encoding)));
        let flight = match flight_dir {
            Some(dir) => Some(
                FlightAppender::open(
                    flight_path(dir, &header.id),
                    soba_store::log::Durability::Flush,
                )
                .map_err(EngineError::Store)?,
            ),
            None => None,
        };
        let live = LiveInput::new(Self::setup(
            &config,
            &budget,
            counter.clone(),
            None,
            &header.cwd,
        ));
        let mut core = SessionCore {
            writer,
            flight,
            header,
            path: Vec::new(),
            index: HashMap::new(),
            live,
            derived: DerivedState::default(),
            model: config.model.id.clone(),
            calibration: Calibration::seeded(config.model.seed),
            short_ids: OnceLock::new(),
            config,
            budget,
            counter,
            native: None,
            observer: None,
            turn: TurnState::new(),
            hygiene_considered: None,
            skip_told: None,
            last_request_at: None,
        };
        core.load(stretch);
        Ok(core)
    }

    /// Creates a new session log at `path` with `header`.
    pub fn create(
        path: &Path,
        header: SessionHeader,
        config: SessionConfig,
        options: WriterOptions,
    ) -> Result<Self, EngineError> {
        let writer = SessionWriter::create(path, &header, options).map_err(EngineError::Store)?;
        let dir = path.parent().map(Path::to_path_buf);
        Self::assemble(writer, header, Vec::new(), config, dir.as_deref())
    }

    /// Opens an existing session log for writing (resume): locks it, then
    /// reads it backwards from the end until it has the live stretch of the
    /// path (SPEC §3.3), so the cost follows the live tail, not the
    /// history. Damaged lines among those read are skipped; their
    /// diagnostics are returned (`soba show --check` validates the whole
    /// file).
    pub fn open(
        path: &Path,
        config: SessionConfig,
        options: WriterOptions,
    ) -> Result<(Self, Vec<String>), EngineError> {
        // The lock first: nobody appends while the stretch is read.
        let writer = SessionWriter::open(path, options).map_err(EngineError::Store)?;
        let resumed = soba_store::resume(path).map_err(EngineError::Store)?;
        let header = resumed.header.clone().ok_or_else(|| {
            EngineError::Invalid(format!("{} has no valid session header", path.display()))
        })?;
        let mut diagnostics: Vec<String> =
            resumed.diagnostics.iter().map(|d| d.to_string()).collect();
        let stretch: Vec<Entry> = resumed
            .stretch
            .into_iter()
            .map(|logged| logged.entry)
            .collect();
        diagnostics.extend(foreign_kept_from(&stretch));
        let dir = path.parent().map(Path::to_path_buf);
        Ok((
            Self::assemble(writer, header, stretch, config, dir.as_deref())?,
            diagnostics,
        ))
    }

    /// Replaces the in-memory path with `stretch` and derives everything
    /// from it.
    fn load(&mut self, stretch: Vec<Entry>) {
        self.path = stretch;
        self.reindex();
        self.derived = DerivedState::from_path(&self.path);
        self.model = model_on(&self.path).unwrap_or_else(|| self.config.model.id.clone());
        self.recalibrate();
        self.live = self.input_for(&self.path);
        let counts = self.live.count_sources();
        if counts.recounted() > 0 {
            tracing::info!(
                recounted = counts.recounted(),
                stored = counts.stored,
                other_vocabulary = counts.other_vocabulary,
                "messages counted again on resume: their stored counts were missing or for another tokenizer"
            );
        }
    }

    /// Re-reads the live stretch from the file, after the leaf moved.
    fn reload(&mut self) -> Result<(), EngineError> {
        let resumed = soba_store::resume(self.writer.path()).map_err(EngineError::Store)?;
        self.load(
            resumed
                .stretch
                .into_iter()
                .map(|logged| logged.entry)
                .collect(),
        );
        Ok(())
    }

    fn reindex(&mut self) {
        self.index = self
            .path
            .iter()
            .enumerate()
            .map(|(idx, entry)| (entry.id.clone(), idx))
            .collect();
    }

    fn recalibrate(&mut self) {
        let input = CalibrationInput {
            model: &self.model,
            seed: self.config.model.seed,
            context_window: Some(self.config.model.context_window),
        };
        self.calibration = calibration::calibrate(&self.path, &input);
    }

    /// After a capsule is appended, drops the entries before its retained
    /// tail: the model input never reads them again (its `state` carries
    /// what they set), and resume would not read them either.
    fn trim_to_stretch(&mut self) {
        let Some((last, before)) = self.path.split_last() else {
            return;
        };
        let EntryBody::Capsule(capsule) = &last.body else {
            return;
        };
        let start = match &capsule.first_kept_entry_id {
            Some(first_kept) => match before.iter().rposition(|entry| &entry.id == first_kept) {
                Some(idx) => idx,
                // Not on the path: resume reads to the root then, and so
                // does memory.
                None => return,
            },
            None => before.len(),
        };
        if start > 0 {
            self.path.drain(..start);
            self.reindex();
        }
    }

    /// Returns the session header.
    pub fn header(&self) -> &SessionHeader {
        &self.header
    }

    /// Returns the log file's path.
    pub fn log_path(&self) -> &Path {
        self.writer.path()
    }

    /// Returns the current leaf.
    pub fn leaf(&self) -> Option<&EntryId> {
        self.path.last().map(|entry| &entry.id)
    }

    /// Returns the live stretch of the path, root-most first: from the
    /// latest capsule's first kept entry (the capsule itself when it keeps
    /// nothing) to the leaf, or the whole path while it has no capsule.
    /// Everything the model input depends on is here; older entries are
    /// read from the file ([`SessionCore::read_log`]).
    pub fn path(&self) -> &[Entry] {
        &self.path
    }

    /// Returns an entry of the live stretch by id.
    pub fn entry(&self, id: &EntryId) -> Option<&Entry> {
        self.index.get(id).map(|&idx| &self.path[idx])
    }

    /// Reads the whole log file (every entry, the whole path) without the
    /// lock: O(file), for what needs history beyond the live stretch (the
    /// conversation a UI shows, `/rewind` targets, every capsule).
    pub fn read_log(&self) -> Result<SessionLog, EngineError> {
        read_log(self.writer.path()).map_err(EngineError::Store)
    }

    /// Returns the whole path, root → leaf, read from the file.
    pub fn full_path(&self) -> Result<Vec<Entry>, EngineError> {
        Ok(self
            .read_log()?
            .path()
            .into_iter()
            .map(|logged| logged.entry.clone())
            .collect())
    }

    /// Returns the number of random hex digits that keeps every id of the
    /// session distinct (at least 4, SPEC §3.1). The first call reads the
    /// ids of the whole file; later appends update it in O(log n).
    pub fn short_id_len(&self) -> usize {
        self.short_ids
            .get_or_init(|| match self.read_log() {
                Ok(log) => ShortIds::new(log.entries().iter().map(|logged| &logged.entry.id)),
                Err(err) => {
                    tracing::warn!("short ids from the live stretch only: {err}");
                    ShortIds::new(self.path.iter().map(|entry| &entry.id))
                }
            })
            .len()
    }

    /// Returns the short-id length without reading the file: the whole
    /// session's once known ([`SessionCore::short_id_len`] or
    /// [`SessionCore::prime_short_ids`]), until then the live stretch's.
    /// For display on a path that must not wait on a large log (the TUI's
    /// first frame); lookups by prefix check the whole file anyway.
    pub fn short_id_len_now(&self) -> usize {
        match self.short_ids.get() {
            Some(ids) => ids.len(),
            None => ShortIds::new(self.path.iter().map(|entry| &entry.id)).len(),
        }
    }

    /// Supplies the ids of the whole file, read elsewhere (e.g. by a
    /// background thread with [`soba_store::reader::entry_ids`]); the live
    /// stretch's ids are added, so entries appended since the file was
    /// read count too. No effect once the ids are known.
    pub fn prime_short_ids(&self, ids: &[EntryId]) {
        if self.short_ids.get().is_some() {
            return;
        }
        let mut short = ShortIds::new(ids.iter());
        for entry in &self.path {
            short.insert(&entry.id);
        }
        let _ = self.short_ids.set(short);
    }

    /// Returns the live model input.
    pub fn live(&self) -> &LiveInput {
        &self.live
    }

    /// Returns the limits.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// Returns the configuration.
    pub fn config(&self) -> &SessionConfig {
        &self.config
    }

    /// Returns the token counter.
    pub fn counter(&self) -> &Arc<dyn TokenCounter> {
        &self.counter
    }

    /// Sets the native compactor of the session's model (SPEC §10.3):
    /// preflights then call it in parallel with the summarizer, and the
    /// model input carries a capsule's native item instead of the rendered
    /// capsule when the item was made for the compactor's target. Ignored
    /// (set to `None`) unless `compaction.native` is `"auto"`. Call it
    /// again with the new model's compactor (or `None`) when the model or
    /// endpoint changes; the model input is rebuilt either way.
    pub fn set_native(&mut self, compactor: Option<Arc<dyn NativeCompactor>>) {
        self.native = compactor.filter(|_| self.config.compaction.native == NativeMode::Auto);
        self.live = self.input_for(&self.path);
    }

    /// Returns the native compactor, when one is set.
    pub fn native_compactor(&self) -> Option<&Arc<dyn NativeCompactor>> {
        self.native.as_ref()
    }

    /// Returns the active model id: the latest `model_change` on the path
    /// (or the model a capsule's `state` recorded, when it is newer), else
    /// the configured one.
    pub fn model_id(&self) -> &str {
        &self.model
    }

    /// Returns the calibration factor of the active model on the path.
    pub fn factor(&self) -> Factor {
        self.calibration.factor
    }

    /// Returns the milliseconds from the previous request to `now` (RFC
    /// 3339): the latest request prepared in this process, else (a resumed
    /// session) the newest assistant message on the path. `None` when
    /// neither is known or a time does not parse.
    pub fn idle_ms(&self, now: &str) -> Option<u64> {
        let previous = match &self.last_request_at {
            Some(at) => at.clone(),
            None => self.path.iter().rev().find_map(|entry| match &entry.body {
                EntryBody::Message(message) if message.message.role == Role::Assistant => {
                    Some(entry.timestamp.clone())
                }
                _ => None,
            })?,
        };
        let previous = previous.parse::<jiff::Timestamp>().ok()?;
        let now = now.parse::<jiff::Timestamp>().ok()?;
        let ms = now
            .as_millisecond()
            .saturating_sub(previous.as_millisecond());
        u64::try_from(ms).ok()
    }

    /// Measures effective tokens now (SPEC §4.2).
    pub fn measure(&self) -> Measurement {
        calibration::measure_live(&self.path, &self.live, self.model_id(), self.factor(), true)
    }

    /// Returns the state derived from the path (intents, turn, soft
    /// capsules), maintained as entries are appended. A session opened
    /// from its live stretch starts its turn at its next real user message
    /// (SPEC §6.2).
    pub fn derived(&self) -> DerivedState {
        self.derived.clone()
    }

    /// Sets the function told of every entry appended from now on (an
    /// audit mirror, a test acknowledging durable appends).
    pub fn set_append_observer(&mut self, observer: Option<AppendObserver>) {
        self.observer = observer;
    }

    fn record(&mut self, entry: Entry) -> Result<Entry, EngineError> {
        if let Some(observer) = &self.observer {
            observer(&entry);
        }
        if let Some(short_ids) = self.short_ids.get_mut() {
            short_ids.insert(&entry.id);
        }
        if let EntryBody::Leaf { .. } = entry.body {
            // The leaf moved: the stretch may start anywhere now.
            self.reload()?;
            return Ok(entry);
        }
        self.derived.apply(&entry);
        self.index.insert(entry.id.clone(), self.path.len());
        self.path.push(entry.clone());
        match model_on(std::slice::from_ref(&entry)) {
            Some(model) if model != self.model => {
                self.model = model;
                self.recalibrate();
            }
            _ => {
                let input = CalibrationInput {
                    model: &self.model,
                    seed: self.config.model.seed,
                    context_window: Some(self.config.model.context_window),
                };
                self.calibration.observe(&entry, &input);
            }
        }
        if let EntryBody::Capsule(_) = entry.body {
            self.trim_to_stretch();
        }
        self.live.extend(&self.path);
        Ok(entry)
    }

    /// Appends an entry (durably) and brings path and input up to date.
    pub fn append(&mut self, body: EntryBody) -> Result<Entry, EngineError> {
        let entry = self.writer.append(body).map_err(EngineError::Store)?;
        self.record(entry)
    }

    /// Appends a message with its stored token count.
    pub fn append_message(&mut self, message: Message) -> Result<Entry, EngineError> {
        let entry = self
            .writer
            .append_message(
                message,
                self.counter.as_ref(),
                self.config.compaction.image_tokens,
            )
            .map_err(EngineError::Store)?;
        self.record(entry)
    }

    /// Moves the leaf to `target` (a `leaf` entry); later entries stay. A
    /// target outside the live stretch is looked up in the file, and the
    /// new stretch is read back from it (SPEC §3.3: a rewind to an early
    /// entry may cost O(file)).
    ///
    /// Settings are the user's, not the conversation's: when the new path
    /// holds another `/auto-compact` setting than the old one, or lacks
    /// some of its "always" approvals (the rewind went to before a
    /// `config_change`), they are appended again as one `config_change`
    /// right after the `leaf` entry. Returns the `leaf` entry.
    pub fn rewind(&mut self, target: EntryId) -> Result<Entry, EngineError> {
        let known = match self.index.get(&target) {
            Some(&idx) => !matches!(self.path[idx].body, EntryBody::Leaf { .. }),
            None => self.read_log()?.entries().iter().any(|logged| {
                logged.entry.id == target && !matches!(logged.entry.body, EntryBody::Leaf { .. })
            }),
        };
        if !known {
            return Err(EngineError::Invalid(format!(
                "no entry {target} in this session to rewind to"
            )));
        }
        let before_auto = self.derived.auto_compact;
        let before_grants = self.derived.approvals.clone();
        let leaf = self.append(EntryBody::Leaf { target })?;
        // A session that never set one follows the configuration: the value
        // in force before the rewind is what the user had.
        let auto_compact = (self.derived.auto_compact != before_auto)
            .then(|| before_auto.unwrap_or(self.config.compaction.auto));
        // "Always" approvals are never revoked by moving the leaf: the new
        // path gets every grant of both.
        let after_grants = self.derived.approvals.clone().unwrap_or_default();
        let approvals = before_grants
            .filter(|before| !after_grants.covers_all(before))
            .map(|before| {
                let mut all = after_grants;
                all.extend(&before);
                all
            });
        if auto_compact.is_some() || approvals.is_some() {
            self.append(EntryBody::ConfigChange {
                auto_compact,
                approvals,
            })?;
        }
        Ok(leaf)
    }

    /// Returns the recovery file once an append was refused because another
    /// program replaced or removed the log (nothing after that is in it).
    pub fn recovery_file(&self) -> Option<&std::path::Path> {
        self.writer.recovery_file()
    }

    /// Closes the session, removing its log and flight records when the
    /// log holds nothing of the user's (only what opening a session
    /// writes): a session opened and left unused leaves no file. A log
    /// with any message is never removed
    /// ([`SessionWriter::close_removing_if_unused`]). Returns whether it
    /// was removed.
    pub fn close_removing_if_unused(self) -> Result<bool, EngineError> {
        // The flight appender's handle goes first; the writer's lock is
        // held until the check and the removal are done.
        drop(self.flight);
        self.writer
            .close_removing_if_unused()
            .map_err(EngineError::Store)
    }

    /// Writes a flight record, if this session keeps them.
    pub fn flight(&mut self, record: &FlightRecord) {
        if let Some(flight) = &mut self.flight {
            // Flight records are observability: a failure to write one must
            // not fail the turn, so it is logged instead.
            if let Err(err) = flight.append(record) {
                tracing::warn!("flight record not written: {err}");
            }
        }
    }

    /// Returns the effective-token limit figures for flight records.
    pub fn flight_limits(&self) -> soba_store::flight::FlightLimits {
        soba_store::flight::FlightLimits {
            hard_limit: self.budget.hard_limit(),
            soft_limit: self.budget.soft_limit(),
            auto_limit: self.budget.auto_limit(),
            hygiene_limit: self.budget.hygiene_limit(),
        }
    }

    /// Builds the model input of `path` from scratch with this session's
    /// setup (used to measure a candidate capsule before appending it).
    pub fn input_for(&self, path: &[Entry]) -> LiveInput {
        LiveInput::build(
            Self::setup(
                &self.config,
                &self.budget,
                self.counter.clone(),
                self.native.as_ref().map(|native| native.target()),
                &self.header.cwd,
            ),
            path,
        )
    }
}

/// Returns the model the newest `model_change` or capsule `state.model` of
/// `path` names.
fn model_on(path: &[Entry]) -> Option<String> {
    path.iter().rev().find_map(|entry| match &entry.body {
        EntryBody::ModelChange { model } => Some(model.clone()),
        EntryBody::Capsule(capsule) if !capsule.state.model.is_empty() => {
            Some(capsule.state.model.clone())
        }
        _ => None,
    })
}
