//! The one pairing check of imported sessions: every tool result after
//! its call, results moved after a call made later, split batches
//! regrouped, and what cannot be paired kept as an observation and
//! reported.

use super::*;

impl SessionBuilder {
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
    pub(super) fn check_pairing(&mut self) -> Pairing {
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
    pub(super) fn repair_order(&self, pairing: &mut Pairing) -> Vec<usize> {
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
    pub(super) fn regroup_split_batches(
        &self,
        order: Vec<usize>,
        pairing: &mut Pairing,
    ) -> Vec<usize> {
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
    pub(super) fn apply_order(&mut self, order: &[usize]) {
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
}

/// What the pairing check found.
#[derive(Debug, Default)]
pub(super) struct Pairing {
    pub(super) notes: Vec<String>,
    pub(super) orphans: u64,
    pub(super) before_calls: u64,
    pub(super) reordered: u64,
}

/// Returns the message of a message entry.
pub(super) fn message_of(entry: &Entry) -> Option<&Message> {
    match &entry.body {
        EntryBody::Message(m) => Some(&m.message),
        _ => None,
    }
}

/// Rewrites a message whose tool results cannot be paired as a user
/// message of origin `observation`: each result becomes a text block
/// naming its call (images kept), other blocks are kept. `repeats` maps a
/// call id already answered to the entry of its result.
pub(super) fn observation_of(message: &Message, repeats: &HashMap<String, usize>) -> Message {
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
