//! What resuming a session does to it, said before it is resumed (`soba
//! show`): the lines and entries a damaged log loses or repairs, or that
//! nothing is lost.

use std::collections::HashSet;

use soba_core::EntryId;
use soba_store::reader::{DiagnosticKind, SessionLog};

/// Says what resuming a damaged log does, one line per effect, and that
/// nothing is lost only when no line or entry is left out of it.
pub fn resume_effects(log: &SessionLog) -> Vec<String> {
    let (mut n_skipped, mut n_repaired, mut n_replaced) = (0usize, 0usize, 0usize);
    let mut repaired_entries = HashSet::new();
    let mut placeholders = Vec::new();
    let (mut torn, mut no_header, mut path_cut) = (false, false, false);
    for diagnostic in log.diagnostics() {
        match &diagnostic.kind {
            DiagnosticKind::EmptyFile | DiagnosticKind::MissingHeader { .. } => no_header = true,
            DiagnosticKind::TornLine { .. } => torn = true,
            DiagnosticKind::InvalidUtf8 { .. }
            | DiagnosticKind::InvalidJson { .. }
            | DiagnosticKind::WrongShape { .. } => n_skipped += 1,
            DiagnosticKind::RepairedField { id, .. } => {
                n_repaired += 1;
                repaired_entries.insert(id.clone());
            }
            DiagnosticKind::DamagedEntry { id, .. } => placeholders.push(id.clone()),
            DiagnosticKind::DuplicateId { .. } => n_replaced += 1,
            DiagnosticKind::DanglingParent { .. }
            | DiagnosticKind::DanglingLeaf { .. }
            | DiagnosticKind::ParentIsLeaf { .. }
            | DiagnosticKind::LeafTargetsLeaf { .. } => path_cut = true,
            _ => {}
        }
    }
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let mut hints = Vec::new();
    if no_header {
        hints.push(
            "line 1 is not a session header, so soba cannot resume this file (soba import reads other agents' logs)"
                .to_owned(),
        );
    }
    if n_skipped > 0 {
        hints.push(format!(
            "{} skipped when the session is read: what {} is lost to resuming",
            plural(n_skipped, "unreadable line is", "unreadable lines are"),
            if n_skipped == 1 {
                "it holds"
            } else {
                "they hold"
            }
        ));
    }
    if !placeholders.is_empty() {
        let path: HashSet<&EntryId> = log.path().iter().map(|logged| &logged.entry.id).collect();
        let n_on_path = placeholders.iter().filter(|id| path.contains(id)).count();
        hints.push(format!(
            "{} kept as {}: the path through {} stays connected, but {} content is left out of the model input ({} on the current path)",
            plural(placeholders.len(), "damaged entry is", "damaged entries are"),
            if placeholders.len() == 1 { "a placeholder" } else { "placeholders" },
            if placeholders.len() == 1 { "it" } else { "them" },
            if placeholders.len() == 1 { "its" } else { "their" },
            n_on_path
        ));
    }
    if n_repaired > 0 {
        hints.push(format!(
            "{} repaired as listed: {} kept and used with the values read instead",
            plural(n_repaired, "field was", "fields were"),
            plural(repaired_entries.len(), "entry is", "entries are"),
        ));
    }
    if n_replaced > 0 {
        hints.push(format!(
            "{} an earlier entry's id and {} it: the earlier line is not used",
            plural(n_replaced, "line repeats", "lines repeat"),
            if n_replaced == 1 {
                "replaces"
            } else {
                "replace"
            }
        ));
    }
    if path_cut {
        hints.push(format!(
            "the current path is cut short: resuming continues from the {} of the path shown by soba show --entries (marked *), not from the whole history",
            plural(log.path().len(), "entry", "entries")
        ));
    }
    if torn {
        hints.push(
            "the torn last line was never acknowledged; it is ignored and the next append ends it"
                .to_owned(),
        );
    }
    if !no_header && n_skipped == 0 && placeholders.is_empty() && n_replaced == 0 && !path_cut {
        hints.push(if n_repaired > 0 {
            "apart from the repaired fields, nothing is lost by resuming it".to_owned()
        } else {
            "every complete line is read: nothing acknowledged is lost by resuming it".to_owned()
        });
    }
    hints
}
