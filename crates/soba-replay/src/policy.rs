//! The replayed policies (SPEC §15.2): `none`, and the peers `claude-code`,
//! `codex`, `pi`, `opencode` and `goose` with their triggers, check points
//! and retention, each summarizing with the same deterministic capsule so
//! the comparison isolates policy. `soba` lives in `super::soba`.
//!
//! Check points where the table is silent follow each agent: Claude Code,
//! Codex and OpenCode check before every request (mid-turn too), pi when a
//! turn ends, goose when a user message arrives. Every peer answers a
//! request over the window by compacting and resending once (§15.1).

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use soba_core::capsule::{Capsule, Trigger};
use soba_core::facts::truncate_middle_tokens;
use soba_core::tokens::{MESSAGE_OVERHEAD, TokenCount};
use soba_core::{Block, Entry, EntryBody, EntryId, Message, ResultPart};

use super::probe::{Item, ItemKind, message_text};
use super::run::{Ctx, Message0, Recorder, Runner};

/// The policies `soba replay` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyKind {
    /// Never compacts.
    None,
    /// SOBA itself.
    Soba,
    /// Claude Code's auto-compact.
    ClaudeCode,
    /// Codex CLI's auto-compact.
    Codex,
    /// pi's compaction.
    Pi,
    /// OpenCode's prune and compaction.
    OpenCode,
    /// goose's auto-compact.
    Goose,
}

impl PolicyKind {
    /// Every policy, in report order.
    pub const ALL: [PolicyKind; 7] = [
        PolicyKind::None,
        PolicyKind::Soba,
        PolicyKind::ClaudeCode,
        PolicyKind::Codex,
        PolicyKind::Pi,
        PolicyKind::OpenCode,
        PolicyKind::Goose,
    ];

    /// Returns the policy's name.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::None => "none",
            PolicyKind::Soba => "soba",
            PolicyKind::ClaudeCode => "claude-code",
            PolicyKind::Codex => "codex",
            PolicyKind::Pi => "pi",
            PolicyKind::OpenCode => "opencode",
            PolicyKind::Goose => "goose",
        }
    }

    /// Returns whether this is one of the five peers.
    pub fn is_peer(self) -> bool {
        !matches!(self, PolicyKind::None | PolicyKind::Soba)
    }

    fn parse(name: &str) -> Option<Self> {
        PolicyKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == name.trim().to_ascii_lowercase())
    }
}

/// A policy to replay: a kind and, for a peer, an optional trigger of N
/// input tokens replacing its own (`<peer>@N`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PolicySpec {
    /// Which policy.
    pub kind: PolicyKind,
    /// `--peer-trigger N` for a peer.
    pub trigger: Option<u64>,
}

impl PolicySpec {
    /// Returns the policy with its own trigger.
    pub fn new(kind: PolicyKind) -> Self {
        PolicySpec {
            kind,
            trigger: None,
        }
    }

    /// Parses `none`, `soba`, a peer name or `<peer>@N`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let (name, trigger) = match text.split_once('@') {
            Some((name, n)) => {
                let n = n
                    .trim()
                    .replace(['_', ','], "")
                    .parse::<u64>()
                    .map_err(|_| {
                        format!("policy {text}: the trigger after @ must be a number of tokens")
                    })?;
                (name, Some(n))
            }
            None => (text, None),
        };
        let kind = PolicyKind::parse(name).ok_or_else(|| {
            format!(
                "unknown policy {text}: use none, soba, claude-code, codex, pi, opencode, goose or <peer>@N"
            )
        })?;
        if trigger.is_some() && !kind.is_peer() {
            return Err(format!(
                "policy {text}: only peers (claude-code, codex, pi, opencode, goose) take @N"
            ));
        }
        Ok(PolicySpec { kind, trigger })
    }

    /// Returns the threshold in input tokens for a peer on a model with
    /// this window and maximum output (SPEC §15.2).
    pub fn threshold(&self, window: u64, max_output: u64) -> u64 {
        if let Some(n) = self.trigger {
            return n;
        }
        match self.kind {
            PolicyKind::ClaudeCode => window
                .saturating_sub(max_output.min(20_000))
                .saturating_sub(13_000),
            PolicyKind::Codex => window * 9 / 10,
            PolicyKind::Pi => window.saturating_sub(16_384),
            PolicyKind::OpenCode => window.saturating_sub(max_output.min(20_000)),
            PolicyKind::Goose => window * 8 / 10,
            PolicyKind::None | PolicyKind::Soba => u64::MAX,
        }
    }

    /// Returns whether `tokens` fire the trigger: Claude Code and Codex
    /// compact at the threshold, pi, OpenCode and goose above it.
    pub fn fires(&self, tokens: u64, threshold: u64) -> bool {
        match self.kind {
            PolicyKind::ClaudeCode | PolicyKind::Codex => tokens >= threshold,
            _ => tokens > threshold,
        }
    }
}

impl fmt::Display for PolicySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.trigger {
            Some(n) => write!(f, "{}@{n}", self.kind.as_str()),
            None => f.write_str(self.kind.as_str()),
        }
    }
}

/// Claude Code re-attaches at most this many recent file reads.
pub const CLAUDE_CODE_FILES: usize = 5;
/// … each at most this many tokens.
pub const CLAUDE_CODE_FILE_TOKENS: u64 = 5_000;
/// Codex keeps user messages up to this many tokens, newest first.
pub const CODEX_USER_TOKENS: u64 = 20_000;
/// pi keeps a tail of this many tokens.
pub const PI_TAIL_TOKENS: u64 = 20_000;
/// OpenCode never prunes the newest this-many tokens of tool output.
pub const OPENCODE_PRUNE_PROTECT: u64 = 40_000;
/// OpenCode prunes only when it clears more than this.
pub const OPENCODE_PRUNE_MINIMUM: u64 = 20_000;
/// What OpenCode leaves of a pruned tool output.
pub const OPENCODE_PRUNED: &str = "[Old tool result content cleared]";
/// Keys of OpenCode's pruned tool results.
const PRUNED_KEY: u64 = 1 << 61;

/// The `none` policy: the full history, every request as recorded.
pub(crate) struct NoneRunner {
    items: Vec<Item>,
    recorder: Recorder,
}

impl NoneRunner {
    /// Returns the runner for a trace of `steps` requests.
    pub fn new(steps: usize) -> Self {
        NoneRunner {
            items: Vec::new(),
            recorder: Recorder::new("none", steps),
        }
    }
}

impl Runner for NoneRunner {
    fn append(&mut self, ctx: &Ctx<'_>, idx: usize) {
        self.items
            .push(Item::entry(idx, ctx.trace.entry_tokens[idx]));
    }

    fn preflight(&mut self, ctx: &Ctx<'_>, step: usize, message0: Message0) {
        self.recorder.send(ctx, step, message0, &self.items, true);
    }

    fn items(&self) -> &[Item] {
        &self.items
    }

    fn recorder(&mut self) -> &mut Recorder {
        &mut self.recorder
    }
}

/// One of the five peers.
pub(crate) struct PeerRunner {
    spec: PolicySpec,
    threshold: u64,
    items: Vec<Item>,
    previous: Option<Capsule>,
    recorder: Recorder,
}

impl PeerRunner {
    /// Returns the runner of a peer on a trace.
    pub fn new(spec: PolicySpec, window: u64, max_output: u64, steps: usize) -> Self {
        PeerRunner {
            spec,
            threshold: spec.threshold(window, max_output),
            items: Vec::new(),
            previous: None,
            recorder: Recorder::new(&spec.to_string(), steps),
        }
    }

    fn size(&self, ctx: &Ctx<'_>, step: usize, message0: Message0) -> u64 {
        Recorder::size(ctx, step, message0, &self.items)
    }

    /// Checks the trigger and compacts when it fires.
    fn check(&mut self, ctx: &Ctx<'_>, step: usize, message0: Message0) {
        let tokens = self.size(ctx, step, message0);
        if self.spec.fires(tokens, self.threshold) {
            self.compact(ctx, step, Trigger::AutoThreshold);
        }
    }

    /// Returns the index where each item's unit starts (a tool result joins
    /// the assistant message before it).
    fn unit_starts(&self, ctx: &Ctx<'_>) -> Vec<usize> {
        let mut starts = Vec::new();
        for (idx, item) in self.items.iter().enumerate() {
            let joins = item.source.is_some_and(|source| ctx.is_result[source]) && idx > 0;
            if !joins {
                starts.push(idx);
            }
        }
        starts
    }

    /// Returns the first item of a tail of whole units, newest first, that
    /// stays within `budget` calibrated tokens.
    fn unit_tail(&self, ctx: &Ctx<'_>, step: usize, budget: u64) -> usize {
        let starts = self.unit_starts(ctx);
        let mut first = self.items.len();
        let mut total = 0u64;
        for &start in starts.iter().rev() {
            let unit: u64 = self.items[start..first]
                .iter()
                .map(|item| item.tokens)
                .sum();
            let unit = ctx.scaled(step, unit);
            if total + unit > budget {
                break;
            }
            total += unit;
            first = start;
        }
        first
    }

    /// pi's cut (SPEC §15.2): walking back from the newest message until the
    /// tail holds 20,000 tokens, then forward to the nearest message that is
    /// not a tool result. `None` when the whole history fits the tail.
    fn pi_cut(&self, ctx: &Ctx<'_>, step: usize) -> Option<usize> {
        let mut total = 0u64;
        let mut reached = None;
        for (idx, item) in self.items.iter().enumerate().rev() {
            total += ctx.scaled(step, item.tokens);
            if total >= PI_TAIL_TOKENS {
                reached = Some(idx);
                break;
            }
        }
        let reached = reached?;
        let cut = (reached..self.items.len())
            .find(|&idx| {
                !self.items[idx]
                    .source
                    .is_some_and(|source| ctx.is_result[source])
            })
            .unwrap_or(self.items.len());
        Some(cut)
    }

    /// OpenCode's prune: tool outputs older than the newest 40,000 tokens of
    /// tool output are cleared when that clears more than 20,000.
    fn prune(&mut self, ctx: &Ctx<'_>, step: usize) -> bool {
        let mut seen = 0u64;
        let mut candidates: Vec<usize> = Vec::new();
        let mut cleared = 0u64;
        for idx in (0..self.items.len()).rev() {
            let item = &self.items[idx];
            if item.key & PRUNED_KEY != 0 && item.key & super::run::TEXT_KEY == 0 {
                break;
            }
            let Some(source) = item.source.filter(|&source| ctx.is_result[source]) else {
                continue;
            };
            if !item.is_verbatim() {
                continue;
            }
            let tokens = ctx.scaled(step, item.tokens);
            seen += tokens;
            if seen > OPENCODE_PRUNE_PROTECT {
                candidates.push(idx);
                cleared += tokens;
            }
            let _ = source;
        }
        if cleared <= OPENCODE_PRUNE_MINIMUM {
            return false;
        }
        for idx in candidates {
            let Some(source) = self.items[idx].source else {
                continue;
            };
            let EntryBody::Message(entry) = &ctx.trace.entries[source].body else {
                continue;
            };
            let content: Vec<Block> = entry
                .message
                .content
                .iter()
                .map(|block| match block {
                    Block::ToolResult(result) => {
                        let mut pruned = result.clone();
                        pruned.content = vec![ResultPart::Text(OPENCODE_PRUNED.to_owned())];
                        Block::ToolResult(pruned)
                    }
                    other => other.clone(),
                })
                .collect();
            let message = Message::new(entry.message.role, content);
            let tokens =
                soba_core::tokens::count_message(ctx.counter(), &message, ctx.config.image_tokens)
                    .n
                    .get();
            let text = Arc::new(ctx.index.text_item(&message_text(&message)));
            self.items[idx] = Item::text(PRUNED_KEY | source as u64, tokens, text, Some(source));
        }
        self.recorder.hygiene();
        true
    }

    /// Compacts: summarizes the span with the deterministic capsule and
    /// keeps what this peer keeps.
    fn compact(&mut self, ctx: &Ctx<'_>, step: usize, trigger: Trigger) {
        if self.spec.kind == PolicyKind::OpenCode {
            self.prune(ctx, step);
        }
        let n = self.items.len();
        // (span end, kept items after the summary, items before it)
        let (span_end, before, after): (usize, Vec<Item>, Vec<Item>) = match self.spec.kind {
            PolicyKind::ClaudeCode => (n, Vec::new(), self.file_reads(ctx, step)),
            PolicyKind::Codex => (n, self.codex_user_messages(ctx, step), Vec::new()),
            PolicyKind::Pi => match self.pi_cut(ctx, step) {
                Some(cut) => (cut, Vec::new(), self.items[cut..].to_vec()),
                None => return,
            },
            PolicyKind::OpenCode => {
                let usable = ctx
                    .trace
                    .window
                    .saturating_sub(ctx.trace.max_output)
                    .saturating_sub(ctx.trace.max_output.min(20_000));
                let budget = (usable / 4).clamp(2_000, 15_000);
                let cut = self.unit_tail(ctx, step, budget);
                (cut, Vec::new(), self.items[cut..].to_vec())
            }
            PolicyKind::Goose => {
                let last_user = self
                    .items
                    .iter()
                    .rposition(|item| item.source.is_some_and(|source| ctx.is_real_user[source]));
                (
                    n,
                    Vec::new(),
                    last_user
                        .map(|idx| self.items[idx].clone())
                        .into_iter()
                        .collect(),
                )
            }
            PolicyKind::None | PolicyKind::Soba => return,
        };
        let span_items = &self.items[..span_end];
        if !span_items.iter().any(|item| item.source.is_some()) {
            return; // nothing new to summarize
        }
        let span: Vec<Entry> = span_items
            .iter()
            .filter_map(|item| item.source)
            .map(|source| ctx.trace.entries[source].clone())
            .collect();
        let retained: HashSet<EntryId> = before
            .iter()
            .chain(&after)
            .filter(|item| item.is_verbatim())
            .filter_map(|item| item.source)
            .map(|source| ctx.trace.entries[source].id.clone())
            .collect();
        let previous = self.previous.take();
        let (capsule, rendered) =
            ctx.deterministic_capsule(&span, previous.as_ref(), &retained, trigger);
        let input = ctx.summarizer_input(&span, previous.as_ref());
        let output = ctx.narrative_tokens(&capsule);
        self.recorder.summarizer(ctx, input, output);
        self.recorder.compaction(step);
        let (text, tokens) = ctx.text_item(&rendered);
        let summary = Item::text(ctx.fresh_key(), tokens, text, None);
        let mut items = before;
        items.push(summary);
        items.extend(after);
        self.items = items;
        self.previous = Some(capsule);
    }

    /// Claude Code: the newest reads of up to 5 distinct files, each cut to
    /// 5,000 tokens, from the whole history so far.
    fn file_reads(&self, ctx: &Ctx<'_>, step: usize) -> Vec<Item> {
        let before = ctx.trace.steps[step].response.start;
        let mut seen: Vec<&str> = Vec::new();
        let mut out = Vec::new();
        for read in ctx.reads.iter().rev().filter(|read| read.entry < before) {
            if seen.contains(&read.path.as_str()) {
                continue;
            }
            seen.push(&read.path);
            let text = truncate_middle_tokens(
                &read.text,
                TokenCount::new(CLAUDE_CODE_FILE_TOKENS),
                ctx.counter(),
            );
            let attachment = format!("Called the Read tool for {}:\n{text}", read.path);
            let (text, tokens) = ctx.text_item(&attachment);
            out.push(Item::text(ctx.fresh_key(), tokens, text, None).with_kind(ItemKind::File));
            if out.len() == CLAUDE_CODE_FILES {
                break;
            }
        }
        out.reverse();
        out
    }

    /// Codex: real user messages, newest first, within 20,000 tokens (the
    /// one that straddles cut to what remains), in their original order.
    fn codex_user_messages(&self, ctx: &Ctx<'_>, step: usize) -> Vec<Item> {
        let mut remaining = CODEX_USER_TOKENS;
        let mut kept: Vec<Item> = Vec::new();
        for item in self.items.iter().rev() {
            let Some(source) = item.source.filter(|&source| ctx.is_real_user[source]) else {
                continue;
            };
            if remaining == 0 {
                break;
            }
            let tokens = ctx.scaled(step, item.tokens);
            if tokens <= remaining {
                remaining -= tokens;
                kept.push(item.clone());
                continue;
            }
            let EntryBody::Message(entry) = &ctx.trace.entries[source].body else {
                continue;
            };
            let factor = ctx.trace.step_calibration(step).factor;
            let local_room = (remaining as f64 / factor).floor() as u64;
            let cut = truncate_middle_tokens(
                &entry.message.text(),
                TokenCount::new(local_room.saturating_sub(MESSAGE_OVERHEAD.get())),
                ctx.counter(),
            );
            let (text, tokens) = ctx.text_item(&cut);
            kept.push(
                Item::text(ctx.fresh_key(), tokens, text, Some(source))
                    .with_kind(ItemKind::Truncated),
            );
            break;
        }
        kept.reverse();
        kept
    }
}

impl Runner for PeerRunner {
    fn turn_end(&mut self, ctx: &Ctx<'_>, step: usize, message0: Message0) {
        match self.spec.kind {
            PolicyKind::Pi => self.check(ctx, step, message0),
            PolicyKind::OpenCode => {
                self.prune(ctx, step);
            }
            _ => {}
        }
    }

    fn append(&mut self, ctx: &Ctx<'_>, idx: usize) {
        self.items
            .push(Item::entry(idx, ctx.trace.entry_tokens[idx]));
    }

    fn preflight(&mut self, ctx: &Ctx<'_>, step: usize, message0: Message0) {
        let checks_now = match self.spec.kind {
            PolicyKind::ClaudeCode | PolicyKind::Codex | PolicyKind::OpenCode => true,
            PolicyKind::Goose => ctx.trace.steps[step].starts_turn,
            PolicyKind::Pi | PolicyKind::None | PolicyKind::Soba => false,
        };
        if checks_now {
            self.check(ctx, step, message0);
        }
        let sent = self.recorder.send(ctx, step, message0, &self.items, true);
        if sent > ctx.trace.window {
            // Over the window: compact and resend once (SPEC §15.1).
            self.compact(ctx, step, Trigger::ContextOverflow);
            self.recorder.stats.resends += 1;
            self.recorder.send(ctx, step, message0, &self.items, false);
        }
    }

    fn items(&self) -> &[Item] {
        &self.items
    }

    fn recorder(&mut self) -> &mut Recorder {
        &mut self.recorder
    }
}

#[cfg(test)]
mod tests {
    use soba_core::config::CompactionConfig;

    use super::super::probe::ItemContent;
    use super::super::testing::{Script, first_step_at, none_sizes, with_run};
    use super::*;

    fn spec(text: &str) -> PolicySpec {
        PolicySpec::parse(text).unwrap()
    }

    /// Returns the text of a text item.
    fn item_text(item: &Item) -> &str {
        match &item.content {
            ItemContent::Text(text) => &text.text,
            ItemContent::Entry(_) => "",
        }
    }

    #[test]
    fn policy_names_parse_and_print() {
        assert_eq!(spec("goose@80000").to_string(), "goose@80000");
        assert_eq!(spec("claude-code").kind, PolicyKind::ClaudeCode);
        assert_eq!(spec("codex@80_000").trigger, Some(80_000));
        assert!(PolicySpec::parse("soba@1000").is_err());
        assert!(PolicySpec::parse("gemini").is_err());
        assert!(PolicySpec::parse("pi@many").is_err());
    }

    #[test]
    fn thresholds_follow_the_table() {
        let (window, max_output) = (200_000, 32_000);
        let threshold = |text: &str| spec(text).threshold(window, max_output);
        assert_eq!(threshold("claude-code"), 167_000);
        assert_eq!(threshold("codex"), 180_000);
        assert_eq!(threshold("pi"), 183_616);
        assert_eq!(threshold("opencode"), 180_000);
        assert_eq!(threshold("goose"), 160_000);
        assert_eq!(threshold("goose@80000"), 80_000);
        // Claude Code reserves min(maxOutput, 20,000) for the output.
        assert_eq!(spec("claude-code").threshold(200_000, 8_000), 179_000);
        assert!(spec("codex").fires(180_000, 180_000));
        assert!(!spec("pi").fires(183_616, 183_616));
    }

    /// One turn of `reads` tool steps of `tokens` each, over 8 files.
    fn long_turn(script: &mut Script, reads: usize, tokens: u64) {
        script.user("task", 1_000);
        for i in 0..reads {
            script.read(&format!("src/f{}.rs", i % 8), tokens);
        }
        script.answer("done");
    }

    #[test]
    fn claude_code_compacts_before_any_request_and_reattaches_five_reads() {
        let mut script = Script::new();
        long_turn(&mut script, 40, 2_000);
        let trace = script.trace(100_000, 10_000);
        let threshold = 100_000 - 10_000 - 13_000;
        let at = first_step_at(&trace, threshold).unwrap();
        assert!(!trace.steps[at].starts_turn, "the check runs mid-turn");
        with_run(
            &trace,
            &[spec("claude-code")],
            &CompactionConfig::default(),
            |_, runners, out| {
                let recorder = &out.recorders[0];
                assert_eq!(recorder.series.compactions, vec![at]);
                assert_eq!(recorder.stats.compactions, 1);
                assert_eq!(recorder.stats.summarizer_calls, 1);
                assert_eq!(recorder.stats.requests, trace.steps.len() as u64);
                let items = runners[0].items();
                assert_eq!(items[0].source, None, "the summary comes first");
                // The five newest distinct files read before the request, oldest
                // first: reads at..at-5 were of f{(i) % 8}.
                for (slot, read) in (at - 5..at).enumerate() {
                    let attachment = &items[1 + slot];
                    assert_eq!(attachment.source, None);
                    assert!(
                        item_text(attachment).contains(&format!("src/f{}.rs", read % 8)),
                        "slot {slot}"
                    );
                }
                assert!(
                    items[6].is_verbatim(),
                    "then the entries after the compaction"
                );
            },
        );
    }

    #[test]
    fn claude_code_cuts_reattached_files_to_5000_tokens() {
        let mut script = Script::new();
        script.user("task", 100);
        script.read("src/big.rs", 6_000);
        script.read("src/small.rs", 100);
        script.answer("read both");
        script.user("next", 100);
        script.answer("ok");
        let trace = script.trace(100_000, 10_000);
        with_run(
            &trace,
            &[spec("claude-code@5000")],
            &CompactionConfig::default(),
            |_, runners, out| {
                // Every request is over 5,000 from the big read on: Claude Code
                // compacts before each one.
                assert_eq!(out.recorders[0].series.compactions, vec![1, 2, 3]);
                let items = runners[0].items();
                let big = items
                    .iter()
                    .find(|item| item_text(item).contains("Called the Read tool for src/big.rs"))
                    .expect("big.rs re-attached");
                assert!(big.tokens <= 5_000 + 20, "{}", big.tokens);
                assert!(big.tokens > 4_900, "{}", big.tokens);
            },
        );
    }

    #[test]
    fn codex_keeps_user_messages_newest_first_within_20000_and_no_tail() {
        let mut script = Script::new();
        let mut users = Vec::new();
        for turn in 0..4 {
            users.push(script.user(&format!("u{turn}"), 5_000));
            script.read("src/a.rs", 6_000);
            script.read("src/b.rs", 6_000);
            script.answer("ok");
        }
        let trace = script.trace(70_000, 10_000);
        let at = first_step_at(&trace, 63_000).unwrap();
        assert_eq!(at, trace.steps.len() - 1, "the last request, mid-turn");
        assert!(!trace.steps[at].starts_turn);
        with_run(
            &trace,
            &[spec("codex")],
            &CompactionConfig::default(),
            |_, runners, out| {
                assert_eq!(out.recorders[0].series.compactions, vec![at]);
                let items = runners[0].items();
                // u0 cut to what remains of 20,000 after u3, u2, u1 (5,004 each).
                assert_eq!(items[0].source, Some(users[0]));
                assert!(!items[0].is_verbatim());
                assert!(items[0].tokens <= 20_000 - 3 * 5_004, "{}", items[0].tokens);
                assert!(items[0].tokens > 4_900, "{}", items[0].tokens);
                for (slot, user) in users[1..].iter().enumerate() {
                    assert_eq!(items[1 + slot].source, Some(*user));
                    assert!(items[1 + slot].is_verbatim());
                }
                assert_eq!(
                    items[4].source, None,
                    "the summary follows the user messages"
                );
                // No tail: only the recorded answer was appended after.
                assert_eq!(items.len(), 6);
            },
        );
    }

    #[test]
    fn pi_checks_only_when_a_turn_ends_and_keeps_a_20000_tail_never_cut_at_a_result() {
        let mut script = Script::new();
        long_turn(&mut script, 20, 2_000);
        let second_user = script.user("next", 1_000);
        script.read("src/z.rs", 100);
        script.answer("ok");
        let trace = script.trace(200_000, 10_000);
        let sizes = none_sizes(&trace);
        assert!(sizes[19] > 30_000, "over the trigger mid-turn");
        with_run(
            &trace,
            &[spec("pi@30000")],
            &CompactionConfig::default(),
            |_, runners, out| {
                // Compacted once, at the first request of the second turn.
                assert_eq!(out.recorders[0].series.compactions, vec![21]);
                let items = runners[0].items();
                assert_eq!(items[0].source, None);
                // Walking back 20,000 tokens stops at read 11's result; the cut
                // moves on to read 12's call (entry 23).
                assert_eq!(items[1].source, Some(23));
                let user_at = items
                    .iter()
                    .position(|item| item.source == Some(second_user))
                    .unwrap();
                let tail: u64 = items[1..user_at].iter().map(|item| item.tokens).sum();
                assert_eq!(tail, 5 + 9 * 2_014);
            },
        );
    }

    #[test]
    fn opencode_prunes_tool_output_beyond_the_newest_40000_tokens() {
        let mut script = Script::new();
        long_turn(&mut script, 40, 2_000);
        script.user("next", 100);
        script.answer("ok");
        let trace = script.trace(1_000_000, 10_000);
        with_run(
            &trace,
            &[spec("opencode@900000")],
            &CompactionConfig::default(),
            |_, runners, out| {
                let stats = &out.recorders[0].stats;
                assert_eq!(stats.hygiene_passes, 1);
                assert_eq!(stats.compactions, 0);
                let items = runners[0].items();
                let pruned: Vec<&Item> = items
                    .iter()
                    .filter(|item| item_text(item).contains(OPENCODE_PRUNED))
                    .collect();
                // 19 newest results (38,076 tokens) are protected; the 20th
                // crosses 40,000 and is pruned with the 20 older ones.
                assert_eq!(pruned.len(), 21);
                assert!(pruned.iter().all(|item| item.tokens == 4 + 9));
            },
        );
    }

    #[test]
    fn opencode_keeps_a_tail_of_whole_units_within_its_clamp() {
        let mut script = Script::new();
        long_turn(&mut script, 30, 2_000);
        let trace = script.trace(100_000, 10_000);
        let at = (0..trace.steps.len())
            .find(|&step| none_sizes(&trace)[step] > 40_000)
            .unwrap();
        with_run(
            &trace,
            &[spec("opencode@40000")],
            &CompactionConfig::default(),
            |_, _, out| {
                assert_eq!(out.recorders[0].series.compactions[0], at);
                // usable = 100,000 − 10,000 − 10,000: a quarter is 20,000,
                // clamped to 15,000, i.e. 7 whole units of 2,014 tokens; plus the
                // summary.
                // The summary is within the capsule bound, min(8,000, 10 % of
                // SOBA's autoLimit 65,446).
                let after = out.recorders[0].series.tokens[at].unwrap();
                assert!(after >= 4 + 7 * 2_014, "{after}");
                assert!(after <= 4 + 7 * 2_014 + 6_544 + 4, "{after}");
            },
        );
    }

    #[test]
    fn goose_checks_when_a_user_message_arrives_and_keeps_it() {
        let mut script = Script::new();
        long_turn(&mut script, 15, 2_000);
        let second_user = script.user("next", 500);
        script.read("src/z.rs", 100);
        script.answer("ok");
        let trace = script.trace(1_000_000, 10_000);
        with_run(
            &trace,
            &[spec("goose@20000")],
            &CompactionConfig::default(),
            |_, runners, out| {
                assert_eq!(out.recorders[0].series.compactions, vec![16]);
                let items = runners[0].items();
                assert_eq!(items[0].source, None);
                assert_eq!(items[1].source, Some(second_user));
                assert_eq!(items.len(), 5, "summary, user, call, result, answer");
            },
        );
    }

    #[test]
    fn none_never_compacts_and_counts_requests_over_the_window() {
        let mut script = Script::new();
        long_turn(&mut script, 20, 2_000);
        let trace = script.trace(30_000, 5_000);
        let over = none_sizes(&trace).iter().filter(|&&s| s > 30_000).count() as u64;
        assert!(over > 0);
        with_run(
            &trace,
            &[spec("none")],
            &CompactionConfig::default(),
            |_, _, out| {
                let stats = &out.recorders[0].stats;
                assert_eq!(stats.compactions, 0);
                assert_eq!(stats.over_window, over);
                assert_eq!(stats.requests, trace.steps.len() as u64);
                assert_eq!(stats.resends, 0);
            },
        );
    }

    #[test]
    fn a_peer_over_the_window_compacts_and_resends_once() {
        let mut script = Script::new();
        long_turn(&mut script, 16, 2_000);
        let trace = script.trace(30_000, 5_000);
        let over = none_sizes(&trace).iter().position(|&s| s > 30_000).unwrap();
        with_run(
            &trace,
            &[spec("pi")],
            &CompactionConfig::default(),
            |_, _, out| {
                let stats = &out.recorders[0].stats;
                assert_eq!(stats.over_window, 1);
                assert_eq!(stats.resends, 1);
                assert_eq!(stats.requests, trace.steps.len() as u64 + 1);
                assert_eq!(out.recorders[0].series.compactions, vec![over]);
                assert!(out.recorders[0].series.tokens[over].unwrap() <= 30_000);
            },
        );
    }
}
