//! What `soba import` reports of each session, as text any front door can
//! show and as the `--json` objects (SPEC §3.4): counts, usage, where it
//! was written, its diagnostics and what its first resume meets.

use serde_json::{Value, json};
use soba_core::terminal::{Line, sanitize_line};
use soba_core::tokens::group_thousands;
use soba_store::import::ImportedSession;

use super::{FirstResume, Written};

/// Diagnostics listed per session in the plain report; `--json` lists all.
const MAX_DIAGNOSTICS_SHOWN: usize = 10;

/// Returns the line `soba import` prints when the history is over the
/// window, or none when it fits.
pub fn first_resume_line(resume: &FirstResume) -> Option<String> {
    resume.over_window().then(|| {
        format!(
            "  first resume: {} tokens of history, over {}'s {}-token window: `soba run -c` compacts it first. \
             The summarizer reads its newest part (at most compaction.summarizer.maxChunks {} calls, the \
             estimate is shown before it starts); the older part is kept as local facts (the original task, \
             files, commands, errors). Nothing is dropped from the session file.\n",
            group_thousands(resume.live_tokens),
            Line(&resume.model),
            group_thousands(resume.context_window),
            resume.max_chunks
        )
    })
}

/// Returns the `--json` object of one session (SPEC §3.4).
pub fn session_json(
    session: &ImportedSession,
    written: &Written,
    resume: Option<&FirstResume>,
) -> Value {
    let stats = &session.stats;
    let (session_id, path, already) = match written {
        Written::DryRun => (Value::Null, Value::Null, false),
        Written::New { id, path } => (json!(id), json!(path.display().to_string()), false),
        Written::Already { id, path } => (json!(id), json!(path.display().to_string()), true),
        Written::Grown { id, path, .. } => (json!(id), json!(path.display().to_string()), false),
    };
    let grown_from = match written {
        Written::Grown { previous, .. } => json!(previous),
        _ => Value::Null,
    };
    json!({
        "source": session.source.display().to_string(),
        "format": session.format.as_str(),
        "originalId": session.original_id,
        "messages": stats.messages,
        "entries": stats.entries,
        "toolCalls": stats.tool_calls,
        "toolResults": stats.tool_results,
        "unpairedToolCalls": stats.unpaired_tool_calls,
        "orphanToolResults": stats.orphan_tool_results,
        "resultsBeforeCalls": stats.results_before_calls,
        "reorderedToolResults": stats.reordered_tool_results,
        "usage": {
            "input": stats.usage.input,
            "output": stats.usage.output,
            "cacheRead": stats.usage.cache_read,
            "cacheWrite": stats.usage.cache_write,
            "reasoning": stats.usage.reasoning,
        },
        "storedUsage": {
            "input": stats.stored_usage.input,
            "output": stats.stored_usage.output,
            "cacheRead": stats.stored_usage.cache_read,
            "cacheWrite": stats.stored_usage.cache_write,
            "reasoning": stats.stored_usage.reasoning,
        },
        "usageRaw": stats.usage_raw,
        "peakPromptTokens": stats.peak_prompt_tokens,
        "compactions": stats.compactions,
        "inferences": session.inference_count(),
        "diagnostics": stats.diagnostics,
        "diagnosticsUnlisted": stats.diagnostics_unlisted,
        "invalidUtf8": stats.invalid_utf8.map(|invalid| json!({
            "firstOffset": invalid.first_offset,
            "replaced": invalid.replaced,
        })),
        "sessionId": session_id,
        "path": path,
        "alreadyImported": already,
        "grownFrom": grown_from,
        "firstResume": resume.map(|resume| json!({
            "model": resume.model,
            "contextWindow": resume.context_window,
            "liveTokens": resume.live_tokens,
            "compactsFirst": resume.over_window(),
        })),
    })
}

/// Returns the plain report of one session.
pub fn session_text(session: &ImportedSession, written: &Written) -> String {
    let stats = &session.stats;
    let usage = &stats.usage;
    let n = group_thousands;
    let destination = match written {
        Written::DryRun => "dry run, not written".to_owned(),
        Written::New { id, .. } => format!("imported as {id}"),
        Written::Already { id, .. } => format!("already imported as {id}; skipped"),
        Written::Grown {
            id,
            previous,
            before,
            now,
            ..
        } => format!(
            "imported again as {id}: it has grown since it was imported as {previous} ({before} → {now} entries; {previous} is kept as it was)"
        ),
    };
    let mut out = format!(
        "{} ({}, {}): {destination}\n",
        sanitize_line(&session.source.display().to_string()),
        session.format,
        Line(&session.original_id)
    );
    out.push_str(&format!(
        "  messages {} · entries {} · tool calls {} · results {} · unpaired calls {}\n",
        n(stats.messages),
        n(stats.entries),
        n(stats.tool_calls),
        n(stats.tool_results),
        n(stats.unpaired_tool_calls)
    ));
    if stats.orphan_tool_results + stats.results_before_calls + stats.reordered_tool_results > 0 {
        out.push_str(&format!(
            "  results without a call {} · results before their call {} · moved after their call {}\n",
            n(stats.orphan_tool_results),
            n(stats.results_before_calls),
            n(stats.reordered_tool_results)
        ));
    }
    let figures = |usage: &soba_core::message::Usage| {
        format!(
            "input {} · output {} · cache read {} · cache write {} · reasoning {}",
            n(usage.input),
            n(usage.output),
            n(usage.cache_read),
            n(usage.cache_write),
            n(usage.reasoning)
        )
    };
    // The first figure is what `soba show` sums from the stored messages;
    // the source's own total follows when it counted more.
    out.push_str(&format!("  usage: {}\n", figures(&stats.stored_usage)));
    if stats.usage != stats.stored_usage {
        out.push_str(&format!(
            "  the source's own total: {} (it counts requests that left no message with usage)\n",
            figures(usage)
        ));
    }
    let peak = stats.peak_prompt_tokens.map_or_else(
        || "unknown".to_owned(),
        |peak| format!("{} tokens", n(peak)),
    );
    out.push_str(&format!(
        "  peak prompt {peak} · compactions {} · inferences {}\n",
        n(stats.compactions),
        n(session.inference_count() as u64)
    ));
    if stats.diagnostics.is_empty() {
        out.push_str("  diagnostics: none\n");
    } else {
        let total = stats.diagnostics_total();
        out.push_str(&format!("  diagnostics: {}\n", n(total)));
        for line in stats.diagnostics.iter().take(MAX_DIAGNOSTICS_SHOWN) {
            out.push_str(&format!("    {}\n", Line(line)));
        }
        let more = total.saturating_sub(MAX_DIAGNOSTICS_SHOWN as u64);
        if more > 0 {
            let listed = if stats.diagnostics_unlisted == 0 {
                "--json lists them all".to_owned()
            } else {
                format!(
                    "--json lists the first {}",
                    n(stats.diagnostics.len() as u64)
                )
            };
            out.push_str(&format!("    … and {} more ({listed})\n", n(more)));
        }
    }
    out
}
