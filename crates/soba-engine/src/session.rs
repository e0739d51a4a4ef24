//! The engine's view of one session: the log writer, every entry read or
//! appended, the current path and the incrementally maintained model input.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use soba_core::budget::Budget;
use soba_core::calibration::{self, CalibrationInput, Factor, MeasureInput, Measurement};
use soba_core::config::{CompactionConfig, NativeMode};
use soba_core::derived::DerivedState;
use soba_core::input::{InputConfig, InputSetup, LiveInput};
use soba_core::tokens::BpeCounter;
use soba_core::trigger::TurnState;
use soba_core::{Encoding, Entry, EntryBody, EntryId, Message, TokenCount, TokenCounter};
use soba_store::flight::{FlightAppender, FlightRecord, flight_path};
use soba_store::log::{SessionHeader, SessionWriter, WriterOptions};
use soba_store::reader::read_log;

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

/// One open session: the single writer of its log plus derived state.
pub struct SessionCore {
    writer: SessionWriter,
    flight: Option<FlightAppender>,
    header: SessionHeader,
    entries: Vec<Entry>,
    index: HashMap<EntryId, usize>,
    path: Vec<Entry>,
    live: LiveInput,
    config: SessionConfig,
    budget: Budget,
    counter: Arc<dyn TokenCounter>,
    native: Option<Arc<dyn NativeCompactor>>,
    /// The in-memory soft-cap mark (SPEC §6.2).
    pub turn: TurnState,
    /// The turn (its starting user message) in which hygiene was considered.
    pub hygiene_considered: Option<Option<EntryId>>,
}

impl std::fmt::Debug for SessionCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCore")
            .field("path", &self.writer.path())
            .finish_non_exhaustive()
    }
}

impl SessionCore {
    fn setup(
        config: &SessionConfig,
        budget: &Budget,
        counter: Arc<dyn TokenCounter>,
        native: Option<&NativeTarget>,
    ) -> InputSetup {
        let setup = InputSetup::new(counter, InputConfig::new(budget, &config.compaction))
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
        entries: Vec<Entry>,
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
        let index = entries
            .iter()
            .enumerate()
            .map(|(idx, entry)| (entry.id.clone(), idx))
            .collect();
        let live = LiveInput::new(Self::setup(&config, &budget, counter.clone(), None));
        let mut core = SessionCore {
            writer,
            flight,
            header,
            entries,
            index,
            path: Vec::new(),
            live,
            config,
            budget,
            counter,
            native: None,
            turn: TurnState::new(),
            hygiene_considered: None,
        };
        core.recompute_path();
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

    /// Opens an existing session log for writing (resume), reading every
    /// entry; damaged lines are skipped (their diagnostics are returned).
    pub fn open(
        path: &Path,
        config: SessionConfig,
        options: WriterOptions,
    ) -> Result<(Self, Vec<String>), EngineError> {
        let log = read_log(path).map_err(EngineError::Store)?;
        let header = log.header().cloned().ok_or_else(|| {
            EngineError::Invalid(format!("{} has no valid session header", path.display()))
        })?;
        let diagnostics = log.diagnostics().iter().map(|d| d.to_string()).collect();
        let entries: Vec<Entry> = log
            .entries()
            .iter()
            .map(|logged| logged.entry.clone())
            .collect();
        let writer = SessionWriter::open(path, options).map_err(EngineError::Store)?;
        let dir = path.parent().map(Path::to_path_buf);
        Ok((
            Self::assemble(writer, header, entries, config, dir.as_deref())?,
            diagnostics,
        ))
    }

    fn leaf_from_entries(&self) -> Option<EntryId> {
        self.entries.last().map(|entry| match &entry.body {
            EntryBody::Leaf { target } => target.clone(),
            _ => entry.id.clone(),
        })
    }

    fn recompute_path(&mut self) {
        let mut path = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut cursor = self.leaf_from_entries();
        while let Some(id) = cursor {
            let Some(&idx) = self.index.get(&id) else {
                break;
            };
            if !seen.insert(idx) {
                // A parent cycle in a hand-edited log: stop at the first
                // repeated entry, as the store's reader does.
                break;
            }
            let entry = &self.entries[idx];
            path.push(entry.clone());
            cursor = entry.parent_id.clone();
        }
        path.reverse();
        self.path = path;
        self.live.extend(&self.path);
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

    /// Returns the path, root → leaf.
    pub fn path(&self) -> &[Entry] {
        &self.path
    }

    /// Returns every entry in file order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Returns an entry by id.
    pub fn entry(&self, id: &EntryId) -> Option<&Entry> {
        self.index.get(id).map(|&idx| &self.entries[idx])
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
        let setup = Self::setup(
            &self.config,
            &self.budget,
            self.counter.clone(),
            self.native.as_ref().map(|native| native.target()),
        );
        self.live = LiveInput::build(setup, &self.path);
    }

    /// Returns the native compactor, when one is set.
    pub fn native_compactor(&self) -> Option<&Arc<dyn NativeCompactor>> {
        self.native.as_ref()
    }

    /// Returns the active model id: the latest `model_change` on the path,
    /// else the configured one.
    pub fn model_id(&self) -> &str {
        self.path
            .iter()
            .rev()
            .find_map(|entry| match &entry.body {
                EntryBody::ModelChange { model } => Some(model.as_str()),
                _ => None,
            })
            .unwrap_or(&self.config.model.id)
    }

    /// Returns the calibration factor of the active model on the path.
    pub fn factor(&self) -> Factor {
        let input = CalibrationInput {
            model: self.model_id(),
            seed: self.config.model.seed,
            context_window: Some(self.config.model.context_window),
        };
        calibration::calibrate(&self.path, &input).factor
    }

    /// Measures effective tokens now (SPEC §4.2).
    pub fn measure(&self) -> Measurement {
        let messages = self.live.message_tokens();
        let factor = self.factor();
        calibration::measure(&MeasureInput {
            path: &self.path,
            fixed_tokens: self.live.fixed_tokens(),
            messages: &messages,
            model: self.model_id(),
            factor,
            tool_set_unchanged: true,
        })
    }

    /// Returns the state derived from the path (intents, turn, soft capsules).
    pub fn derived(&self) -> DerivedState {
        DerivedState::from_path(&self.path)
    }

    fn record(&mut self, entry: Entry) -> Entry {
        self.index.insert(entry.id.clone(), self.entries.len());
        self.entries.push(entry.clone());
        if let EntryBody::Leaf { .. } = entry.body {
            self.recompute_path();
        } else {
            self.path.push(entry.clone());
            self.live.extend(&self.path);
        }
        entry
    }

    /// Appends an entry (durably) and brings path and input up to date.
    pub fn append(&mut self, body: EntryBody) -> Result<Entry, EngineError> {
        let entry = self.writer.append(body).map_err(EngineError::Store)?;
        Ok(self.record(entry))
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
        Ok(self.record(entry))
    }

    /// Moves the leaf to `target` (a `leaf` entry); later entries stay.
    pub fn rewind(&mut self, target: EntryId) -> Result<Entry, EngineError> {
        if !self.index.contains_key(&target) {
            return Err(EngineError::Invalid(format!(
                "no entry {target} in this session"
            )));
        }
        self.append(EntryBody::Leaf { target })
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
            ),
            path,
        )
    }
}
