//! Per session, per day and per project (`--by`): what each group of
//! sessions cost by its own usage, next to what its own agent's
//! compaction and SOBA's cost when both are replayed under one cost model,
//! the requests each sent over the window and the recall each kept.

use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde_json::{Value, json};
use soba_core::tokens::group_thousands;

use crate::report::{
    PolicyStats, ReplayReport, TraceReport, align, dollar_text, micro_dollars, sum_priced,
};

/// How sessions are grouped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupBy {
    /// One row per session.
    Session,
    /// One row per day the sessions started on.
    Day,
    /// One row per ISO week the sessions started in (`2026-W07`).
    Week,
    /// One row per month the sessions started in (`2026-02`).
    Month,
    /// One row per working folder.
    Project,
}

impl GroupBy {
    /// Every grouping, in the order of the `--json` object.
    pub const ALL: [GroupBy; 5] = [
        GroupBy::Session,
        GroupBy::Day,
        GroupBy::Week,
        GroupBy::Month,
        GroupBy::Project,
    ];

    /// Parses a `--by` value (`session`, `day`, `week`, `month`,
    /// `project`; `daily`, `weekly`, `monthly` and plurals too).
    pub fn parse(name: &str) -> Option<GroupBy> {
        match name.trim().to_ascii_lowercase().as_str() {
            "session" | "sessions" => Some(GroupBy::Session),
            "day" | "days" | "daily" => Some(GroupBy::Day),
            "week" | "weeks" | "weekly" => Some(GroupBy::Week),
            "month" | "months" | "monthly" => Some(GroupBy::Month),
            "project" | "projects" | "folder" => Some(GroupBy::Project),
            _ => None,
        }
    }

    /// Returns the name (`session`, `day`, `week`, `month`, `project`).
    pub fn as_str(self) -> &'static str {
        match self {
            GroupBy::Session => "session",
            GroupBy::Day => "day",
            GroupBy::Week => "week",
            GroupBy::Month => "month",
            GroupBy::Project => "project",
        }
    }
}

/// The policy a session is measured against: its own agent's compaction
/// when the replay ran it (Claude Code's, Codex's, pi's), else `none` (no
/// compaction: every request as recorded).
pub fn own_policy(trace: &TraceReport) -> Option<&PolicyStats> {
    let named = |name: &str| trace.policies.iter().find(|stats| stats.name == name);
    named(&trace.agent).or_else(|| named("none"))
}

/// One group of sessions.
#[derive(Debug, Clone, Default)]
pub struct Group {
    /// The session's name, the day (`YYYY-MM-DD`) or the folder; for the
    /// sessions that record none, `(no date)` or `(no folder)`.
    pub key: String,
    /// Whether the key is a recorded day or folder (not one of those, nor
    /// the total): a folder named `(no folder)` is not the group of
    /// sessions without one.
    pub known: bool,
    /// The agents whose sessions it holds, sorted.
    pub agents: Vec<String>,
    /// Sessions replayed.
    pub sessions: usize,
    /// Recorded requests.
    pub requests: u64,
    /// What the sessions cost by their own usage, over those priced.
    pub recorded_dollars: Option<f64>,
    /// Their bills summed: every billed response's tokens, per model.
    pub bill: crate::price::Bill,
    /// Sessions with a recorded cost (usage at a known price).
    pub recorded_priced: usize,
    /// Sessions where the agent's policy or SOBA sent no request within
    /// the window: left out of `own`, `soba` and the saving.
    pub failed_sessions: usize,
    /// Sessions whose model has a price (the replayed dollars' sessions).
    pub replay_priced: usize,
    /// Each session's own policy (see [`own_policy`]), summed; its name
    /// lists the policies.
    pub own: PolicyStats,
    /// SOBA's figures, summed; `None` when `soba` was not replayed.
    pub soba: Option<PolicyStats>,
    /// For a session, its row's index in [`ReplayReport::traces`].
    pub trace_index: Option<usize>,
    /// The earliest start, for ordering sessions.
    first_started: Option<Timestamp>,
}

impl Group {
    fn new(key: String, known: bool) -> Group {
        Group {
            key,
            known,
            ..Group::default()
        }
    }

    fn add(&mut self, trace: &TraceReport) {
        self.sessions += 1;
        self.requests += trace.recorded_requests as u64;
        self.recorded_dollars = sum_priced(self.recorded_dollars, trace.recorded_dollars);
        self.recorded_priced += usize::from(trace.recorded_dollars.is_some());
        self.bill.merge(&trace.bill);
        if !self.agents.contains(&trace.agent) {
            self.agents.push(trace.agent.clone());
            self.agents.sort();
        }
        // A session where the agent's policy or SOBA sent nothing within
        // the window has no figures to compare: neither side counts it, so
        // a policy that failed is never the cheaper one.
        let soba_failed = trace
            .policies
            .iter()
            .any(|stats| stats.name == "soba" && stats.is_failed());
        if soba_failed || own_policy(trace).is_some_and(PolicyStats::is_failed) {
            self.failed_sessions += 1;
            self.first_started = match (self.first_started, trace.started) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            return;
        }
        if let Some(own) = own_policy(trace) {
            self.replay_priced += usize::from(own.dollars.is_some());
            let mut names: Vec<&str> = self
                .own
                .name
                .split(", ")
                .filter(|n| !n.is_empty())
                .collect();
            if !names.contains(&own.name.as_str()) {
                names.push(&own.name);
                names.sort_unstable();
            }
            let name = names.join(", ");
            self.own.merge(own);
            self.own.name = name;
        }
        if let Some(soba) = trace.policies.iter().find(|stats| stats.name == "soba") {
            match &mut self.soba {
                Some(total) => total.merge(soba),
                None => self.soba = Some(soba.clone()),
            }
        }
        self.first_started = match (self.first_started, trace.started) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// What SOBA would have saved against the sessions' own policies, in
    /// dollars (over the priced sessions).
    pub fn saving_dollars(&self) -> Option<f64> {
        if self.failed_sessions == self.sessions {
            return None;
        }
        Some(self.own.dollars? - self.soba.as_ref()?.dollars?)
    }

    /// The same in billed-equivalent tokens.
    pub fn saving_tokens(&self) -> Option<f64> {
        if self.failed_sessions == self.sessions {
            return None;
        }
        Some(self.own.billed_equivalent_tokens - self.soba.as_ref()?.billed_equivalent_tokens)
    }

    /// Returns the `groups.<by>[]` row.
    pub fn to_json(&self) -> Value {
        let soba = self.soba.as_ref();
        json!({
            "key": self.known.then_some(&self.key),
            "agents": self.agents,
            "sessions": self.sessions,
            "requests": self.requests,
            "recordedDollars": self.recorded_dollars.map(micro_dollars),
            "recordedSessions": self.recorded_priced,
            "failedSessions": self.failed_sessions,
            "billed": crate::report::bill_json(&self.bill),
            "pricedSessions": self.replay_priced,
            "own": {
                "policies": self.own.name,
                "dollars": self.own.dollars.map(micro_dollars),
                "billedEquivalentTokens": self.own.billed_equivalent_tokens.round() as u64,
                "overWindow": self.own.over_window,
                "probeRecallMean": self.own.recall_mean().map(round4),
            },
            "soba": soba.map(|soba| json!({
                "dollars": soba.dollars.map(micro_dollars),
                "billedEquivalentTokens": soba.billed_equivalent_tokens.round() as u64,
                "overWindow": soba.over_window,
                "probeRecallMean": soba.recall_mean().map(round4),
            })),
            "savingDollars": self.saving_dollars().map(micro_dollars),
            "savingBilledEquivalentTokens": self.saving_tokens().map(|n| n.round() as i64),
        })
    }
}

fn round4(value: f64) -> f64 {
    (value * 10_000.0).round() / 10_000.0
}

/// Returns the folder every trace name starts with (ending in `/`), so
/// names can be shown relative to it; empty when they share none.
pub fn common_folder<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let mut common: Option<&str> = None;
    for name in names {
        let folder = name.rfind('/').map_or("", |at| &name[..=at]);
        common = Some(match common {
            None => folder,
            Some(prefix) => {
                let shared = prefix
                    .char_indices()
                    .zip(folder.chars())
                    .find(|((_, a), b)| a != b)
                    .map_or(prefix.len().min(folder.len()), |((at, _), _)| at);
                prefix[..shared].rfind('/').map_or("", |at| &prefix[..=at])
            }
        });
    }
    common.unwrap_or("").to_owned()
}

/// Returns a recorded working folder as one spelling (`/p/x/`, `/p/./x`
/// and `//p/x` are `/p/x`, as `--project` matches them); `None` for an
/// empty one.
fn folder_key(cwd: &str) -> Option<String> {
    let folder: std::path::PathBuf = std::path::Path::new(cwd.trim()).components().collect();
    let text = folder.to_string_lossy().into_owned();
    (!text.is_empty()).then_some(text)
}

/// Returns the groups of the replayed sessions (sessions by start, days
/// and folders in order; those without a date or folder last) and their
/// total. Days are counted in `zone`.
pub fn groups(report: &ReplayReport, by: GroupBy, zone: &TimeZone) -> (Vec<Group>, Group) {
    let replayed: Vec<(usize, &TraceReport)> = report
        .traces
        .iter()
        .enumerate()
        .filter(|(_, trace)| trace.skipped.is_none())
        .collect();
    let folder = common_folder(report.traces.iter().map(|trace| trace.trace.as_str()));
    let mut out: Vec<Group> = Vec::new();
    let mut total = Group::new("total".to_owned(), false);
    for (idx, trace) in replayed {
        let (key, known) = match by {
            GroupBy::Session => (trace.trace[folder.len()..].to_owned(), true),
            GroupBy::Day | GroupBy::Week | GroupBy::Month => trace.started.map_or_else(
                || ("(no date)".to_owned(), false),
                |at| {
                    (
                        period_key(at.to_zoned_datetime(zone.clone()).date(), by),
                        true,
                    )
                },
            ),
            GroupBy::Project => trace
                .project
                .as_deref()
                .and_then(folder_key)
                .map_or_else(|| ("(no folder)".to_owned(), false), |key| (key, true)),
        };
        let at = match by {
            GroupBy::Session => out.len(),
            _ => out
                .iter()
                .position(|group| group.known == known && group.key == key)
                .unwrap_or(out.len()),
        };
        if at == out.len() {
            out.push(Group::new(key, known));
            if by == GroupBy::Session {
                out[at].trace_index = Some(idx);
            }
        }
        out[at].add(trace);
        total.add(trace);
    }
    match by {
        GroupBy::Session => out.sort_by(|a, b| {
            (a.first_started.is_none(), a.first_started, &a.key).cmp(&(
                b.first_started.is_none(),
                b.first_started,
                &b.key,
            ))
        }),
        GroupBy::Day | GroupBy::Week | GroupBy::Month | GroupBy::Project => {
            out.sort_by(|a, b| (!a.known, &a.key).cmp(&(!b.known, &b.key)));
        }
    }
    (out, total)
}

/// Returns the key of the day, ISO week (`2026-W07`, of the week's own
/// year) or month (`2026-02`) a date is in.
fn period_key(date: jiff::civil::Date, by: GroupBy) -> String {
    match by {
        GroupBy::Week => {
            let week = date.iso_week_date();
            format!("{:04}-W{:02}", week.year(), week.week())
        }
        GroupBy::Month => format!("{:04}-{:02}", date.year(), date.month()),
        _ => date.to_string(),
    }
}

/// Returns the billed table of the groups: each group's recorded token
/// columns and dollars (see [`crate::report::bill_table`]).
pub fn group_bill_table(groups: &[Group], total: &Group, by: GroupBy, dollars: bool) -> String {
    let rows: Vec<(String, crate::price::BillLine)> = groups
        .iter()
        .map(|group| (short_key(&group.key), group.bill.total))
        .collect();
    crate::report::bill_table(by.as_str(), &rows, &total.bill.total, dollars)
}

/// Returns the grouped table: one row per group and a total, in dollars
/// when `dollars` (else billed-equivalent tokens), with a line under it
/// saying what the columns are.
pub fn group_table(groups: &[Group], total: &Group, by: GroupBy, dollars: bool) -> String {
    let mut header: Vec<&str> = vec![by.as_str(), "sessions", "requests"];
    if dollars {
        header.extend(["recorded$", "agent$", "soba$", "saving"]);
    } else {
        header.extend(["agent billed", "soba billed", "saving"]);
    }
    header.extend(["overWin", "recall"]);
    if by == GroupBy::Session {
        header[1] = "agent";
    }
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| (*s).to_owned()).collect()];
    for group in groups.iter().chain([total]) {
        let key = short_key(&soba_core::terminal::sanitize_line(&group.key));
        let mut row = vec![
            key,
            if by == GroupBy::Session && !std::ptr::eq(group, total) {
                group.agents.join(", ")
            } else {
                group.sessions.to_string()
            },
            group_thousands(group.requests),
        ];
        row.extend(group.figure_cells(dollars, &TEXT));
        rows.push(row);
    }
    let unit = if dollars { "$" } else { " billed" };
    format!(
        "{}\nagent{unit}: each session's own agent's compaction replayed (claude-code, codex, pi; none, \
         no compaction, for the others); soba{unit}: SOBA's; saving: agent minus soba. Both are the \
         replay's cost model{}. overWin: requests over the window, agent→soba. recall: probe recall, \
         agent→soba.\n",
        align(&rows),
        if dollars {
            format!(
                "; recorded$ is what the transcripts' own usage cost. Of the {} session(s), {} record \
                 usage at a known price and {} have a model with a price; `-` and the totals leave \
                 out the others",
                total.sessions, total.recorded_priced, total.replay_priced
            )
        } else {
            String::new()
        }
    ) + &failed_note(total)
}

/// The line saying which sessions the comparison leaves out because a
/// policy failed outright; empty when none did.
fn failed_note(total: &Group) -> String {
    match total.failed_sessions {
        0 => String::new(),
        n => format!(
            "{n} session(s) where the agent's policy or SOBA sent no request within the window are marked failed and left out of agent, soba and saving.\n"
        ),
    }
}

/// The most characters of a key shown in the text table.
const KEY_CHARS: usize = 72;

/// A key of at most [`KEY_CHARS`] characters: a longer one keeps its
/// start and end around `…`.
fn short_key(key: &str) -> String {
    let n = key.chars().count();
    if n <= KEY_CHARS {
        return key.to_owned();
    }
    let head: String = key.chars().take(KEY_CHARS / 2 - 1).collect();
    let tail: String = key.chars().skip(n - KEY_CHARS / 2).collect();
    format!("{head}…{tail}")
}

/// How a table writes its figures: the text table and the HTML page
/// differ only in these marks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CellStyle {
    /// A figure that is not known.
    pub none: &'static str,
    /// Before an amount of dollars.
    pub dollar: &'static str,
    /// Before a negative amount.
    pub minus: &'static str,
    /// Between the agent's figure and SOBA's.
    pub arrow: &'static str,
}

/// The text table's marks.
pub(crate) const TEXT: CellStyle = CellStyle {
    none: "-",
    dollar: "",
    minus: "-",
    arrow: "→",
};

/// The HTML page's marks.
pub(crate) const HTML: CellStyle = CellStyle {
    none: "–",
    dollar: "$",
    minus: "−",
    arrow: " → ",
};

impl Group {
    /// The row's figures after its key, count and requests: in dollars
    /// (recorded, agent, soba, saving) or billed-equivalent tokens
    /// (agent, soba, saving), then over-window and recall, agent → soba.
    pub(crate) fn figure_cells(&self, dollars: bool, style: &CellStyle) -> Vec<String> {
        let soba = self.soba.as_ref();
        let none = || style.none.to_owned();
        if self.failed_sessions == self.sessions && self.sessions > 0 {
            // Nothing to compare: say why rather than show empty figures.
            let recorded = if dollars {
                vec![
                    self.recorded_dollars
                        .map_or_else(none, |d| format!("{}{}", style.dollar, dollar_text(d))),
                ]
            } else {
                Vec::new()
            };
            let n_failed = 3;
            return recorded
                .into_iter()
                .chain(std::iter::repeat_n("failed".to_owned(), n_failed))
                .chain([none(), none()])
                .collect();
        }
        let money =
            |d: Option<f64>| d.map_or_else(none, |d| format!("{}{}", style.dollar, dollar_text(d)));
        let tokens = |n: f64| group_thousands(n.round() as u64);
        let ratio = |r: Option<f64>| r.map_or_else(none, |r| format!("{r:.3}"));
        let mut cells = if dollars {
            vec![
                money(self.recorded_dollars),
                money(self.own.dollars),
                money(soba.and_then(|s| s.dollars)),
                saving_cell(self.saving_dollars(), self.own.dollars, true, style),
            ]
        } else {
            vec![
                tokens(self.own.billed_equivalent_tokens),
                soba.map_or_else(none, |s| tokens(s.billed_equivalent_tokens)),
                saving_cell(
                    self.saving_tokens(),
                    Some(self.own.billed_equivalent_tokens),
                    false,
                    style,
                ),
            ]
        };
        cells.push(format!(
            "{}{}{}",
            group_thousands(self.own.over_window),
            style.arrow,
            soba.map_or_else(none, |s| group_thousands(s.over_window))
        ));
        cells.push(format!(
            "{}{}{}",
            ratio(self.own.recall_mean()),
            style.arrow,
            ratio(soba.and_then(PolicyStats::recall_mean))
        ));
        cells
    }
}

/// `1.23 (31.2 %)`: a saving in dollars or tokens and its share of `of`.
pub(crate) fn saving_cell(
    saving: Option<f64>,
    of: Option<f64>,
    dollars: bool,
    style: &CellStyle,
) -> String {
    let Some(saving) = saving else {
        return style.none.to_owned();
    };
    let sign = if saving < 0.0 { style.minus } else { "" };
    let amount = if dollars {
        format!("{sign}{}{}", style.dollar, dollar_text(saving.abs()))
    } else {
        format!("{sign}{}", group_thousands(saving.abs().round() as u64))
    };
    match of.filter(|of| *of > 0.0) {
        Some(of) => format!("{amount} ({:.1} %)", saving / of * 100.0),
        None => amount,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(
        name: &str,
        agent: &str,
        started: &str,
        project: &str,
        own: f64,
        soba: f64,
    ) -> TraceReport {
        let mut own_stats = PolicyStats::new(agent);
        own_stats.dollars = Some(own);
        own_stats.over_window = 2;
        own_stats.billed_equivalent_tokens = own * 1e6;
        let mut none = PolicyStats::new("none");
        none.dollars = Some(own * 2.0);
        let mut soba_stats = PolicyStats::new("soba");
        soba_stats.dollars = Some(soba);
        soba_stats.billed_equivalent_tokens = soba * 1e6;
        TraceReport {
            trace: name.to_owned(),
            agent: agent.to_owned(),
            started: started.parse().ok(),
            project: Some(project.to_owned()).filter(|p| !p.is_empty()),
            recorded_requests: 10,
            recorded_dollars: Some(own * 1.1),
            // Gemini CLI has no policy of its own in the replay.
            policies: if agent == "gemini-cli" {
                vec![none, soba_stats]
            } else {
                vec![none, own_stats, soba_stats]
            },
            ..TraceReport::default()
        }
    }

    fn report() -> ReplayReport {
        ReplayReport {
            traces: vec![
                trace(
                    "/h/.claude/projects/a/s1.jsonl",
                    "claude-code",
                    "2026-11-30T23:30:00Z",
                    "/code/a",
                    4.0,
                    3.0,
                ),
                trace(
                    "/h/.codex/sessions/s2.jsonl",
                    "codex",
                    "2026-11-29T10:00:00Z",
                    "/code/b",
                    2.0,
                    1.5,
                ),
                trace(
                    "/h/.gemini/tmp/x/chats/s3.json",
                    "gemini-cli",
                    "",
                    "",
                    1.0,
                    0.5,
                ),
                TraceReport::skipped("/h/broken.jsonl".into(), None, "bad".into()),
            ],
            ..ReplayReport::default()
        }
    }

    #[test]
    fn sessions_are_named_under_their_shared_folder_and_ordered_by_start() {
        let (groups, total) = groups(&report(), GroupBy::Session, &TimeZone::UTC);
        let keys: Vec<&str> = groups.iter().map(|g| g.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                ".codex/sessions/s2.jsonl",
                ".claude/projects/a/s1.jsonl",
                ".gemini/tmp/x/chats/s3.json"
            ]
        );
        // Gemini CLI has no policy of its own here: it is measured against none.
        assert_eq!(groups[2].own.name, "none");
        assert_eq!(groups[2].own.dollars, Some(2.0));
        assert_eq!(total.sessions, 3);
        assert_eq!(total.own.name, "claude-code, codex, none");
        assert_eq!(total.own.dollars, Some(8.0));
        assert_eq!(total.saving_dollars(), Some(8.0 - 5.0));
        assert_eq!(total.requests, 30);
    }

    #[test]
    fn days_follow_the_zone_and_undated_sessions_come_last() {
        let (utc, _) = groups(&report(), GroupBy::Day, &TimeZone::UTC);
        let keys: Vec<&str> = utc.iter().map(|g| g.key.as_str()).collect();
        assert_eq!(keys, ["2026-11-29", "2026-11-30", "(no date)"]);
        let tokyo =
            TimeZone::get("Asia/Tokyo").unwrap_or_else(|_| TimeZone::fixed(jiff::tz::offset(9)));
        let (east, _) = groups(&report(), GroupBy::Day, &tokyo);
        let keys: Vec<&str> = east.iter().map(|g| g.key.as_str()).collect();
        assert_eq!(keys, ["2026-11-29", "2026-12-01", "(no date)"]);
    }

    #[test]
    fn projects_group_by_folder_and_the_table_shows_savings() {
        let (projects, total) = groups(&report(), GroupBy::Project, &TimeZone::UTC);
        let keys: Vec<&str> = projects.iter().map(|g| g.key.as_str()).collect();
        assert_eq!(keys, ["/code/a", "/code/b", "(no folder)"]);
        let table = group_table(&projects, &total, GroupBy::Project, true);
        let row = table
            .lines()
            .find(|line| line.starts_with("/code/a"))
            .unwrap();
        let cells: Vec<&str> = row
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        assert_eq!(
            cells,
            [
                "/code/a",
                "1",
                "10",
                "4.40",
                "4.00",
                "3.00",
                "1.00 (25.0 %)",
                "2→0",
                "-→-"
            ]
        );
        let total_row = table
            .lines()
            .find(|line| line.starts_with("total"))
            .unwrap();
        assert!(total_row.contains("3.00 (37.5 %)"), "{total_row}");
        // The footnote is one sentence per thought, with no gap inside.
        let footnote = table
            .lines()
            .find(|line| line.starts_with("agent$"))
            .unwrap();
        assert!(
            footnote.contains(" record usage at a known price and ") && !footnote.contains("  "),
            "{footnote}"
        );
        let tokens = group_table(&projects, &total, GroupBy::Project, false);
        assert!(tokens.contains("1,000,000 (25.0 %)"), "{tokens}");
    }

    /// Attack findings: one folder spelled several ways is one row, a
    /// folder named like the label of sessions without one is not merged
    /// with them, and a huge key is shortened in the table.
    #[test]
    fn folders_are_one_spelling_and_labels_cannot_be_faked() {
        let long = format!("/{}", "x".repeat(1_000));
        let folders = [
            "/p/x",
            "/p/x/",
            "/p/./x",
            "//p/x",
            "(no folder)",
            "",
            long.as_str(),
        ];
        let report = ReplayReport {
            traces: folders
                .iter()
                .enumerate()
                .map(|(n, folder)| trace(&format!("/t/{n}.jsonl"), "pi", "", folder, 1.0, 0.5))
                .collect(),
            ..ReplayReport::default()
        };
        let (projects, total) = groups(&report, GroupBy::Project, &TimeZone::UTC);
        let rows: Vec<(&str, bool, usize)> = projects
            .iter()
            .map(|g| (g.key.as_str(), g.known, g.sessions))
            .collect();
        assert_eq!(
            rows,
            [
                ("(no folder)", true, 1),
                ("/p/x", true, 4),
                (long.as_str(), true, 1),
                ("(no folder)", false, 1)
            ]
        );
        assert_eq!(projects[3].to_json()["key"], Value::Null);
        let table = group_table(&projects, &total, GroupBy::Project, true);
        assert!(
            table
                .lines()
                .take_while(|line| !line.starts_with("agent$"))
                .all(|line| line.chars().count() < 200),
            "{table}"
        );
        assert!(table.contains("/xxxxxxxx"), "{table}");
    }

    #[test]
    fn common_folder_is_a_whole_folder() {
        assert_eq!(common_folder(["/a/bc/x.jsonl", "/a/bd/y.jsonl"]), "/a/");
        assert_eq!(common_folder(["/a/b/x.jsonl"]), "/a/b/");
        assert_eq!(common_folder(["x.jsonl", "/a/y.jsonl"]), "");
        assert_eq!(common_folder(["/é/a/x", "/é/b/y"]), "/é/");
    }
}
