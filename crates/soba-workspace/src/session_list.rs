//! The workspace's sessions as `soba sessions` lists them, most recently
//! modified first, with the short ids that tell every session of the
//! folder apart, the unused ones hidden unless asked for; the table, the
//! notes and the `--json` rows any front door can show.

use std::io::{BufRead, BufReader};
use std::path::Path;

use serde_json::{Value, json};
use soba_core::terminal::sanitize_line;
use soba_store::reader::{
    SessionSummary, SkippedEntry, has_content, list_sessions_and_skipped, session_glance,
};

use crate::context::{MIN_SHORT_SESSION, shortest_unique_prefix};
use crate::error::Result;

/// The label of the time a listing shows and is ordered by: the log's
/// last change ([`modified`]), not its creation.
pub const MODIFIED_LABEL: &str = "modified";

/// The sessions of a folder as listed.
#[derive(Debug)]
pub struct SessionList {
    /// The sessions shown, most recently modified first.
    pub sessions: Vec<SessionSummary>,
    /// The length of the short ids, unique among all the folder's sessions.
    pub short_len: usize,
    /// The unused sessions (opened and left before anything was said) not
    /// shown.
    pub n_hidden: usize,
    /// The `*.jsonl` entries that are not session logs.
    pub skipped: Vec<SkippedEntry>,
}

/// Lists the sessions of `dir`; unused ones only with `all` (an unreadable
/// header is always shown).
pub fn list(dir: &Path, all: bool) -> Result<SessionList> {
    let (listed, skipped) = list_sessions_and_skipped(dir)?;
    let n_listed = listed.len();
    // The short ids tell every session of the folder apart, the hidden
    // ones too: `soba -r` resolves a prefix against all of them.
    let all_ids: Vec<&str> = listed.iter().map(|s| s.id.as_str()).collect();
    let short_len = shortest_unique_prefix(&all_ids, MIN_SHORT_SESSION);
    let sessions: Vec<SessionSummary> = listed
        .into_iter()
        .filter(|summary| all || summary.problem.is_some() || has_content(&summary.path))
        .collect();
    Ok(SessionList {
        n_hidden: n_listed - sessions.len(),
        sessions,
        short_len,
        skipped,
    })
}

/// Returns the `--json` row of one session.
pub fn json_row(summary: &SessionSummary, short_len: usize) -> Value {
    let glance = session_glance(&summary.path);
    json!({
        "id": summary.id,
        "shortId": short(&summary.id, short_len),
        "path": summary.path.display().to_string(),
        "createdAt": summary.created_at,
        "entries": count_entries(&summary.path),
        "messages": glance.n_messages,
        "title": glance.title,
        "bytes": summary.size,
        "cwd": summary.cwd,
        "problem": summary.problem,
        "hasContent": has_content(&summary.path),
    })
}

/// Returns the one line naming the `*.jsonl` entries that are not session logs;
/// the names come from the folder, so the line is escaped.
pub fn skipped_note(skipped: &[SkippedEntry]) -> String {
    let listed: Vec<String> = skipped
        .iter()
        .map(|entry| format!("{} ({})", entry.name, entry.kind))
        .collect();
    let line = format!(
        "note: skipped {} entr{} that {} not session logs: {}",
        skipped.len(),
        if skipped.len() == 1 { "y" } else { "ies" },
        if skipped.len() == 1 { "is" } else { "are" },
        listed.join(", ")
    );
    sanitize_line(&line).into_owned()
}

/// Returns the line saying how many unused sessions are not shown.
pub fn hidden_note(n_hidden: usize) -> String {
    format!(
        "({n_hidden} unused session{} not shown: opened and left without a message; --all lists them)",
        if n_hidden == 1 { "" } else { "s" }
    )
}

/// Returns the sessions as an aligned table: short id, the time the log
/// last changed (the order of the list), message count, size and title,
/// one safe line each.
pub fn table(sessions: &[SessionSummary], short_len: usize) -> String {
    let rows: Vec<[String; 5]> = sessions
        .iter()
        .map(|summary| {
            let glance = session_glance(&summary.path);
            [
                short(&summary.id, short_len),
                modified(summary),
                glance.n_messages.to_string(),
                human_size(summary.size),
                match &summary.problem {
                    Some(problem) => format!("(unreadable header: {problem})"),
                    None => glance
                        .title_line()
                        .unwrap_or_else(|| "(no message typed)".to_owned()),
                },
            ]
            // Every cell comes from a file: one safe line each.
            .map(|cell| sanitize_line(&cell).into_owned())
        })
        .collect();
    let header = ["id", MODIFIED_LABEL, "messages", "size", "title"];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: [&str; 5], out: &mut String| {
        out.push_str(&format!(
            "{:<w0$}  {:<w1$}  {:>w2$}  {:>w3$}  {}\n",
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            cells[4],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3],
        ));
    };
    line(header, &mut out);
    for row in &rows {
        line([&row[0], &row[1], &row[2], &row[3], &row[4]], &mut out);
    }
    out
}

/// Returns the first `len` characters of an id.
pub fn short(id: &str, len: usize) -> String {
    id.chars().take(len).collect()
}

/// Shows an RFC 3339 time as `yyyy-mm-dd hh:mm` (UTC).
pub fn display_time(rfc3339: &str) -> String {
    let text: String = rfc3339.chars().take(16).collect();
    text.replace('T', " ")
}

/// Shows when a session's log last changed, the time a listing is
/// ordered by, as `yyyy-mm-dd hh:mm` (UTC); `-` when unknown.
pub fn modified(summary: &SessionSummary) -> String {
    summary
        .modified
        .and_then(|time| jiff::Timestamp::try_from(time).ok())
        .map_or_else(|| "-".to_owned(), |time| display_time(&time.to_string()))
}

/// Counts the complete, non-blank lines after the header.
pub fn count_entries(path: &Path) -> u64 {
    let Ok((file, _)) = soba_store::untrusted::open_untrusted(path) else {
        return 0;
    };
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut n_lines = 0u64;
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                if line.last() == Some(&b'\n') && !line.iter().all(u8::is_ascii_whitespace) {
                    n_lines += 1;
                }
            }
        }
    }
    n_lines.saturating_sub(1)
}

/// Formats a byte count: `812 B`, `4.2 KiB`, `1.3 MiB`.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_and_sizes() {
        let ids = ["0190aaaa-1111", "0190aaab-2222", "0191ffff-3333"];
        assert_eq!(shortest_unique_prefix(&ids, 4), 8);
        assert_eq!(shortest_unique_prefix(&ids[..1], 8), 8);
        assert_eq!(human_size(812), "812 B");
        assert_eq!(human_size(4300), "4.2 KiB");
        assert_eq!(human_size(3 * 1024 * 1024 / 2), "1.5 MiB");
        assert_eq!(display_time("2025-01-02T03:04:05.678Z"), "2025-01-02 03:04");
    }

    /// The time a listing shows is the one it is ordered by: the log's
    /// last change (the walk read activity order under "created").
    #[test]
    fn the_time_shown_is_the_last_change() {
        let mut summary = SessionSummary {
            id: "0190aaaa".into(),
            path: "/s/0190aaaa.jsonl".into(),
            created_at: Some("2024-05-06T07:08:09Z".into()),
            cwd: None,
            size: 0,
            modified: Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_735_689_660)),
            problem: None,
        };
        assert_eq!(modified(&summary), "2025-01-01 00:01");
        summary.modified = None;
        assert_eq!(modified(&summary), "-");
    }

    #[test]
    fn counts_complete_lines_after_the_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        std::fs::write(&path, "{header}\n{a}\n\n{b}\n{torn").unwrap();
        assert_eq!(count_entries(&path), 2);
    }
}
