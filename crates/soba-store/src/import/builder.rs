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

mod field;
mod pairing;

// The field helpers live in `field`; the importers name them here.
pub(crate) use field::MAX_PLAUSIBLE_TOKENS;
pub(crate) use field::{
    array_field, content_field, content_text, count_field, for_each_jsonl_object,
    for_each_jsonl_scan, format_ms, image_from_url, is_interrupt_marker, jsonl_line, message_with,
    obj_field, odd_content, parse_document, str_field, text_of, timestamp_field, timestamp_ms,
    timestamp_of, token_figure, tool_message, usage_figures,
};
use pairing::message_of;

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

    /// Appends a `checkpoint` entry (a SOBA log read for replay).
    pub fn push_checkpoint(
        &mut self,
        kind: soba_core::CheckpointKind,
        note: String,
        timestamp: Option<String>,
    ) -> usize {
        self.push(
            IdKind::Entry,
            timestamp,
            EntryBody::Checkpoint { kind, note },
        )
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
            .map(Usage::prompt)
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
            total.add(usage);
            let prompt = usage.prompt();
            peak = Some(peak.map_or(prompt, |p| p.max(prompt)));
        }
        stats.usage = self.usage_override.unwrap_or(total);
        stats.peak_prompt_tokens = self.peak_override.or(peak);
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::field::{MAX_PLAUSIBLE_TOKENS, count_of};
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
