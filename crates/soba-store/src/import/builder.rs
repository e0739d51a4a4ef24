//! The session builder shared by every importer: mints entry ids, chains
//! parents, normalises timestamps, records inferences and computes the
//! import statistics.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use soba_core::capsule::ImportedCapsule;
use soba_core::render::{CapsuleView, capsule_input};
use soba_core::tokens::{BpeCounter, DEFAULT_IMAGE_TOKENS, count_message};
use soba_core::{
    Block, Capsule, CapsuleState, Encoding, Entry, EntryBody, EntryId, IdKind, Image, ImageSource,
    Message, MessageEntry, MessageOrigin, Quality, ResultPart, Role, TokenCount, Trigger, Usage,
};

use super::lines::Lines;
use super::scan::{Scan, TopLevel, scan_line};
use super::{BilledResponse, Format, ImportStats, ImportedSession, Inference};

/// Where an import reads from and how it dates undated entries.
#[derive(Debug, Clone)]
pub(crate) struct Context {
    /// The source file (for diagnostics and id seeds).
    pub source: PathBuf,
    /// Unix milliseconds for entries whose source records no time.
    pub fallback_ms: i64,
}

/// The largest timestamp a uuid v7 holds (48 bits of milliseconds).
const MAX_UUID_MS: i64 = (1 << 48) - 1;

/// Which entry an imported capsule keeps from: its retained tail must lie
/// before it on the path (what `soba show --check` requires).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeptTarget {
    /// This entry index, which must come before the capsule.
    Entry(usize),
    /// Nothing before the capsule is kept: the summary stands for all of it
    /// and the entries after the capsule follow verbatim.
    Nothing,
}

/// Accumulates one imported session.
#[derive(Debug)]
pub(crate) struct SessionBuilder {
    format: Format,
    source: PathBuf,
    seed: [u8; 32],
    minted: u64,
    fallback_ms: i64,
    last_ms: Option<i64>,
    entries: Vec<Entry>,
    kept: Vec<(usize, KeptTarget)>,
    last_capsule: Option<usize>,
    inferences: Vec<Inference>,
    /// The source's session id.
    pub original_id: String,
    /// The session's working directory.
    pub cwd: Option<String>,
    /// RFC 3339 creation time.
    pub created_at: Option<String>,
    /// The session's first model.
    pub model: Option<String>,
    /// The recorded context window.
    pub context_window: Option<u64>,
    /// The recorded system prompt.
    pub system_prompt: Option<String>,
    /// Whether the system prompt is also a `system` entry.
    pub system_prompt_in_entries: bool,
    /// Recorded tool schemas.
    pub tool_schemas: Vec<Value>,
    /// Message records as stored.
    pub messages: u64,
    /// Records per kind.
    pub records: BTreeMap<String, u64>,
    /// Raw usage in the source's terms.
    pub usage_raw: Value,
    /// Every billed response, when the importer reads them apart from the
    /// history; `None`: the inferences with usage are the billed responses.
    pub billed: Option<Vec<BilledResponse>>,
    /// Normalised totals when they do not come from summing inferences
    /// (cumulative counters, run totals).
    pub usage_override: Option<Usage>,
    /// The peak prompt when it does not come from the inferences.
    pub peak_override: Option<u64>,
    /// Diagnostics so far.
    pub diagnostics: Diagnostics,
}

/// The most diagnostics one import lists; the rest are only counted.
pub(crate) const DIAGNOSTICS_LISTED: usize = 1_000;

/// What an import skipped or guessed, one line each: the first
/// [`DIAGNOSTICS_LISTED`] are kept, the rest only counted, so a file of a
/// million damaged lines costs a thousand notes, not a million. Reads as
/// the slice of the notes kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Diagnostics {
    listed: Vec<String>,
    unlisted: u64,
}

impl Diagnostics {
    /// Adds one note.
    pub fn push(&mut self, note: String) {
        if self.listed.len() < DIAGNOSTICS_LISTED {
            self.listed.push(note);
        } else {
            self.unlisted += 1;
        }
    }

    /// Adds `notes`, in order, leaving it empty.
    pub fn append(&mut self, notes: &mut Vec<String>) {
        for note in notes.drain(..) {
            self.push(note);
        }
    }

    /// The notes kept and how many more there were.
    pub fn into_parts(self) -> (Vec<String>, u64) {
        (self.listed, self.unlisted)
    }
}

impl std::ops::Deref for Diagnostics {
    type Target = [String];

    fn deref(&self) -> &[String] {
        &self.listed
    }
}

impl SessionBuilder {
    /// Starts the `ordinal`-th session of a file.
    pub fn new(format: Format, ctx: &Context, ordinal: usize) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(ctx.source.to_string_lossy().as_bytes());
        hasher.update(b"\n");
        hasher.update((ordinal as u64).to_le_bytes());
        let seed: [u8; 32] = hasher.finalize().into();
        let original_id = ctx
            .source
            .file_stem()
            .map(|stem| stem.to_string_lossy().into_owned())
            .unwrap_or_default();
        SessionBuilder {
            format,
            source: ctx.source.clone(),
            seed,
            minted: 0,
            fallback_ms: ctx.fallback_ms.clamp(0, MAX_UUID_MS),
            last_ms: None,
            entries: Vec::new(),
            kept: Vec::new(),
            last_capsule: None,
            inferences: Vec::new(),
            original_id,
            cwd: None,
            created_at: None,
            model: None,
            context_window: None,
            system_prompt: None,
            system_prompt_in_entries: false,
            tool_schemas: Vec::new(),
            messages: 0,
            records: BTreeMap::new(),
            usage_raw: Value::Null,
            billed: None,
            usage_override: None,
            peak_override: None,
            diagnostics: Diagnostics::default(),
        }
    }

    /// Returns the number of entries so far.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Records a diagnostic.
    pub fn diag(&mut self, text: impl Into<String>) {
        self.diagnostics.push(text.into());
    }

    /// Counts one source record of `kind`.
    pub fn count_record(&mut self, kind: &str) {
        let n = self.records.entry(kind.to_owned()).or_insert(0);
        *n = n.saturating_add(1);
    }

    /// Mints the next id and the entry's timestamp text.
    fn mint(&mut self, kind: IdKind, timestamp: Option<String>) -> (EntryId, String) {
        let source_ms = timestamp.as_deref().and_then(timestamp_ms);
        let wanted = source_ms.unwrap_or_else(|| {
            self.last_ms
                .map_or(self.fallback_ms, |last| last.saturating_add(1))
        });
        let ms = match self.last_ms {
            Some(last) if wanted <= last => last.saturating_add(1),
            _ => wanted,
        }
        .clamp(0, MAX_UUID_MS);
        self.last_ms = Some(ms);
        let mut hasher = Sha256::new();
        hasher.update(self.seed);
        hasher.update(self.minted.to_le_bytes());
        self.minted = self.minted.saturating_add(1);
        let digest: [u8; 32] = hasher.finalize().into();
        let mut random = [0u8; 10];
        random.copy_from_slice(&digest[..10]);
        let uuid =
            uuid::Builder::from_unix_timestamp_millis(ms.unsigned_abs(), &random).into_uuid();
        let text = match (timestamp, source_ms) {
            (Some(text), Some(_)) => text,
            _ => format_ms(ms),
        };
        (EntryId::from_uuid(kind, uuid.as_u128()), text)
    }

    fn push(&mut self, kind: IdKind, timestamp: Option<String>, body: EntryBody) -> usize {
        let (id, timestamp) = self.mint(kind, timestamp);
        let parent_id = self.entries.last().map(|entry| entry.id.clone());
        self.entries.push(Entry {
            id,
            parent_id,
            timestamp,
            body,
        });
        self.entries.len() - 1
    }

    /// Appends a message entry and returns its index.
    pub fn push_message(&mut self, mut message: Message, timestamp: Option<String>) -> usize {
        // The session is held whole until it is written: no spare capacity.
        message.content.shrink_to_fit();
        self.push(
            IdKind::Entry,
            timestamp,
            EntryBody::Message(MessageEntry {
                message,
                tokens: None,
            }),
        )
    }

    /// Appends a `model_change` entry.
    pub fn push_model_change(&mut self, model: String, timestamp: Option<String>) -> usize {
        self.push(IdKind::Entry, timestamp, EntryBody::ModelChange { model })
    }

    /// Appends an imported capsule carrying a foreign summary; its
    /// `firstKeptEntryId` is resolved from `kept` when the session ends.
    pub fn push_capsule(
        &mut self,
        summary: String,
        original_id: String,
        tokens_before: u64,
        timestamp: Option<String>,
        kept: KeptTarget,
    ) -> usize {
        let previous_capsule_id = self.last_capsule.map(|idx| self.entries[idx].id.clone());
        let capsule = Capsule {
            trigger: Trigger::Imported,
            quality: Quality::Full,
            first_kept_entry_id: None,
            boundary_truncation: None,
            tokens_before: TokenCount::new(tokens_before),
            tokens_after: TokenCount::ZERO,
            summarizer: self.format.agent().to_owned(),
            previous_capsule_id,
            state: CapsuleState {
                model: self.current_model(),
                ..CapsuleState::default()
            },
            instructions: None,
            native: None,
            overflow: None,
            imported: Some(ImportedCapsule {
                agent: self.format.agent().to_owned(),
                original_id,
            }),
            scope: None,
            narrative: Default::default(),
            earlier_narrative: None,
            rehydrated: Default::default(),
            local: Default::default(),
            markdown: summary,
        };
        let idx = self.push(
            IdKind::Capsule,
            timestamp,
            EntryBody::Capsule(Box::new(capsule)),
        );
        self.kept.push((idx, kept));
        self.last_capsule = Some(idx);
        idx
    }

    /// Marks the capsule at `capsule_idx` degraded: its summary could not
    /// be read (Codex's encrypted compaction), so what it says is ours.
    pub fn set_degraded(&mut self, capsule_idx: usize) {
        if let Some(EntryBody::Capsule(capsule)) = self
            .entries
            .get_mut(capsule_idx)
            .map(|entry| &mut entry.body)
        {
            capsule.quality = Quality::Degraded;
        }
    }

    /// Returns the prompt of the latest inference with usage (input, cache
    /// reads and writes): the context a compaction right after it replaced.
    pub fn last_prompt(&self) -> Option<u64> {
        self.inferences
            .iter()
            .rev()
            .find_map(|inference| inference.usage.as_ref())
            .map(prompt_of)
    }

    /// Changes where the capsule at `capsule_idx` keeps from.
    pub fn set_kept(&mut self, capsule_idx: usize, kept: KeptTarget) {
        if let Some(slot) = self.kept.iter_mut().find(|(idx, _)| *idx == capsule_idx) {
            slot.1 = kept;
        }
    }

    /// Returns the model of the latest model change or assistant message.
    fn current_model(&self) -> String {
        self.entries
            .iter()
            .rev()
            .find_map(|entry| match &entry.body {
                EntryBody::ModelChange { model } => Some(model.clone()),
                EntryBody::Message(m) if m.message.role == Role::Assistant => {
                    m.message.model.clone()
                }
                _ => None,
            })
            .or_else(|| self.model.clone())
            .unwrap_or_default()
    }

    /// Returns the message at `idx`, if that entry is a message.
    pub fn message_mut(&mut self, idx: usize) -> Option<&mut Message> {
        match self.entries.get_mut(idx).map(|entry| &mut entry.body) {
            Some(EntryBody::Message(entry)) => Some(&mut entry.message),
            _ => None,
        }
    }

    /// Records an inference answered by the assistant entry `entry_idx`.
    /// Its usage and model are also set on that message.
    pub fn push_inference(
        &mut self,
        entry_idx: usize,
        usage: Option<Usage>,
        timestamp: Option<String>,
        model: Option<String>,
        response_id: Option<String>,
    ) -> usize {
        if let Some(message) = self.message_mut(entry_idx) {
            message.usage = usage;
            if model.is_some() {
                message.model.clone_from(&model);
            }
        }
        if self.model.is_none() {
            self.model.clone_from(&model);
        }
        self.inferences.push(Inference {
            first_entry: entry_idx,
            last_entry: entry_idx,
            usage,
            timestamp,
            model,
            response_id,
        });
        self.inferences.len() - 1
    }

    /// Sets the usage of inference `inference_idx` (and of its last message).
    pub fn set_inference_usage(&mut self, inference_idx: usize, usage: Usage) {
        let Some(inference) = self.inferences.get_mut(inference_idx) else {
            return;
        };
        inference.usage = Some(usage);
        let last = inference.last_entry;
        if let Some(message) = self.message_mut(last) {
            message.usage = Some(usage);
        }
    }

    /// Forgets the usage of inference `inference_idx` (and of its last
    /// message): the source recorded figures that are not counts.
    pub fn clear_inference_usage(&mut self, inference_idx: usize) {
        let Some(inference) = self.inferences.get_mut(inference_idx) else {
            return;
        };
        inference.usage = None;
        let last = inference.last_entry;
        if let Some(message) = self.message_mut(last) {
            message.usage = None;
        }
    }

    /// Ends the session: checks tool pairing (repairing what is
    /// unambiguous), resolves capsule targets, measures capsules and
    /// computes statistics.
    pub fn finish(mut self) -> ImportedSession {
        let pairing = self.check_pairing();
        self.resolve_capsules();
        let mut stats = self.stats();
        stats.orphan_tool_results = pairing.orphans;
        stats.results_before_calls = pairing.before_calls;
        stats.reordered_tool_results = pairing.reordered;
        ImportedSession {
            format: self.format,
            source: self.source,
            original_id: self.original_id,
            cwd: self.cwd,
            created_at: self.created_at,
            model: self.model,
            context_window: self.context_window,
            system_prompt: self.system_prompt,
            system_prompt_in_entries: self.system_prompt_in_entries,
            tool_schemas: self.tool_schemas,
            entries: self.entries,
            inferences: self.inferences,
            stats,
        }
    }

    /// The one pairing check of every importer. A run of tool results
    /// directly before the assistant entry that makes their calls (and
    /// made nowhere earlier) is moved after it; every other result with no
    /// earlier call is kept as an `observation` user message (so nothing is
    /// lost and the session passes `soba show --check`) and reported.
    ///
    /// Call ids are never merged silently: a call id made twice (in one
    /// message or again later) is reported with the entries of its calls,
    /// and each result pairs with the latest call of its id that has no
    /// result yet (the diagnostic says which); a second result for an
    /// answered call is kept as an observation and reported with the entry
    /// of the result it repeats.
    fn check_pairing(&mut self) -> Pairing {
        let mut pairing = Pairing::default();
        let order = self.repair_order(&mut pairing);
        let order = self.regroup_split_batches(order, &mut pairing);
        self.diagnostics.append(&mut pairing.notes);
        if order.iter().enumerate().any(|(new, &old)| new != old) {
            self.apply_order(&order);
        }
        let mut all_calls: HashSet<String> = HashSet::new();
        for entry in &self.entries {
            if let EntryBody::Message(m) = &entry.body {
                all_calls.extend(m.message.tool_uses().map(|call| call.id.clone()));
            }
        }
        // Each call id's latest call (entry index) and, once answered, the
        // entry of its result.
        let mut calls: HashMap<String, (usize, Option<usize>)> = HashMap::new();
        let mut reused: HashSet<String> = HashSet::new();
        for entry_idx in 0..self.entries.len() {
            let Some(message) = message_of(&self.entries[entry_idx]) else {
                continue;
            };
            let mut unpaired: Vec<String> = Vec::new();
            let mut repeats: HashMap<String, usize> = HashMap::new();
            let mut notes: Vec<String> = Vec::new();
            let mut paired_here: Vec<String> = Vec::new();
            let mut pair_notes: Vec<String> = Vec::new();
            for result in message.tool_results() {
                let id = &result.tool_use_id;
                match calls.get_mut(id) {
                    None => unpaired.push(id.clone()),
                    Some((_, Some(answered))) => {
                        repeats.insert(id.clone(), *answered);
                    }
                    Some((call_idx, answer @ None)) => {
                        *answer = Some(entry_idx);
                        paired_here.push(id.clone());
                        if reused.contains(id) {
                            pair_notes.push(format!(
                                "entry {entry_idx}: the tool result for call {id:?} pairs with the call at entry {call_idx} (the latest call of that id)"
                            ));
                        }
                    }
                }
            }
            let mut in_message: HashSet<&str> = HashSet::new();
            for call in message.tool_uses() {
                let id = &call.id;
                if !in_message.insert(id.as_str()) {
                    reused.insert(id.clone());
                    notes.push(format!(
                        "entry {entry_idx}: call id {id:?} is used by two calls in one message; only one result can pair with them, the model sees the first call, and a second result is kept as an observation"
                    ));
                    continue;
                }
                if let Some((earlier, _)) = calls.get(id) {
                    reused.insert(id.clone());
                    notes.push(format!(
                        "entry {entry_idx}: call id {id:?} was already used by the call at entry {earlier}; results after entry {entry_idx} pair with this call"
                    ));
                }
                calls.insert(id.clone(), (entry_idx, None));
            }
            self.diagnostics.append(&mut notes);
            if unpaired.is_empty() && repeats.is_empty() {
                self.diagnostics.append(&mut pair_notes);
                continue;
            }
            // The whole message becomes an observation: its other results
            // answer nothing either.
            for id in paired_here {
                if let Some((_, answer)) = calls.get_mut(&id) {
                    *answer = None;
                }
            }
            let observation = observation_of(message, &repeats);
            for id in &unpaired {
                let (what, counter) = if all_calls.contains(id) {
                    ("is recorded before its call", &mut pairing.before_calls)
                } else {
                    ("has no call in the transcript", &mut pairing.orphans)
                };
                *counter += 1;
                self.diagnostics.push(format!(
                    "entry {entry_idx}: the tool result for call {id:?} {what}; kept as an observation message (not a tool result) so the session stays valid"
                ));
            }
            let mut repeats: Vec<(String, usize)> = repeats.into_iter().collect();
            repeats.sort();
            for (id, answered) in repeats {
                self.diagnostics.push(format!(
                    "entry {entry_idx}: a second tool result for call {id:?}, already answered by the result at entry {answered}; kept as an observation message (not a tool result) so the session stays valid"
                ));
            }
            if let EntryBody::Message(m) = &mut self.entries[entry_idx].body {
                m.message = observation;
            }
        }
        pairing
    }

    /// Returns the entry order with each unambiguous result-before-call
    /// run moved after its call: `order[new] = old`.
    fn repair_order(&self, pairing: &mut Pairing) -> Vec<usize> {
        let n = self.entries.len();
        let mut order: Vec<usize> = Vec::with_capacity(n);
        let mut called: HashSet<&str> = HashSet::new();
        let mut idx = 0;
        while idx < n {
            let entry = &self.entries[idx];
            let Some(message) = message_of(entry) else {
                order.push(idx);
                idx += 1;
                continue;
            };
            if message.role == Role::Assistant {
                // The results just before it that answer its calls.
                let calls: HashSet<&str> = message.tool_uses().map(|c| c.id.as_str()).collect();
                let mut run_start = order.len();
                while run_start > 0 {
                    let candidate = order[run_start - 1];
                    let is_match = message_of(&self.entries[candidate]).is_some_and(|m| {
                        m.role == Role::Tool
                            && m.tool_results().count() > 0
                            && m.tool_results().all(|r| {
                                calls.contains(r.tool_use_id.as_str())
                                    && !called.contains(r.tool_use_id.as_str())
                            })
                    });
                    if !is_match {
                        break;
                    }
                    run_start -= 1;
                }
                let moved: Vec<usize> = order.split_off(run_start);
                order.push(idx);
                for &old in &moved {
                    pairing.reordered += 1;
                    pairing.notes.push(format!(
                        "entry {old}: a tool result recorded just before its call (entry {idx}) was moved after it"
                    ));
                }
                order.extend(moved);
                called.extend(calls);
            } else {
                called.extend(message.tool_uses().map(|c| c.id.as_str()));
                order.push(idx);
            }
            idx += 1;
        }
        order
    }

    /// Returns `order` with every tool result placed right after the
    /// assistant message of its call. Claude Code records the calls of one
    /// response as consecutive assistant messages and their results as
    /// they finish, interleaved with later calls (`A1 A2 R1 A3 R2 R3`),
    /// sometimes with a queued user message, a model change or a
    /// compaction in between; a model input needs each result right after
    /// its call, and the input would otherwise sweep the late ones.
    ///
    /// A tool message whose results all answer open calls of one assistant
    /// message (each result pairing with the latest call of its id that has
    /// no result yet) moves to follow it, after that message's earlier
    /// results; every other entry keeps its place, so nothing ends up
    /// between an assistant message and its results. A tool message that
    /// answers calls of two assistant messages, an already answered call or
    /// no call stays where it is (the pairing check reports it).
    fn regroup_split_batches(&self, order: Vec<usize>, pairing: &mut Pairing) -> Vec<usize> {
        // Pass 1: which assistant entry (by position in `order`) each tool
        // message follows.
        let mut open: HashMap<&str, Vec<usize>> = HashMap::new();
        let mut follows: Vec<Option<usize>> = vec![None; order.len()];
        let mut groups: HashMap<usize, Vec<usize>> = HashMap::new();
        for (pos, &idx) in order.iter().enumerate() {
            let Some(message) = message_of(&self.entries[idx]) else {
                continue;
            };
            if message.role == Role::Assistant {
                for call in message.tool_uses() {
                    open.entry(call.id.as_str()).or_default().push(pos);
                }
                continue;
            }
            if message.role != Role::Tool || message.tool_results().count() == 0 {
                continue;
            }
            let owners: Vec<Option<usize>> = message
                .tool_results()
                .map(|r| {
                    open.get(r.tool_use_id.as_str())
                        .and_then(|calls| calls.last().copied())
                })
                .collect();
            let Some(Some(owner)) = owners.first().copied() else {
                continue;
            };
            if owners.iter().any(|o| *o != Some(owner)) {
                continue;
            }
            for result in message.tool_results() {
                if let Some(calls) = open.get_mut(result.tool_use_id.as_str()) {
                    calls.pop();
                }
            }
            follows[pos] = Some(owner);
            groups.entry(owner).or_default().push(pos);
        }
        // Pass 2: each assistant entry, then the tool messages that follow
        // it; everything else in place.
        let mut out_pos: Vec<usize> = Vec::with_capacity(order.len());
        for (pos, follow) in follows.iter().enumerate() {
            if follow.is_some() {
                continue;
            }
            out_pos.push(pos);
            if let Some(results) = groups.get(&pos) {
                out_pos.extend(results);
            }
        }
        let mut new_of = vec![0usize; order.len()];
        for (new, &pos) in out_pos.iter().enumerate() {
            new_of[pos] = new;
        }
        let mut moved = 0u64;
        for (pos, owner) in follows.iter().enumerate() {
            let Some(owner) = *owner else { continue };
            // Moved when an entry that stays in place lay between (results
            // of other calls, moved away themselves, do not count).
            let between = (owner + 1..pos).any(|p| follows[p].is_none());
            if between {
                moved += 1;
                pairing.notes.push(format!(
                    "entry {}: a tool result recorded after other entries was moved right after its call (entry {})",
                    new_of[pos], new_of[owner]
                ));
            }
        }
        pairing.reordered += moved;
        out_pos.into_iter().map(|pos| order[pos]).collect()
    }

    /// Reorders entry bodies by `order` (`order[new] = old`); ids, parents
    /// and timestamps stay in place so ids stay increasing, and every index
    /// held (inferences, capsule targets) follows its body.
    fn apply_order(&mut self, order: &[usize]) {
        let mut new_of = vec![0usize; order.len()];
        for (new, &old) in order.iter().enumerate() {
            new_of[old] = new;
        }
        let mut bodies: Vec<Option<EntryBody>> = self
            .entries
            .iter_mut()
            .map(|entry| {
                Some(std::mem::replace(
                    &mut entry.body,
                    EntryBody::ModelChange {
                        model: String::new(),
                    },
                ))
            })
            .collect();
        for (new, &old) in order.iter().enumerate() {
            if let Some(body) = bodies[old].take() {
                self.entries[new].body = body;
            }
        }
        let remap = |idx: usize| new_of.get(idx).copied().unwrap_or(idx);
        for inference in &mut self.inferences {
            inference.first_entry = remap(inference.first_entry);
            inference.last_entry = remap(inference.last_entry);
            inference.first_entry = inference.first_entry.min(inference.last_entry);
        }
        for (capsule_idx, target) in &mut self.kept {
            *capsule_idx = remap(*capsule_idx);
            if let KeptTarget::Entry(idx) = target {
                *idx = remap(*idx);
            }
        }
        self.last_capsule = self.last_capsule.map(remap);
    }

    /// Resolves each capsule's `firstKeptEntryId` (an entry before it, or
    /// none) and measures its `tokensAfter`: the capsule as the model sees
    /// it plus its retained tail, counted locally in `o200k_base`.
    fn resolve_capsules(&mut self) {
        let counter = BpeCounter::new(Encoding::O200kBase);
        for (capsule_idx, target) in std::mem::take(&mut self.kept) {
            let kept_idx = match target {
                KeptTarget::Entry(idx) if idx < capsule_idx => Some(idx),
                KeptTarget::Entry(idx) => {
                    self.diagnostics.push(format!(
                        "entry {capsule_idx}: the recorded compaction keeps from entry {idx}, which is not before it; it keeps nothing verbatim"
                    ));
                    None
                }
                KeptTarget::Nothing => None,
            };
            let kept_id = kept_idx.map(|idx| self.entries[idx].id.clone());
            let tail: TokenCount = kept_idx
                .map_or(&[][..], |idx| &self.entries[idx..capsule_idx])
                .iter()
                .filter_map(message_of)
                .filter(|message| message.role != Role::System)
                .map(|message| count_message(&counter, message, DEFAULT_IMAGE_TOKENS).n)
                .sum();
            if let Some(EntryBody::Capsule(capsule)) = self
                .entries
                .get_mut(capsule_idx)
                .map(|entry| &mut entry.body)
            {
                capsule.first_kept_entry_id = kept_id;
                let rendered = Message::user(capsule_input(&CapsuleView::from(&**capsule)));
                let own = count_message(&counter, &rendered, DEFAULT_IMAGE_TOKENS).n;
                capsule.tokens_after = own + tail;
            }
        }
    }

    fn stats(&mut self) -> ImportStats {
        let (diagnostics, diagnostics_unlisted) =
            std::mem::take(&mut self.diagnostics).into_parts();
        let mut stats = ImportStats {
            messages: self.messages,
            records: std::mem::take(&mut self.records),
            usage_raw: std::mem::take(&mut self.usage_raw),
            billed: self.billed.take().unwrap_or_else(|| {
                self.inferences
                    .iter()
                    .filter_map(|inference| {
                        inference.usage.map(|usage| BilledResponse {
                            model: inference.model.clone(),
                            usage,
                            cache_write_1h: 0,
                            timestamp: inference.timestamp.clone(),
                        })
                    })
                    .collect()
            }),
            diagnostics,
            diagnostics_unlisted,
            ..ImportStats::default()
        };
        let mut call_ids = Vec::new();
        let mut result_ids = HashSet::new();
        for entry in &self.entries {
            match &entry.body {
                EntryBody::Message(m) => {
                    stats.entries += 1;
                    if let Some(usage) = &m.message.usage {
                        stats.stored_usage.add(usage);
                    }
                    for block in &m.message.content {
                        match block {
                            Block::ToolUse(call) => call_ids.push(call.id.as_str()),
                            Block::ToolResult(result) => {
                                stats.tool_results += 1;
                                result_ids.insert(result.tool_use_id.as_str());
                            }
                            _ => {}
                        }
                    }
                }
                EntryBody::Capsule(_) => stats.compactions += 1,
                _ => {}
            }
        }
        stats.tool_calls = call_ids.len() as u64;
        stats.unpaired_tool_calls = call_ids
            .iter()
            .filter(|id| !result_ids.contains(*id))
            .count() as u64;
        let mut total = Usage::default();
        let mut peak: Option<u64> = None;
        for usage in self
            .inferences
            .iter()
            .filter_map(|inference| inference.usage.as_ref())
        {
            add_usage(&mut total, usage);
            let prompt = prompt_of(usage);
            peak = Some(peak.map_or(prompt, |p| p.max(prompt)));
        }
        stats.usage = self.usage_override.unwrap_or(total);
        stats.peak_prompt_tokens = self.peak_override.or(peak);
        stats
    }
}

/// What the pairing check found.
#[derive(Debug, Default)]
struct Pairing {
    notes: Vec<String>,
    orphans: u64,
    before_calls: u64,
    reordered: u64,
}

/// Returns the message of a message entry.
fn message_of(entry: &Entry) -> Option<&Message> {
    match &entry.body {
        EntryBody::Message(m) => Some(&m.message),
        _ => None,
    }
}

/// Rewrites a message whose tool results cannot be paired as a user
/// message of origin `observation`: each result becomes a text block
/// naming its call (images kept), other blocks are kept. `repeats` maps a
/// call id already answered to the entry of its result.
fn observation_of(message: &Message, repeats: &HashMap<String, usize>) -> Message {
    let mut content = Vec::new();
    for block in &message.content {
        match block {
            Block::ToolResult(result) => {
                let status = if result.is_error { " (error)" } else { "" };
                let id = &result.tool_use_id;
                content.push(Block::Text(match repeats.get(id) {
                    Some(answered) => format!(
                        "[tool result{status} for call {id:?}, which the result at entry {answered} already answers]"
                    ),
                    None => format!(
                        "[tool result{status} for call {id:?}, whose call is not before it in the transcript]"
                    ),
                }));
                for part in &result.content {
                    content.push(match part {
                        ResultPart::Text(text) => Block::Text(text.clone()),
                        ResultPart::Image(image) => Block::Image(image.clone()),
                    });
                }
            }
            Block::ToolUse(_) => {}
            other => content.push(other.clone()),
        }
    }
    let mut out = message_with(Role::User, content, MessageOrigin::Observation);
    out.model.clone_from(&message.model);
    out
}

/// Adds `other` to `total`, saturating (hostile input cannot overflow).
pub(crate) fn add_usage(total: &mut Usage, other: &Usage) {
    total.input = total.input.saturating_add(other.input);
    total.cache_read = total.cache_read.saturating_add(other.cache_read);
    total.cache_write = total.cache_write.saturating_add(other.cache_write);
    total.output = total.output.saturating_add(other.output);
    total.reasoning = total.reasoning.saturating_add(other.reasoning);
}

/// Returns a request's prompt size, saturating.
pub(crate) fn prompt_of(usage: &Usage) -> u64 {
    usage
        .input
        .saturating_add(usage.cache_read)
        .saturating_add(usage.cache_write)
}

/// Parses an RFC 3339 text (as normalised by [`timestamp_of`]) to Unix ms.
pub(crate) fn timestamp_ms(text: &str) -> Option<i64> {
    text.parse::<jiff::Timestamp>()
        .ok()
        .map(jiff::Timestamp::as_millisecond)
}

/// Formats Unix milliseconds as RFC 3339 UTC.
pub(crate) fn format_ms(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|ts| ts.to_string())
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

/// Normalises a source timestamp to RFC 3339 UTC: an RFC 3339 string (kept
/// verbatim when already UTC), a naive ISO date-time (taken as UTC, as
/// OpenHands writes them), or a number of Unix milliseconds (seconds when
/// small). Anything else gives `None`.
pub(crate) fn timestamp_of(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => {
            let text = text.trim();
            if let Ok(ts) = text.parse::<jiff::Timestamp>() {
                if text.ends_with('Z') && !text.contains(' ') {
                    return Some(text.to_owned());
                }
                return Some(ts.to_string());
            }
            let civil = text.parse::<jiff::civil::DateTime>().ok()?;
            let zoned = civil.to_zoned_datetime(jiff::tz::TimeZone::UTC).ok()?;
            Some(zoned.timestamp().to_string())
        }
        Value::Number(number) => {
            let raw = number.as_f64()?;
            if !raw.is_finite() {
                return None;
            }
            // Numbers below 1e11 are seconds (1e11 ms is 1973; 1e11 s is year 5138).
            let ms = if raw.abs() < 1e11 { raw * 1000.0 } else { raw };
            if ms.abs() > 8.0e15 {
                return None;
            }
            jiff::Timestamp::from_millisecond(ms as i64)
                .ok()
                .map(|ts| ts.to_string())
        }
        _ => None,
    }
}

/// Returns `obj[key]` normalised as a timestamp.
pub(crate) fn timestamp_field(obj: &Map<String, Value>, key: &str) -> Option<String> {
    obj.get(key).and_then(timestamp_of)
}

/// Reads a non-negative count: an integer, a non-negative float (truncated)
/// or a numeric string. Anything else gives `None`.
pub(crate) fn count_of(value: &Value) -> Option<u64> {
    match value {
        Value::Number(number) => number.as_u64().or_else(|| {
            let float = number.as_f64()?;
            (float.is_finite() && float >= 0.0).then(|| float.min(u64::MAX as f64) as u64)
        }),
        Value::String(text) => text.trim().parse().ok(),
        _ => None,
    }
}

/// Reads `obj[key]` as a count, zero when absent or not a count.
pub(crate) fn count_field(obj: &Map<String, Value>, key: &str) -> u64 {
    obj.get(key).and_then(count_of).unwrap_or(0)
}

/// The largest usage figure one request can plausibly record: 10^12
/// tokens, far beyond any context window or output limit. A larger figure
/// (`u64::MAX`, a counter that wrapped, a timestamp in the wrong field) is
/// implausible and rejected like a negative one.
pub(crate) const MAX_PLAUSIBLE_TOKENS: u64 = 1_000_000_000_000;

/// Reads usage figures — the one usage parser of every importer. Each of
/// `keys` (a dotted path into `usage`, e.g.
/// `prompt_tokens_details.cached_tokens`) must be absent, `null`, a
/// non-negative integer of at most [`MAX_PLAUSIBLE_TOKENS`] or a string of
/// such digits (read as 0 when absent). Any other value (negative,
/// fractional, implausibly large, not a number) gets a diagnostic naming
/// `at` and the field, and the whole
/// usage object is rejected (`None`): a guessed figure would mislead
/// calibration, so that inference records no usage.
pub(crate) fn usage_figures<const N: usize>(
    usage: &Map<String, Value>,
    keys: [&str; N],
    at: &str,
    diagnostics: &mut Diagnostics,
) -> Option<[u64; N]> {
    let mut out = [0u64; N];
    let mut valid = true;
    for (slot, key) in out.iter_mut().zip(keys) {
        let mut field: Option<&Value> = None;
        let mut parent = Some(usage);
        for part in key.split('.') {
            field = parent.and_then(|obj| obj.get(part));
            parent = field.and_then(Value::as_object);
        }
        match figure_of(field) {
            Ok(n) => *slot = n,
            Err(why) => {
                valid = false;
                let shown = field.map(Value::to_string).unwrap_or_default();
                let shown: String = shown.chars().take(40).collect();
                diagnostics.push(format!(
                    "{at}: usage field `{key}` is {shown} ({why}); this usage is not recorded and is kept out of calibration"
                ));
            }
        }
    }
    valid.then_some(out)
}

/// Reads `obj[key]`, a token figure a transcript records beside its usage
/// (a compaction's tokens before it), as [`usage_figures`] reads one: a
/// value that is not a plausible count is read as 0 with a diagnostic
/// naming `at`, the key and the value.
pub(crate) fn token_figure(
    obj: &Map<String, Value>,
    key: &str,
    at: &str,
    diagnostics: &mut Diagnostics,
) -> u64 {
    let field = obj.get(key);
    figure_of(field).unwrap_or_else(|why| {
        let shown: String = field
            .map(Value::to_string)
            .unwrap_or_default()
            .chars()
            .take(40)
            .collect();
        diagnostics.push(format!("{at}: `{key}` is {shown} ({why}); read as 0"));
        0
    })
}

/// Reads one usage figure; the error says what is wrong with it.
fn figure_of(value: Option<&Value>) -> Result<u64, &'static str> {
    let figure = raw_figure_of(value)?;
    if figure > MAX_PLAUSIBLE_TOKENS {
        return Err("implausible: more than 10^12 tokens for one request");
    }
    Ok(figure)
}

/// Reads one usage figure as a 64-bit count, before the plausibility check.
fn raw_figure_of(value: Option<&Value>) -> Result<u64, &'static str> {
    match value {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(number)) => {
            if let Some(n) = number.as_u64() {
                Ok(n)
            } else if number.as_i64().is_some() {
                Err("negative")
            } else {
                match number.as_f64() {
                    Some(float) if float < 0.0 => Err("negative"),
                    Some(float) if float.fract() == 0.0 && float >= u64::MAX as f64 => {
                        Err("larger than a 64-bit count")
                    }
                    _ => Err("not a whole number"),
                }
            }
        }
        Some(Value::String(text)) => {
            let text = text.trim();
            if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
                Err("not a number")
            } else {
                text.parse().map_err(|_| "larger than a 64-bit count")
            }
        }
        Some(_) => Err("not a number"),
    }
}

/// Returns the text kept from a content field of unexpected shape — the
/// one helper of every importer for content that is neither text nor a
/// list of parts: `null` gives nothing; an object gives its `text` when it
/// has one, else its JSON; a number or boolean gives its JSON. Every case
/// but a plain string records a diagnostic naming `at` and `field` (a
/// `null` too: an empty message must not pass unnoticed; where the source
/// format allows `null`, such as an OpenAI assistant message that only
/// makes tool calls, the caller does not pass it here).
pub(crate) fn odd_content(
    value: &Value,
    at: &str,
    field: &str,
    diagnostics: &mut Diagnostics,
) -> Option<String> {
    let (kind, kept) = match value {
        Value::Null => {
            diagnostics.push(format!(
                "{at}: `{field}` is null, not text or a list of content blocks; kept as empty content"
            ));
            return None;
        }
        Value::String(text) => return Some(text.clone()),
        Value::Object(obj) => match str_field(obj, "text") {
            Some(text) => ("an object", Some((text.to_owned(), "its `text`"))),
            None => ("an object", None),
        },
        Value::Number(_) => ("a number", None),
        Value::Bool(_) => ("a boolean", None),
        Value::Array(_) => ("a list", None),
    };
    let (text, how) = kept.unwrap_or_else(|| (value.to_string(), "its JSON as text"));
    diagnostics.push(format!(
        "{at}: `{field}` is {kind}, not text or a list of content blocks; kept {how}"
    ));
    Some(text)
}

/// Empty content, for a content field that is missing.
static NO_CONTENT: Value = Value::String(String::new());

/// Returns `obj[key]`, the content field of a message that must have one;
/// a missing field gets a diagnostic naming `at` and `field` and reads as
/// empty content (a `null` is reported later by [`odd_content`]).
pub(crate) fn content_field<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    at: &str,
    field: &str,
    diagnostics: &mut Diagnostics,
) -> &'a Value {
    match obj.get(key) {
        Some(value) => value,
        None => {
            diagnostics.push(format!(
                "{at}: the message has no `{field}`; kept as empty content"
            ));
            &NO_CONTENT
        }
    }
}

/// Returns the text of a content value as [`text_of`] does, except that
/// content of unexpected shape (see [`odd_content`]), and list items that
/// are neither strings nor objects, are kept with a diagnostic instead of
/// becoming empty.
pub(crate) fn content_text(
    value: &Value,
    at: &str,
    field: &str,
    diagnostics: &mut Diagnostics,
) -> String {
    match value {
        Value::Array(parts) => {
            let mut texts: Vec<String> = Vec::new();
            for (idx, part) in parts.iter().enumerate() {
                match part {
                    Value::String(text) => texts.push(text.clone()),
                    Value::Object(obj) => {
                        if let Some(text) = str_field(obj, "text") {
                            texts.push(text.to_owned());
                        }
                    }
                    other => texts.extend(odd_content(
                        other,
                        at,
                        &format!("{field}[{idx}]"),
                        diagnostics,
                    )),
                }
            }
            texts.join("\n")
        }
        other => odd_content(other, at, field, diagnostics).unwrap_or_default(),
    }
}

/// Returns `obj[key]` as a string slice.
pub(crate) fn str_field<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    obj.get(key).and_then(Value::as_str)
}

/// Returns `obj[key]` as an object.
pub(crate) fn obj_field<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
) -> Option<&'a Map<String, Value>> {
    obj.get(key).and_then(Value::as_object)
}

/// Returns `obj[key]` as an array (empty when absent).
pub(crate) fn array_field<'a>(obj: &'a Map<String, Value>, key: &str) -> &'a [Value] {
    obj.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Returns the text of a content value: a string, or the `text` of every
/// text-like part of an array joined by newlines.
pub(crate) fn text_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Array(parts) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter_map(|part| match part {
                    Value::String(text) => Some(text.as_str()),
                    Value::Object(obj) => str_field(obj, "text"),
                    _ => None,
                })
                .collect();
            texts.join("\n")
        }
        Value::Object(obj) => str_field(obj, "text").unwrap_or_default().to_owned(),
        _ => String::new(),
    }
}

/// Returns the image a `data:<mime>;base64,<data>` URI or plain URL names.
pub(crate) fn image_from_url(url: &str) -> Image {
    if let Some(rest) = url.strip_prefix("data:")
        && let Some((media_type, data)) = rest.split_once(";base64,")
    {
        return Image {
            media_type: media_type.to_owned(),
            source: ImageSource::Data(data.to_owned()),
        };
    }
    Image {
        media_type: guess_media_type(url).to_owned(),
        source: ImageSource::Url(url.to_owned()),
    }
}

/// Guesses a media type from a URL's extension (PNG when unknown).
fn guess_media_type(url: &str) -> &'static str {
    let lower = url.to_ascii_lowercase();
    if lower.ends_with(".jpg") || lower.ends_with(".jpeg") {
        "image/jpeg"
    } else if lower.ends_with(".gif") {
        "image/gif"
    } else if lower.ends_with(".webp") {
        "image/webp"
    } else {
        "image/png"
    }
}

/// Builds a message with an origin.
pub(crate) fn message_with(role: Role, content: Vec<Block>, origin: MessageOrigin) -> Message {
    let mut message = Message::new(role, content);
    message.origin = origin;
    message
}

/// Builds a `tool` message with one result.
pub(crate) fn tool_message(
    tool_use_id: String,
    content: Vec<ResultPart>,
    is_error: bool,
) -> Message {
    Message::new(
        Role::Tool,
        vec![Block::ToolResult(soba_core::ToolResult {
            tool_use_id,
            content,
            is_error,
        })],
    )
}

/// Returns whether `text` is an agent-written interruption marker
/// (`[Request interrupted by user…]`, `<turn_aborted>`).
pub(crate) fn is_interrupt_marker(text: &str) -> bool {
    let text = text.trim_start();
    text.starts_with("[Request interrupted by user") || text.starts_with("<turn_aborted>")
}

/// Parses a whole-document JSON transcript (SWE-agent, Gemini CLI, the
/// openai-chat export, Codex `{messages, meta}`) into its top-level object;
/// a document that ends early says so, with where it ends.
pub(crate) fn parse_document(text: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(doc)) => Ok(doc),
        Ok(_) => Err("the file is not a JSON object".into()),
        Err(err) if err.is_eof() => Err(format!(
            "the JSON document ends early at byte {} (truncated?): re-copy it",
            text.len()
        )),
        Err(err) => Err(format!("invalid JSON: {err}")),
    }
}

/// Parses JSONL lines, calling `each(line_idx, object)` for every line that
/// is a JSON object and recording a diagnostic for every other non-blank
/// line. Line indexes are 0-based; diagnostics say "line N" 1-based.
pub(crate) fn for_each_jsonl_object(
    lines: &Lines<'_>,
    diagnostics: &mut Diagnostics,
    mut each: impl FnMut(usize, Map<String, Value>),
) {
    for_each_jsonl_line(lines, diagnostics, |line_idx, line| {
        if let Ok(obj) = line {
            each(line_idx, obj);
        }
    });
}

/// Parses JSONL lines as [`for_each_jsonl_object`] does, also handing
/// `each` the raw text of every line that is not a JSON object (after its
/// diagnostic), so tree-shaped importers can still read its ids.
pub(crate) fn for_each_jsonl_line(
    lines: &Lines<'_>,
    diagnostics: &mut Diagnostics,
    mut each: impl FnMut(usize, Result<Map<String, Value>, &str>),
) {
    lines.each_line(|line_idx, line| {
        if let Some(parsed) = jsonl_line(line_idx, line, diagnostics) {
            each(line_idx, parsed);
        }
        true
    });
}

/// Reads JSONL lines for a first pass, which needs only a few top-level
/// keys (see [`super::scan`]): calls `each(line_idx, line, scanned)` for
/// every non-blank line, trimmed, with the `keys` values of a line that is
/// a JSON object, or `None` after the diagnostic [`jsonl_line`] gives a
/// line that is not.
pub(crate) fn for_each_jsonl_scan(
    lines: &Lines<'_>,
    keys: &'static [&'static str],
    diagnostics: &mut Diagnostics,
    mut each: impl FnMut(usize, &str, Option<TopLevel>),
) {
    lines.each_line(|line_idx, line| {
        let line = line.trim();
        if line.is_empty() {
            return true;
        }
        let scanned = match scan_line(line, keys) {
            Ok(Scan::Object(top)) => Some(top),
            Ok(Scan::NotObject) => {
                diagnostics.push(not_an_object(line_idx));
                None
            }
            Err(err) => {
                diagnostics.push(malformed(line_idx, &err));
                None
            }
        };
        each(line_idx, line, scanned);
        true
    });
}

/// Parses one JSONL line (0-based `line_idx`): `None` when it is blank,
/// else the object, or the trimmed text of a line that is not a JSON
/// object after a diagnostic naming it. For importers that note things
/// about the lines themselves, so all notes come in line order.
pub(crate) fn jsonl_line<'a>(
    line_idx: usize,
    line: &'a str,
    diagnostics: &mut Diagnostics,
) -> Option<Result<Map<String, Value>, &'a str>> {
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    Some(match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(obj)) => Ok(obj),
        Ok(_) => {
            diagnostics.push(not_an_object(line_idx));
            Err(line)
        }
        Err(err) => {
            diagnostics.push(malformed(line_idx, &err));
            Err(line)
        }
    })
}

/// The diagnostic of a JSONL line (0-based) that is JSON but no object.
fn not_an_object(line_idx: usize) -> String {
    format!("line {}: skipped: not a JSON object", line_idx + 1)
}

/// The diagnostic of a JSONL line (0-based) that is not JSON.
fn malformed(line_idx: usize, err: &serde_json::Error) -> String {
    format!("line {}: skipped malformed JSON: {err}", line_idx + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_document_cut_short_says_where_it_ends() {
        assert_eq!(
            parse_document(r#"{"history":[{"role":"#),
            Err("the JSON document ends early at byte 20 (truncated?): re-copy it".into())
        );
        assert_eq!(
            parse_document("[1]"),
            Err("the file is not a JSON object".into())
        );
        assert!(
            parse_document(r#"{"a":}"#).is_err_and(|err| err.starts_with("invalid JSON: ")),
            "a syntax error is not a truncation"
        );
        assert_eq!(parse_document(r#"{"a":1}"#).map(|doc| doc.len()), Ok(1));
    }

    #[test]
    fn timestamps_normalise() {
        assert_eq!(
            timestamp_of(&json!("2025-11-20T23:33:50.805Z")).as_deref(),
            Some("2025-11-20T23:33:50.805Z")
        );
        assert_eq!(
            timestamp_of(&json!("2025-04-30T16:32:54.707474")).as_deref(),
            Some("2025-04-30T16:32:54.707474Z")
        );
        assert_eq!(
            timestamp_of(&json!("2025-04-30T18:00:00+02:00")).as_deref(),
            Some("2025-04-30T16:00:00Z")
        );
        assert_eq!(
            timestamp_of(&json!(1763681581544_i64)).as_deref(),
            Some("2025-11-20T23:33:01.544Z")
        );
        assert_eq!(timestamp_of(&json!("yesterday")), None);
        assert_eq!(timestamp_of(&json!(f64::MAX)), None);
        assert_eq!(timestamp_of(&json!(null)), None);
    }

    #[test]
    fn ids_are_ordered_and_deterministic() {
        let ctx = Context {
            source: PathBuf::from("/x/a.jsonl"),
            fallback_ms: 1_000,
        };
        let build = || {
            let mut b = SessionBuilder::new(Format::PiV1, &ctx, 0);
            b.push_message(Message::user("a"), Some("2025-01-01T00:00:00Z".into()));
            b.push_message(Message::user("b"), Some("2025-01-01T00:00:00Z".into()));
            b.push_message(Message::user("c"), Some("2024-01-01T00:00:00Z".into()));
            b.push_message(Message::user("d"), None);
            b.finish()
        };
        let first = build();
        let second = build();
        assert_eq!(first.entries, second.entries);
        let ids: Vec<&str> = first.entries.iter().map(|e| e.id.as_str()).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
        assert!(ids.iter().all(|id| EntryId::parse(id).is_ok()));
        assert_eq!(
            first.entries[1].parent_id.as_ref(),
            Some(&first.entries[0].id)
        );
        // Source timestamps are kept even when out of order; undated entries
        // get a time just after the previous one.
        assert_eq!(first.entries[2].timestamp, "2024-01-01T00:00:00Z");
        assert_eq!(first.entries[3].timestamp, "2025-01-01T00:00:00.003Z");
    }

    #[test]
    fn counts_accept_floats_and_strings_only_when_sane() {
        assert_eq!(count_of(&json!(3)), Some(3));
        assert_eq!(count_of(&json!(3.7)), Some(3));
        assert_eq!(count_of(&json!(-1)), None);
        assert_eq!(count_of(&json!("42")), Some(42));
        assert_eq!(count_of(&json!([1])), None);
    }

    fn call(id: &str) -> Block {
        Block::ToolUse(soba_core::ToolUse {
            id: id.to_owned(),
            name: "bash".to_owned(),
            input: soba_core::ToolInput::empty(),
        })
    }

    fn roles_and_origins(session: &ImportedSession) -> Vec<(Role, MessageOrigin)> {
        session
            .entries
            .iter()
            .filter_map(message_of)
            .map(|m| (m.role, m.origin))
            .collect()
    }

    #[test]
    fn duplicate_call_ids_are_reported_and_never_merged() {
        let ctx = Context {
            source: PathBuf::from("/x/a.jsonl"),
            fallback_ms: 1_000,
        };
        let mut b = SessionBuilder::new(Format::PiV1, &ctx, 0);
        b.push_message(Message::user("go"), None);
        b.push_message(
            Message::new(Role::Assistant, vec![call("dup"), call("dup")]),
            None,
        );
        b.push_message(Message::tool_result("dup", "first", false), None);
        b.push_message(Message::tool_result("dup", "second", false), None);
        b.push_message(Message::new(Role::Assistant, vec![call("dup")]), None);
        b.push_message(Message::tool_result("dup", "third", false), None);
        let session = b.finish();
        assert_eq!(
            session.stats.diagnostics,
            [
                "entry 1: call id \"dup\" is used by two calls in one message; only one result can pair with them, the model sees the first call, and a second result is kept as an observation",
                "entry 2: the tool result for call \"dup\" pairs with the call at entry 1 (the latest call of that id)",
                "entry 3: a second tool result for call \"dup\", already answered by the result at entry 2; kept as an observation message (not a tool result) so the session stays valid",
                "entry 4: call id \"dup\" was already used by the call at entry 1; results after entry 4 pair with this call",
                "entry 5: the tool result for call \"dup\" pairs with the call at entry 4 (the latest call of that id)",
            ]
        );
        // Nothing is lost: the repeated result is an observation that
        // names the result it repeats and keeps its text.
        assert_eq!(
            roles_and_origins(&session)[3],
            (Role::User, MessageOrigin::Observation)
        );
        let repeated = message_of(&session.entries[3]).unwrap();
        assert_eq!(
            repeated.content,
            vec![
                Block::Text(
                    "[tool result for call \"dup\", which the result at entry 2 already answers]"
                        .into()
                ),
                Block::Text("second".into()),
            ]
        );
        assert_eq!(roles_and_origins(&session)[5].0, Role::Tool);
    }

    #[test]
    fn implausible_usage_figures_are_rejected() {
        let mut diagnostics = Diagnostics::default();
        let usage = json!({"input_tokens": 1, "output_tokens": 18446744073709551615u64});
        let figures = usage_figures(
            usage.as_object().unwrap(),
            ["input_tokens", "output_tokens"],
            "line 2",
            &mut diagnostics,
        );
        assert_eq!(figures, None);
        assert_eq!(
            *diagnostics,
            [
                "line 2: usage field `output_tokens` is 18446744073709551615 (implausible: more than 10^12 tokens for one request); this usage is not recorded and is kept out of calibration"
            ]
        );
        let mut diagnostics = Diagnostics::default();
        let usage = json!({"input_tokens": MAX_PLAUSIBLE_TOKENS, "output_tokens": "1000000000001"});
        let figures = usage_figures(
            usage.as_object().unwrap(),
            ["input_tokens", "output_tokens"],
            "line 3",
            &mut diagnostics,
        );
        assert_eq!(figures, None);
        assert_eq!(diagnostics.len(), 1);
        assert!(
            diagnostics[0].starts_with(
                "line 3: usage field `output_tokens` is \"1000000000001\" (implausible"
            )
        );
    }

    #[test]
    fn null_and_missing_content_are_reported() {
        let mut diagnostics = Diagnostics::default();
        assert_eq!(
            odd_content(&Value::Null, "line 2", "message.content", &mut diagnostics),
            None
        );
        assert_eq!(
            content_text(&json!([null, "a"]), "line 3", "content", &mut diagnostics),
            "a"
        );
        let message = json!({"role": "user"});
        let content = content_field(
            message.as_object().unwrap(),
            "content",
            "line 4",
            "message.content",
            &mut diagnostics,
        );
        assert_eq!(
            content_text(content, "line 4", "message.content", &mut diagnostics),
            ""
        );
        assert_eq!(
            *diagnostics,
            [
                "line 2: `message.content` is null, not text or a list of content blocks; kept as empty content",
                "line 3: `content[0]` is null, not text or a list of content blocks; kept as empty content",
                "line 4: the message has no `message.content`; kept as empty content",
            ]
        );
    }
}
