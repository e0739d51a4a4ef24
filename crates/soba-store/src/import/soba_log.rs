//! A SOBA session log read as a transcript, for `soba replay`: the path
//! from the root to the current leaf as it happened, before any
//! compaction.
//!
//! - Messages, checkpoints and model changes are kept, in path order; one
//!   inference per assistant message, with the usage and model it
//!   recorded.
//! - Capsules and hygiene passes are left out: they are one policy's
//!   decisions, and the replay makes every policy's own. Each left-out
//!   capsule is counted in a diagnostic.
//! - Context, skill and setting entries carry no conversation and are
//!   left out too; the replay's fitted overhead absorbs what they added
//!   to each request.
//! - Every assistant message of the file with usage is billed, those of
//!   branches a rewind left included: the provider billed them.
//!
//! `soba import` still refuses a SOBA log ([`super::ImportError::AlreadySoba`]):
//! there is nothing to convert.

use std::collections::HashSet;
use std::path::Path;

use serde_json::json;
use soba_core::{EntryBody, Role, Usage};

use super::builder::{Context, MAX_PLAUSIBLE_TOKENS, SessionBuilder};
use super::{BilledResponse, Format, ImportError, ImportOptions, ImportedSession};
use crate::reader::SessionLog;

/// Reads the SOBA log `log` (read from `path`) as one session.
pub(super) fn read(
    log: SessionLog,
    path: &Path,
    options: &ImportOptions,
) -> Result<Vec<ImportedSession>, ImportError> {
    let ctx = &Context {
        source: path.to_owned(),
        fallback_ms: options.fallback_timestamp_ms,
    };
    let Some(header) = log.header() else {
        // The reader says why (a newer schemaVersion: upgrade soba).
        let reason = log.diagnostics().first().map_or_else(
            || "its first line is not a readable session header".to_owned(),
            ToString::to_string,
        );
        return Err(ImportError::Malformed {
            path: path.to_owned(),
            format: Format::Soba,
            reason,
        });
    };
    let mut b = SessionBuilder::new(Format::Soba, ctx, 0);
    b.original_id = header.id.to_string();
    b.cwd = Some(header.cwd.clone());
    b.created_at = Some(header.created_at.clone());
    for diagnostic in log.diagnostics() {
        b.diag(diagnostic.to_string());
    }
    // What the provider billed: every answer in the file, on any branch,
    // each id once (a line written twice is one answer).
    let mut billed_ids = HashSet::new();
    b.billed = Some(
        log.entries()
            .iter()
            .filter(|logged| billed_ids.insert(&logged.entry.id))
            .filter_map(|logged| match &logged.entry.body {
                EntryBody::Message(message) if message.message.role == Role::Assistant => {
                    plausible(message.message.usage).map(|usage| BilledResponse {
                        model: message.message.model.clone(),
                        usage,
                        cache_write_1h: 0,
                        timestamp: Some(logged.entry.timestamp.clone()).filter(|at| !at.is_empty()),
                    })
                }
                _ => None,
            })
            .collect(),
    );
    let implausible = log
        .entries()
        .iter()
        .filter(|logged| match &logged.entry.body {
            EntryBody::Message(message) => {
                message.message.usage.is_some() && plausible(message.message.usage).is_none()
            }
            _ => false,
        })
        .count();
    if implausible > 0 {
        b.diag(format!(
            "{implausible} answer(s) record an implausible usage (a figure over 10^12 tokens): not counted"
        ));
    }
    let mut capsules = 0u64;
    let mut hygiene = 0u64;
    // The path is taken by value: its messages move into the session.
    for logged in log.into_path() {
        let entry = logged.entry;
        let timestamp = Some(entry.timestamp).filter(|at| !at.is_empty());
        b.count_record(entry.body.type_name());
        match entry.body {
            EntryBody::Message(message) => {
                b.messages = b.messages.saturating_add(1);
                let message = message.message;
                let assistant = message.role == Role::Assistant;
                let (usage, model) = (plausible(message.usage), message.model.clone());
                let idx = b.push_message(message, timestamp.clone());
                if assistant {
                    b.push_inference(idx, usage, timestamp, model, None);
                }
            }
            EntryBody::ModelChange { model } => {
                if b.model.is_none() {
                    b.model = Some(model.clone());
                }
                b.push_model_change(model, timestamp);
            }
            EntryBody::Checkpoint { kind, note } => {
                b.push_checkpoint(kind, note, timestamp);
            }
            EntryBody::Capsule(_) => capsules += 1,
            EntryBody::Hygiene { .. } => hygiene += 1,
            _ => {}
        }
    }
    if capsules + hygiene > 0 {
        b.diag(format!(
            "{capsules} capsule(s) and {hygiene} hygiene pass(es) of the log are left out: the replay rebuilds the history they replaced and makes each policy's own"
        ));
    }
    b.usage_raw = json!({ "counting": "per request, as soba recorded it" });
    Ok(vec![b.finish()])
}

/// Returns `usage` when every figure is plausible (at most
/// [`MAX_PLAUSIBLE_TOKENS`], the importers' rule): a log is outside bytes,
/// and one absurd figure would price a session at trillions.
fn plausible(usage: Option<Usage>) -> Option<Usage> {
    usage.filter(|usage| usage.largest() <= MAX_PLAUSIBLE_TOKENS)
}
