//! The full validation of a session log behind `soba show --check`, shared
//! so importers' output can be held to the same rules in tests.

use std::collections::{HashMap, HashSet};

use soba_core::{Block, EntryBody, EntryId, Role};

use crate::reader::{LoggedEntry, SessionLog};

/// Returns every problem `soba show --check` reports: each reader
/// diagnostic, then each reference the path depends on that does not hold
/// (a tool result with no earlier call, a tool call the conversation went
/// on without answering, a capsule keeping from an entry not before it or
/// rolling up one not in the log, a hygiene entry pruning past the path, a
/// leaf naming a missing entry), each with its line; last, each `parentId`
/// loop (entries that lead back to themselves instead of to the root).
///
/// A call is unanswered when a later response follows it, with no capsule
/// between, and no result for it came first: the model was sent its call
/// without a result (the input answers it as interrupted). Calls still open
/// at the end of the path (a turn under way, or cut off) and calls a
/// capsule covers are not problems.
pub fn problems(log: &SessionLog) -> Vec<String> {
    let mut problems: Vec<String> = log.diagnostics().iter().map(ToString::to_string).collect();
    let path = log.path();
    let mut seen: HashSet<&EntryId> = HashSet::new();
    let mut calls: HashSet<&str> = HashSet::new();
    // Calls without a result yet, in path order, with where they were made.
    let mut open: Vec<(&str, String)> = Vec::new();
    let mut answered: HashSet<&str> = HashSet::new();
    for logged in &path {
        let entry = &logged.entry;
        let at = logged.location;
        match &entry.body {
            EntryBody::Message(message_entry) => {
                if message_entry.message.role == Role::Assistant {
                    for (id, made_at) in open.drain(..) {
                        if !answered.contains(id) {
                            problems.push(format!(
                                "{made_at}: tool call {id:?} has no result before the next response on the path (the model input answers it as interrupted)"
                            ));
                        }
                    }
                }
                for block in &message_entry.message.content {
                    match block {
                        Block::ToolUse(call) => {
                            calls.insert(call.id.as_str());
                            answered.remove(call.id.as_str());
                            open.push((call.id.as_str(), at.to_string()));
                        }
                        Block::ToolResult(result)
                            if !calls.contains(result.tool_use_id.as_str()) =>
                        {
                            problems.push(format!(
                                "{at}: tool result for call {:?} has no earlier call on the path",
                                result.tool_use_id
                            ));
                        }
                        Block::ToolResult(result) => {
                            answered.insert(result.tool_use_id.as_str());
                        }
                        _ => {}
                    }
                }
            }
            EntryBody::Capsule(capsule) => {
                // What the capsule covers is no longer sent.
                open.clear();
                if let Some(first) = &capsule.first_kept_entry_id
                    && !seen.contains(first)
                {
                    problems.push(format!(
                        "{at}: capsule {} keeps from {first}, which is not before it on the path",
                        entry.id
                    ));
                }
                if let Some(previous) = &capsule.previous_capsule_id
                    && log.entry(previous).is_none()
                {
                    problems.push(format!(
                        "{at}: capsule {} rolls up {previous}, which is not in the log",
                        entry.id
                    ));
                }
            }
            EntryBody::Hygiene { pruned_through, .. } if !seen.contains(pruned_through) => {
                problems.push(format!(
                    "{at}: hygiene entry {} prunes through {pruned_through}, which is not before it on the path",
                    entry.id
                ));
            }
            _ => {}
        }
        seen.insert(&entry.id);
    }
    for logged in log.entries() {
        // The reader already reports a dangling current leaf.
        if let EntryBody::Leaf { target } = &logged.entry.body
            && log.entry(target).is_none()
            && log.leaf() != Some(target)
        {
            problems.push(format!(
                "{}: leaf entry {} points at {target}, which is not in the log",
                logged.location, logged.entry.id
            ));
        }
    }
    problems.extend(parent_loops(log));
    problems
}

/// The most ids of one loop named in its problem.
const LOOP_IDS_SHOWN: usize = 6;

/// Returns one problem for each `parentId` loop in the log (a hand edit can
/// make entries lead back to themselves): none of its entries reaches the
/// root, and a path through it starts where the loop is entered. Each entry
/// is walked once, so a long log costs linear time.
fn parent_loops(log: &SessionLog) -> Vec<String> {
    let mut problems = Vec::new();
    // The walk that first reached each entry.
    let mut reached: HashMap<&EntryId, usize> = HashMap::new();
    let mut chain: Vec<&LoggedEntry> = Vec::new();
    for (walk, start) in log.entries().iter().enumerate() {
        chain.clear();
        let mut cursor = Some(start);
        while let Some(logged) = cursor {
            if matches!(logged.entry.body, EntryBody::Leaf { .. }) {
                break;
            }
            match reached.get(&logged.entry.id) {
                Some(&earlier) if earlier == walk => {
                    let from = chain
                        .iter()
                        .position(|seen| seen.entry.id == logged.entry.id)
                        .expect("an entry this walk reached is on its chain");
                    problems.push(describe_loop(&chain[from..]));
                    break;
                }
                Some(_) => break,
                None => {}
            }
            reached.insert(&logged.entry.id, walk);
            chain.push(logged);
            cursor = logged
                .entry
                .parent_id
                .as_ref()
                .and_then(|parent| log.entry(parent));
        }
    }
    problems
}

/// Names a loop at its entry that comes first in the file, following the
/// parents from it.
fn describe_loop(members: &[&LoggedEntry]) -> String {
    let first = members
        .iter()
        .enumerate()
        .min_by_key(|(_, logged)| logged.location.offset)
        .map_or(0, |(index, _)| index);
    let mut ids: Vec<String> = members[first..]
        .iter()
        .chain(&members[..first])
        .take(LOOP_IDS_SHOWN)
        .map(|logged| logged.entry.id.to_string())
        .collect();
    if members.len() > LOOP_IDS_SHOWN {
        ids.push(format!("… ({} more)", members.len() - LOOP_IDS_SHOWN));
    }
    let head = members[first];
    ids.push(head.entry.id.to_string());
    format!(
        "{}: the parentId chain of entry {} loops back to it ({}), so none of these {} entries reaches the session's root; a path through them starts where the loop is entered (fix or remove the parentId that closes it)",
        head.location,
        head.entry.id,
        ids.join(" → "),
        members.len()
    )
}
