//! The rewrites the model input applies to a message as it is pushed:
//! tool-output caps, the straddler cut, hygiene stubs, the pairing of
//! calls with results and the tracking of unresolved errors (SPEC §5, §8.1).

use super::*;

impl LiveInput {
    /// Consumes a non-`system` message: sweeps unpaired tool blocks, caps
    /// large results, applies the boundary truncation, and opens a tool
    /// batch for an assistant message's calls.
    pub(super) fn push_message(
        &mut self,
        entry: &Entry,
        path_idx: usize,
        logged: Cow<'_, MessageEntry>,
        cut: Option<&BoundaryTruncation>,
    ) {
        let message = &logged.message;
        let is_assistant = message.role == Role::Assistant;
        let has_results = message
            .content
            .iter()
            .any(|block| matches!(block, Block::ToolResult(_)));
        if is_assistant || !has_results {
            self.close_batch();
        }
        let mut outcomes = self.track(message).into_iter();
        // Each result's key and status, with its index among `results` when
        // the input carries it.
        let mut settled: Vec<(ErrorKey, Status, Option<usize>)> = Vec::new();
        let mut rewrites = Rewrites::default();
        let mut results = Vec::new();
        let mut seen_calls: Vec<&str> = Vec::new();
        let needs_sweep = has_results
            || message.content.iter().any(|block| match block {
                Block::ToolUse(call) if is_assistant => {
                    let duplicate = seen_calls.contains(&call.id.as_str());
                    seen_calls.push(&call.id);
                    duplicate
                }
                Block::ToolUse(_) => true,
                _ => false,
            });
        // The blocks the input keeps, by index (the sweep drops unpaired
        // ones); taken from an owned message, copied from a borrowed one.
        let mut kept: Vec<usize> = Vec::new();
        if needs_sweep {
            let mut calls: Vec<&str> = Vec::new();
            for (block_idx, block) in message.content.iter().enumerate() {
                match block {
                    Block::ToolResult(result) => {
                        let Some((key, status)) = outcomes.next() else {
                            continue;
                        };
                        let tool = if is_assistant {
                            None
                        } else {
                            self.answer(&result.tool_use_id)
                        };
                        match tool {
                            Some(tool) => {
                                settled.push((key.clone(), status, Some(results.len())));
                                results.push(ResultInfo {
                                    block: kept.len(),
                                    call_id: result.tool_use_id.clone(),
                                    tool,
                                    key,
                                    is_error: status == Status::Failure,
                                    status,
                                    stubbed: false,
                                });
                                kept.push(block_idx);
                            }
                            None => {
                                settled.push((key, status, None));
                                rewrites.swept = true;
                            }
                        }
                    }
                    Block::ToolUse(call) if is_assistant && !calls.contains(&call.id.as_str()) => {
                        calls.push(&call.id);
                        kept.push(block_idx);
                    }
                    Block::ToolUse(_) => rewrites.swept = true,
                    _ => kept.push(block_idx),
                }
            }
            if kept.is_empty() {
                // Nothing but unpaired tool blocks: the message is dropped.
                self.settle(settled, None);
                return;
            }
        }
        let stored = self.stored(&logged);
        self.count_sources.note(&logged, stored.is_some());
        let mut sent = match (logged, needs_sweep) {
            (Cow::Owned(owned), false) => owned.message,
            (Cow::Borrowed(borrowed), false) => borrowed.message.clone(),
            (Cow::Owned(owned), true) => {
                let MessageEntry { mut message, .. } = owned;
                let mut keep = kept.iter().copied().peekable();
                let content = std::mem::take(&mut message.content)
                    .into_iter()
                    .enumerate()
                    .filter_map(|(block_idx, block)| keep.next_if_eq(&block_idx).map(|_| block))
                    .collect();
                Message { content, ..message }
            }
            (Cow::Borrowed(borrowed), true) => {
                let content = kept
                    .iter()
                    .map(|&block_idx| borrowed.message.content[block_idx].clone())
                    .collect();
                with_content(&borrowed.message, content)
            }
        };
        let mut n_tokens = match stored {
            Some(stored) if !rewrites.swept => stored,
            _ => self.count(&sent),
        };
        let max = self.setup.config.max_tool_result_tokens;
        if !results.is_empty()
            && n_tokens.saturating_sub(MESSAGE_OVERHEAD) > max
            && self.cap_results(&mut sent, &results)
        {
            rewrites.capped = true;
            n_tokens = self.count(&sent);
        }
        let mut original = None;
        if let Some(cut) = cut
            && sent.is_text_only()
        {
            let text = sent.text();
            let marker = straddler_marker(cut.omitted_chars);
            let truncated = with_content(
                &sent,
                vec![Block::Text(cut_middle(
                    &text,
                    cut.head_chars,
                    cut.tail_chars,
                    &marker,
                ))],
            );
            original = Some(Box::new(std::mem::replace(&mut sent, truncated)));
            n_tokens = cut.kept_tokens;
            rewrites.truncated = true;
        }
        if is_assistant && sent.has_tool_uses() {
            self.open_batch(entry, path_idx, &sent);
        }
        self.settle(settled, Some(self.items.len()));
        self.push_item(Item {
            source: entry.id.clone(),
            path_idx,
            origin: InputOrigin::Entry,
            message: sent,
            original,
            tokens: n_tokens,
            rewrites,
            results,
        });
    }

    pub(super) fn open_batch(&mut self, entry: &Entry, path_idx: usize, message: &Message) {
        let mut calls = Vec::new();
        let mut pending = TokenCount::ZERO;
        for call in message.tool_uses() {
            let synthetic_message = Message::tool_result(call.id.clone(), INTERRUPTED_RESULT, true);
            let tokens = self.interrupted_tokens;
            pending += tokens;
            calls.push(PendingCall {
                id: call.id.clone(),
                answered: false,
                synthetic: Item {
                    source: entry.id.clone(),
                    path_idx,
                    origin: InputOrigin::SyntheticResult,
                    message: synthetic_message,
                    original: None,
                    tokens,
                    rewrites: Rewrites::default(),
                    results: vec![ResultInfo {
                        block: 0,
                        call_id: call.id.clone(),
                        tool: call.name.clone(),
                        key: ErrorKey::from_call(call, self.setup.cwd.as_deref()),
                        is_error: true,
                        status: Status::Failure,
                        stubbed: false,
                    }],
                },
            });
        }
        self.open = Some(OpenBatch { calls });
        self.pending_tokens = pending;
    }

    /// Marks the open batch's call `call_id` answered; returns its tool
    /// name, or `None` when no open call has that id.
    pub(super) fn answer(&mut self, call_id: &str) -> Option<String> {
        let open = self.open.as_mut()?;
        let call = open
            .calls
            .iter_mut()
            .find(|call| !call.answered && call.id == call_id)?;
        call.answered = true;
        self.pending_tokens = self.pending_tokens.saturating_sub(call.synthetic.tokens);
        call.synthetic.results.first().map(|info| info.tool.clone())
    }

    /// Feeds a logged message to the outcome tracker as the fact extractor
    /// reads it (its calls, then its results); returns each result's key
    /// and status, in block order.
    pub(super) fn track(&mut self, message: &Message) -> Vec<(ErrorKey, Status)> {
        for call in message.tool_uses() {
            self.outcomes.call(call);
        }
        message
            .tool_results()
            .map(|result| {
                let outcome = self.outcomes.result(result);
                (ErrorKey::from_outcome(&outcome), outcome.status)
            })
            .collect()
    }

    /// Tracks a message the input does not render as an item (a `system`
    /// message): its results settle nothing in the input but still count.
    pub(super) fn track_unrendered(&mut self, message: &Message) {
        let settled = self
            .track(message)
            .into_iter()
            .map(|(key, status)| (key, status, None))
            .collect();
        self.settle(settled, None);
    }

    /// Records settled results of one message, in order; those the input
    /// carries are at `item` (the message's index among the items).
    pub(super) fn settle(
        &mut self,
        settled: Vec<(ErrorKey, Status, Option<usize>)>,
        item: Option<usize>,
    ) {
        for (key, status, result) in settled {
            if status == Status::Pending {
                continue;
            }
            self.settled.push(Settled {
                key,
                failed: status == Status::Failure,
                at: item.zip(result),
            });
        }
    }

    /// Closes the open tool batch, giving every unanswered call its
    /// synthetic error result.
    pub(super) fn close_batch(&mut self) {
        if let Some(open) = self.open.take() {
            for call in open.calls.into_iter().filter(|call| !call.answered) {
                self.push_item(call.synthetic);
            }
        }
        self.pending_tokens = TokenCount::ZERO;
    }

    /// Middle-truncates every result of `message` above
    /// `maxToolResultTokens`; returns whether any was cut.
    pub(super) fn cap_results(&self, message: &mut Message, results: &[ResultInfo]) -> bool {
        let max = self.setup.config.max_tool_result_tokens;
        let image_tokens = self.setup.config.image_tokens;
        let counter = self.counter();
        let mut capped = false;
        for info in results {
            let Some(block) = message.content.get_mut(info.block) else {
                continue;
            };
            let n_tokens = tokens::count_block(counter, block, image_tokens).n;
            if n_tokens <= max {
                continue;
            }
            if let Block::ToolResult(result) = block {
                capped |= cap_result(counter, result, n_tokens, max, image_tokens);
            }
        }
        capped
    }

    /// Applies a `hygiene` entry: stubs every result at or before
    /// `pruned_through` (SPEC §8.1), judging unresolved errors as of the
    /// entry, so the stubs are exactly those its plan counted.
    pub(super) fn apply_hygiene(
        &mut self,
        path: &[Entry],
        hygiene_idx: usize,
        pruned_through: &EntryId,
        stubbed_calls: Option<&[String]>,
    ) {
        let Some(through_idx) = path[self.region_start..hygiene_idx]
            .iter()
            .rposition(|entry| &entry.id == pruned_through)
            .map(|offset| offset + self.region_start)
        else {
            return;
        };
        let candidates = match stubbed_calls {
            // The pass's own decision, whatever this rebuild can see.
            Some(calls) => self.recorded_stubs(through_idx, calls),
            None => self.stub_candidates(through_idx),
        };
        for candidate in candidates {
            self.apply_stub(&candidate);
        }
    }

    /// Returns the candidates among the results of `calls` at or before
    /// `through_idx`: those a pass recorded as stubbed.
    pub(super) fn recorded_stubs(
        &self,
        through_idx: usize,
        calls: &[String],
    ) -> Vec<StubCandidate> {
        let calls: HashSet<&str> = calls.iter().map(String::as_str).collect();
        self.candidates(through_idx, |_, _, info| {
            calls.contains(info.call_id.as_str())
        })
    }

    /// Returns the results at or before path index `through_idx` that a
    /// hygiene pass would stub now: not yet stubbed, not of a protected
    /// tool, not an unresolved error, and larger than their stub.
    pub(crate) fn stub_candidates(&self, through_idx: usize) -> Vec<StubCandidate> {
        let unresolved = self.unresolved_errors();
        let config = &self.setup.config;
        self.candidates(through_idx, |item_idx, result_idx, info| {
            !config.is_protected(&info.tool) && !unresolved.contains(&(item_idx, result_idx))
        })
    }

    /// Returns the results at or before `through_idx`, not yet stubbed,
    /// that `eligible` accepts and that are larger than their stub.
    pub(super) fn candidates(
        &self,
        through_idx: usize,
        eligible: impl Fn(usize, usize, &ResultInfo) -> bool,
    ) -> Vec<StubCandidate> {
        let counter = self.counter();
        let config = &self.setup.config;
        let mut candidates = Vec::new();
        for (item_idx, item) in self.items.iter().enumerate() {
            if item.path_idx > through_idx || item.origin != InputOrigin::Entry {
                continue;
            }
            for (result_idx, info) in item.results.iter().enumerate() {
                if info.stubbed || !eligible(item_idx, result_idx, info) {
                    continue;
                }
                let body_tokens = if item.message.content.len() == 1 {
                    item.tokens.saturating_sub(MESSAGE_OVERHEAD)
                } else {
                    match item.message.content.get(info.block) {
                        Some(block) => tokens::count_block(counter, block, config.image_tokens).n,
                        None => continue,
                    }
                };
                let stub = stub_text(&info.tool, body_tokens);
                let stub_tokens = counter.count_text(&stub).n;
                if stub_tokens >= body_tokens {
                    continue;
                }
                candidates.push(StubCandidate {
                    item: item_idx,
                    result: result_idx,
                    body_tokens,
                    stub,
                    stub_tokens,
                });
            }
        }
        candidates
    }

    /// Returns `(item, result)` of every failing result of the input not
    /// followed, on the rendered stretch, by a success with the same
    /// [`ErrorKey`] (a pending result is neither): the unresolved errors of
    /// SPEC §8.1, judged as the fact extractor judges them.
    pub(super) fn unresolved_errors(&self) -> HashSet<(usize, usize)> {
        let mut last_success: HashMap<&ErrorKey, usize> = HashMap::new();
        for (seq, settled) in self.settled.iter().enumerate() {
            if !settled.failed {
                last_success.insert(&settled.key, seq);
            }
        }
        self.settled
            .iter()
            .enumerate()
            .filter(|(seq, settled)| {
                settled.failed
                    && last_success
                        .get(&settled.key)
                        .is_none_or(|success| success < seq)
            })
            .filter_map(|(_, settled)| settled.at)
            .collect()
    }

    /// Returns the call ids of the input's unresolved errors, in input
    /// order: the failing results no hygiene pass stubs now (SPEC §8.1).
    pub fn unresolved_error_calls(&self) -> Vec<&str> {
        let unresolved = self.unresolved_errors();
        let mut calls = Vec::new();
        for (item_idx, item) in self.items.iter().enumerate() {
            for (result_idx, info) in item.results.iter().enumerate() {
                if unresolved.contains(&(item_idx, result_idx)) {
                    calls.push(info.call_id.as_str());
                }
            }
        }
        calls
    }

    pub(super) fn apply_stub(&mut self, candidate: &StubCandidate) {
        let Some(item) = self.items.get_mut(candidate.item) else {
            return;
        };
        let Some(info) = item.results.get_mut(candidate.result) else {
            return;
        };
        let Some(Block::ToolResult(result)) = item.message.content.get_mut(info.block) else {
            return;
        };
        result.content = vec![ResultPart::Text(candidate.stub.clone())];
        info.stubbed = true;
        item.rewrites.stubbed = true;
        let before = item.tokens;
        item.tokens = item.tokens.saturating_sub(candidate.body_tokens) + candidate.stub_tokens;
        self.items_tokens = self.items_tokens.saturating_sub(before) + item.tokens;
    }
}

/// Middle-truncates one result to `max` tokens, images kept (they cost a
/// flat amount); returns whether it was cut.
fn cap_result(
    counter: &dyn TokenCounter,
    result: &mut ToolResult,
    n_tokens: TokenCount,
    max: TokenCount,
    image_tokens: TokenCount,
) -> bool {
    let images: Vec<ResultPart> = result
        .content
        .iter()
        .filter(|part| matches!(part, ResultPart::Image(_)))
        .cloned()
        .collect();
    let image_cost = TokenCount::new(image_tokens.get().saturating_mul(images.len() as u64));
    let text = result.text();
    if text.is_empty() {
        return false;
    }
    let target = max.saturating_sub(image_cost);
    let marker = |omitted: u64| tool_cap_marker(omitted, max);
    let cut = fit_middle(
        counter,
        &text,
        n_tokens.saturating_sub(image_cost),
        target,
        TokenCount::ZERO,
        &marker,
        None,
    );
    let mut content = vec![ResultPart::Text(cut.text)];
    content.extend(images);
    result.content = content;
    true
}
