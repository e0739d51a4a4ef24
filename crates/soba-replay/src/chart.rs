//! `--html report.html`: one self-contained page with the totals, the
//! real-summary comparison, the calibration of each trace and, per trace,
//! an SVG chart (plotters' SVG backend into a string) of the input tokens
//! of every request under every policy, with compaction markers and the
//! window and SOBA's limits as horizontal lines.

use plotters::prelude::*;
use soba_core::tokens::group_thousands;

use super::group::{GroupBy, HTML, common_folder, saving_cell};
use super::probe::PROBE_NAMES;
use super::report::{PolicyStats, ReplayReport, TraceReport, dollar_text};

/// The chart's size in pixels (it scales down with the page).
const WIDTH: u32 = 1_100;
const HEIGHT: u32 = 420;

/// How a policy's line is drawn: colour, width, and a dash (length, gap)
/// or a solid line. The colours are Okabe and Ito's, told apart with the
/// common colour-vision deficiencies; the dashes tell them apart in grey.
#[derive(Debug, Clone, Copy)]
struct LineStyle {
    color: RGBColor,
    width: u32,
    dash: Option<(u32, u32)>,
}

impl LineStyle {
    /// The colour as `#rrggbb`.
    fn hex(self) -> String {
        format!(
            "#{:02x}{:02x}{:02x}",
            self.color.0, self.color.1, self.color.2
        )
    }

    /// A short sample of the line for a legend.
    fn swatch(self) -> String {
        let dash = self
            .dash
            .map(|(on, off)| format!(" stroke-dasharray=\"{on} {off}\""))
            .unwrap_or_default();
        format!(
            "<svg width=\"34\" height=\"10\" aria-hidden=\"true\"><line x1=\"1\" y1=\"5\" x2=\"33\" y2=\"5\" stroke=\"{}\" stroke-width=\"{}\"{dash}/></svg>",
            self.hex(),
            self.width
        )
    }
}

/// Returns a stable style for a policy name; `<peer>@N` is its peer's
/// colour, thinner and dotted.
fn style(name: &str) -> LineStyle {
    let base = name.split('@').next().unwrap_or(name);
    let (color, width, dash) = match base {
        "none" => (RGBColor(110, 110, 110), 2, Some((2, 4))),
        "soba" => (RGBColor(213, 94, 0), 3, None),
        "claude-code" => (RGBColor(0, 114, 178), 2, Some((10, 4))),
        "codex" => (RGBColor(0, 158, 115), 2, Some((6, 3))),
        "pi" => (RGBColor(204, 121, 167), 2, Some((14, 4))),
        "opencode" => (RGBColor(230, 159, 0), 2, Some((4, 4))),
        "goose" => (RGBColor(86, 180, 233), 2, Some((8, 8))),
        _ => (RGBColor(0, 0, 0), 2, Some((3, 3))),
    };
    if base.len() < name.len() {
        LineStyle {
            color,
            width: 1,
            dash: Some((1, 3)),
        }
    } else {
        LineStyle { color, width, dash }
    }
}

/// Escapes outside text for HTML, on one line: control, bidirectional and
/// invisible format characters are written as visible escapes first.
fn escape(text: &str) -> String {
    soba_core::terminal::sanitize_line(text)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// A drawn chart and where its plot lies, for the hover read-out.
struct Drawn {
    svg: String,
    steps: usize,
    x_pixels: (i32, i32),
}

/// Returns the SVG chart of one trace.
pub fn trace_svg(trace: &TraceReport) -> Result<String, String> {
    draw(trace).map(|drawn| drawn.svg)
}

fn draw(trace: &TraceReport) -> Result<Drawn, String> {
    let mut svg = String::new();
    let steps = trace
        .series
        .iter()
        .map(|series| series.tokens.len())
        .max()
        .unwrap_or(0)
        .max(1);
    let x_pixels;
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let peak = trace
            .series
            .iter()
            .flat_map(|series| series.tokens.iter().flatten())
            .copied()
            .max()
            .unwrap_or(0)
            .max(trace.window);
        let y_max = peak + peak / 20 + 1;
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d(0usize..steps, 0u64..y_max)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("recorded request")
            .y_desc("input tokens")
            .y_label_formatter(&|v| group_thousands(*v))
            .label_style(("sans-serif", 14))
            .light_line_style(WHITE)
            .draw()
            .map_err(|e| e.to_string())?;
        let (range, _) = chart.plotting_area().get_pixel_range();
        x_pixels = (range.start, range.end);
        for (_, value, line) in limits(trace) {
            draw_line(&mut chart, vec![(0usize, value), (steps, value)], line)?;
        }
        for series in &trace.series {
            let line = style(&series.name);
            let mut segments: Vec<Vec<(usize, u64)>> = vec![Vec::new()];
            for (step, tokens) in series.tokens.iter().enumerate() {
                match tokens {
                    Some(tokens) => {
                        if let Some(last) = segments.last_mut() {
                            last.push((step, *tokens));
                        }
                    }
                    None => segments.push(Vec::new()),
                }
            }
            for segment in segments.into_iter().filter(|s| !s.is_empty()) {
                draw_line(&mut chart, segment, line)?;
            }
            let markers: Vec<(usize, u64)> = series
                .compactions
                .iter()
                .filter_map(|&step| {
                    series
                        .tokens
                        .get(step)
                        .copied()
                        .flatten()
                        .map(|tokens| (step, tokens))
                })
                .collect();
            chart
                .draw_series(
                    markers
                        .into_iter()
                        .map(|point| Circle::new(point, 4, line.color.filled())),
                )
                .map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(Drawn {
        svg,
        steps,
        x_pixels,
    })
}

type Chart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordusize, plotters::coord::types::RangedCoordu64>,
>;

fn draw_line(
    chart: &mut Chart<'_, '_>,
    points: Vec<(usize, u64)>,
    line: LineStyle,
) -> Result<(), String> {
    let shape = line.color.stroke_width(line.width);
    match line.dash {
        None => chart
            .draw_series(LineSeries::new(points, shape))
            .map(|_| ()),
        Some((on, off)) => chart
            .draw_series(DashedLineSeries::new(points, on, off, shape))
            .map(|_| ()),
    }
    .map_err(|e| e.to_string())
}

/// The horizontal lines of a trace's chart: the window and SOBA's limits.
fn limits(trace: &TraceReport) -> Vec<(&'static str, u64, LineStyle)> {
    let mut out = vec![(
        "window",
        trace.window,
        LineStyle {
            color: RGBColor(0, 0, 0),
            width: 1,
            dash: None,
        },
    )];
    if let Some((hard, auto)) = trace.soba_limits {
        let color = style("soba").color;
        out.push((
            "SOBA hardLimit",
            hard,
            LineStyle {
                color,
                width: 1,
                dash: Some((6, 3)),
            },
        ));
        out.push((
            "SOBA autoLimit",
            auto,
            LineStyle {
                color,
                width: 1,
                dash: Some((1, 3)),
            },
        ));
    }
    out
}

fn ratio(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_owned(), |v| format!("{v:.3}"))
}

fn money(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_owned(), |v| format!("${}", dollar_text(v)))
}

/// The policy table's columns, each with what it means.
const POLICY_COLUMNS: [(&str, &str); 16] = [
    (
        "policy",
        "the compaction policy replayed: none (never compacts), soba, or another agent's (name@N: at the trigger N)",
    ),
    ("requests", "requests the policy sent, resends included"),
    (
        "over window",
        "requests larger than the model's window (SOBA: requests it could not send)",
    ),
    ("compactions", "compactions the policy made"),
    ("peak", "the largest request, in input tokens"),
    ("mean", "the mean request, in input tokens"),
    (
        "summarizer in",
        "input tokens sent to the summarizer, over every attempt",
    ),
    ("summarizer out", "output tokens the summarizer wrote"),
    (
        "billed-eq.",
        "billed-equivalent tokens: every request priced as input-token equivalents with cache reads and writes at their rates, plus the summarizer's calls",
    ),
    (
        "$",
        "what the policy's requests would have cost at the model's list price, same cost model",
    ),
    (
        "recall mean",
        "mean probe recall over the graded requests: how much of the files, task, latest instruction, open error and recent detail the input still held",
    ),
    ("recall min", "the lowest graded request's recall"),
    ("resends", "extra requests after one over the window"),
    ("calls", "summarizer calls that reached generation"),
    (
        "rejected",
        "capsules the post-generation check threw away as not worth their cost",
    ),
    (
        "hygiene",
        "free pruning passes (SOBA hygiene, OpenCode prune)",
    ),
];

/// What each probe checks, in [`PROBE_NAMES`] order.
const PROBE_MEANINGS: [&str; 5] = [
    "the files the session modified are still named",
    "the original task is still there",
    "the latest user instruction is still there",
    "the open error, when one is unresolved, is still there",
    "the most recent tool results are still there",
];

fn policy_table(policies: &[PolicyStats], dollars: bool) -> String {
    // Two tables side by side where the window allows, one under the
    // other where it does not: what each policy cost, and what it kept.
    let (cost, kept) = POLICY_COLUMNS.split_at(10);
    let mut out = String::from("<div class=\"pair\">");
    for (columns, probes) in [(cost, false), (&POLICY_COLUMNS[..1], true)] {
        let columns: Vec<(&str, &str)> = columns
            .iter()
            .copied()
            .chain(if probes { kept.to_vec() } else { Vec::new() })
            .filter(|(name, _)| *name != "$" || dollars)
            .collect();
        out.push_str("<div class=\"scroll\"><table><thead><tr>");
        for (name, meaning) in &columns {
            out.push_str(&format!("<th title=\"{}\">{name}</th>", escape(meaning)));
        }
        if probes {
            for (name, meaning) in PROBE_NAMES.iter().zip(PROBE_MEANINGS) {
                out.push_str(&format!("<th title=\"{}\">{name}</th>", escape(meaning)));
            }
        }
        out.push_str("</tr></thead><tbody>\n");
        for stats in policies {
            let line = style(&stats.name);
            // A policy that failed at some requests says how many; one that
            // failed at all of them has no figure to compare.
            let failed = match stats.failed_steps() {
                0 => String::new(),
                _ if stats.is_failed() => " <span class=\"skipped\">failed</span>".to_owned(),
                _ => format!(
                    " <span class=\"warning\" title=\"recorded requests at which it sent nothing within the window\">failed {}</span>",
                    stats.failed_cell()
                ),
            };
            out.push_str(&format!(
                "<tr><td>{}&nbsp;<span style=\"color:{}\">{}</span>{failed}</td>",
                line.swatch(),
                line.hex(),
                escape(&stats.name)
            ));
            for (name, _) in &columns[1..] {
                out.push_str(&format!("<td>{}</td>", policy_cell(stats, name)));
            }
            if probes {
                for idx in 0..PROBE_NAMES.len() {
                    out.push_str(&format!("<td>{}</td>", ratio(stats.probe_mean(idx))));
                }
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</tbody></table></div>\n");
    }
    out.push_str("</div>\n");
    out
}

/// One cell of the policy table, by its column's name.
fn policy_cell(stats: &PolicyStats, column: &str) -> String {
    if stats.is_failed() && matches!(column, "billed-eq." | "$" | "recall mean" | "recall min") {
        return "failed".to_owned();
    }
    match column {
        "requests" => group_thousands(stats.requests),
        "over window" => group_thousands(stats.over_window),
        "compactions" => group_thousands(stats.compactions),
        "peak" => group_thousands(stats.peak_input_tokens),
        "mean" => group_thousands(stats.mean_input_tokens()),
        "summarizer in" => group_thousands(stats.summarizer_input_tokens),
        "summarizer out" => group_thousands(stats.summarizer_output_tokens),
        "billed-eq." => group_thousands(stats.billed_equivalent_tokens.round() as u64),
        "$" => money(stats.dollars),
        "recall mean" => ratio(stats.recall_mean()),
        "recall min" => ratio(stats.recall_min),
        "resends" => group_thousands(stats.resends),
        "calls" => group_thousands(stats.summarizer_calls),
        "rejected" => group_thousands(stats.rejected_capsules),
        _ => group_thousands(stats.hygiene_passes),
    }
}

/// What each fidelity column counts, in [`crate::fidelity::CATEGORIES`]
/// order.
const FIDELITY_MEANINGS: [&str; 5] = [
    "file paths the agent touched with a read, write or edit tool (or a patch header), still named somewhere in the input",
    "a distinctive line of each tool result that failed (error flag, non-zero exit, traceback, error line) and was not followed by a success of the same call, still in the input",
    "sentences of messages a person typed that state a constraint (always, never, must, don't, only, keep, avoid, prefer, should…), still in the input verbatim",
    "the items of the newest plan or todo list (TodoWrite, update_plan, write_todos) not yet completed, still in the input",
    "the longest line of each of the 6th to 20th newest tool results, still in the input",
];

/// The fidelity table: what each policy's input kept of the history at
/// the last request of each fifth of every trace, with its glossary.
fn fidelity_table(policies: &[PolicyStats]) -> String {
    if policies
        .iter()
        .all(|stats| stats.fidelity.items.iter().all(|&n| n == 0))
    {
        return String::new();
    }
    let mut out = String::from(
        "<h2>What each policy keeps</h2>\n<p class=\"note\">At the last request of each fifth of every trace, the share of the history's items present in the policy's model input (verbatim or in a capsule), over all points and traces: items kept / items; n/a where the history had none.</p>\n<div class=\"scroll\"><table><thead><tr><th>policy</th>",
    );
    for (name, meaning) in crate::fidelity::TITLES.iter().zip(FIDELITY_MEANINGS) {
        out.push_str(&format!("<th title=\"{}\">{name}</th>", escape(meaning)));
    }
    out.push_str("</tr></thead><tbody>\n");
    for stats in policies {
        let line = style(&stats.name);
        out.push_str(&format!(
            "<tr><td>{}&nbsp;<span style=\"color:{}\">{}</span></td>",
            line.swatch(),
            line.hex(),
            escape(&stats.name)
        ));
        for idx in 0..crate::fidelity::CATEGORIES.len() {
            let kept = &stats.fidelity;
            out.push_str(&match kept.share(idx) {
                Some(share) => format!(
                    "<td title=\"{} of {}\">{share:.3}</td>",
                    group_thousands(kept.kept[idx]),
                    group_thousands(kept.items[idx])
                ),
                None => "<td>n/a</td>".to_owned(),
            });
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table></div>\n<details><summary>What the columns mean</summary><dl class=\"glossary\">");
    for (name, meaning) in crate::fidelity::TITLES.iter().zip(FIDELITY_MEANINGS) {
        out.push_str(&format!("<dt>{name}</dt><dd>{}</dd>", escape(meaning)));
    }
    out.push_str("</dl></details>\n");
    out
}

/// The glossary of the policy table.
fn glossary(dollars: bool) -> String {
    let mut out =
        String::from("<details><summary>What the columns mean</summary><dl class=\"glossary\">");
    for (name, meaning) in POLICY_COLUMNS {
        if name == "$" && !dollars {
            continue;
        }
        out.push_str(&format!("<dt>{name}</dt><dd>{}</dd>", escape(meaning)));
    }
    for (name, meaning) in PROBE_NAMES.iter().zip(PROBE_MEANINGS) {
        out.push_str(&format!("<dt>{name}</dt><dd>{}</dd>", escape(meaning)));
    }
    out.push_str("</dl></details>\n");
    out
}

/// A grouped table (per session, day or project), in a box of its own.
fn group_table(report: &ReplayReport, by: GroupBy, folder: &str) -> String {
    let (groups, total) = report.groups(by);
    let dollars = report.show_dollars;
    let unit = if dollars { "$" } else { " billed-eq." };
    let mut out = String::from("<div class=\"scroll\"><table><thead><tr>");
    let columns: Vec<(String, &str)> = [
        (by.as_str().to_owned(), match by {
            GroupBy::Session => "the session file, under the folder named above",
            GroupBy::Day => "the day the sessions started, local time",
            GroupBy::Week => "the ISO week the sessions started in, local time",
            GroupBy::Month => "the month the sessions started in, local time",
            GroupBy::Project => "the working folder the sessions ran in",
        }),
        (
            if by == GroupBy::Session { "agent" } else { "sessions" }.to_owned(),
            if by == GroupBy::Session { "the agent that wrote the session" } else { "sessions replayed" },
        ),
        ("requests".to_owned(), "requests the transcripts record"),
    ]
    .into_iter()
    .chain(dollars.then(|| ("recorded $".to_owned(), "what the sessions cost by their own recorded usage, cache writes included")))
    .chain([
        (format!("agent{unit}"), "each session's own agent's compaction (claude-code, codex, pi; none for the others) replayed under the replay's cost model"),
        (format!("soba{unit}"), "SOBA's compaction replayed under the same cost model"),
        ("saving".to_owned(), "agent minus soba, and its share of agent"),
        ("over window".to_owned(), "requests over the model's window: the agent's policy → SOBA's"),
        ("recall".to_owned(), "mean probe recall: the agent's policy → SOBA's"),
    ])
    .collect();
    for (name, meaning) in &columns {
        out.push_str(&format!(
            "<th title=\"{}\">{}</th>",
            escape(meaning),
            escape(name)
        ));
    }
    out.push_str("</tr></thead><tbody>\n");
    for group in groups.iter().chain([&total]) {
        let is_total = std::ptr::eq(group, &total);
        let key = match (by, group.trace_index) {
            (GroupBy::Session, Some(idx)) if !is_total => format!(
                "<a href=\"#s{idx}\" title=\"{}\">{}</a>",
                escape(&format!("{folder}{}", group.key)),
                escape(&group.key)
            ),
            _ if is_total => "<b>total</b>".to_owned(),
            _ => escape(&group.key),
        };
        out.push_str(&format!(
            "<tr{}><td class=\"key\">{key}</td>",
            if is_total { " class=\"total\"" } else { "" }
        ));
        let second = if by == GroupBy::Session && !is_total {
            escape(&group.agents.join(", "))
        } else {
            group.sessions.to_string()
        };
        let mut cells = vec![second, group_thousands(group.requests)];
        cells.extend(group.figure_cells(dollars, &HTML));
        for cell in cells {
            out.push_str(&format!("<td>{cell}</td>"));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table></div>\n");
    out
}

/// The billed table: per model and in total, the recorded token columns
/// and (when `dollars`) what they cost.
fn bill_table(bill: &crate::price::Bill, dollars: bool) -> String {
    let columns: [(&str, &str); 8] = [
        (
            "model",
            "the model that answered, as the transcript names it",
        ),
        (
            "responses",
            "responses billed, each once (lines of one response share its id)",
        ),
        ("input", "uncached input tokens"),
        ("output", "output tokens, reasoning included"),
        ("cache read", "input tokens read from the provider's cache"),
        (
            "cache write",
            "input tokens written to the provider's cache",
        ),
        (
            "of it 1h",
            "of the cache writes, those with the 1-hour lifetime (billed at twice the input price)",
        ),
        (
            "$",
            "what they cost at the model's price; – where the model has none",
        ),
    ];
    let mut out = String::from("<div class=\"scroll\"><table><thead><tr>");
    for (name, meaning) in columns.iter().filter(|(name, _)| *name != "$" || dollars) {
        out.push_str(&format!("<th title=\"{}\">{name}</th>", escape(meaning)));
    }
    out.push_str("</tr></thead><tbody>\n");
    let rows = bill
        .models
        .iter()
        .map(|(model, line)| (escape(model), line, false));
    for (name, line, is_total) in rows.chain([("<b>total</b>".to_owned(), &bill.total, true)]) {
        out.push_str(&format!(
            "<tr{}><td>{name}</td>",
            if is_total { " class=\"total\"" } else { "" }
        ));
        for figure in [
            line.responses,
            line.input,
            line.output,
            line.cache_read,
            line.cache_write,
            line.cache_write_1h,
        ] {
            out.push_str(&format!("<td>{}</td>", group_thousands(figure)));
        }
        if dollars {
            out.push_str(&format!("<td>{}</td>", money(line.dollars)));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table></div>\n");
    out
}

/// The summary at the top: what the sessions cost, what SOBA would have
/// saved, and what it kept.
fn summary(report: &ReplayReport) -> String {
    let (_, total) = report.groups(GroupBy::Session);
    let soba = total.soba.as_ref();
    let mut cards: Vec<(String, String, String)> = Vec::new();
    let mut agents = total.agents.clone();
    agents.dedup();
    cards.push((
        "sessions".to_owned(),
        total.sessions.to_string(),
        format!(
            "{} · {} skipped · {} recorded requests",
            escape(&agents.join(", ")),
            report.traces.len() - report.replayed(),
            group_thousands(total.requests)
        ),
    ));
    if report.show_dollars {
        cards.push((
            "recorded".to_owned(),
            money(total.recorded_dollars),
            format!(
                "what {} of them cost by their own usage, at {}",
                total.recorded_priced,
                report.prices_source()
            ),
        ));
        cards.push((
            "their agents' compaction, replayed".to_owned(),
            money(total.own.dollars),
            escape(&format!(
                "{} under the replay's cost model, over the {} session(s) whose model has a price",
                total.own.name, total.replay_priced
            )),
        ));
        cards.push((
            "SOBA, replayed".to_owned(),
            money(soba.and_then(|s| s.dollars)),
            format!(
                "saving {}",
                saving_cell(total.saving_dollars(), total.own.dollars, true, &HTML)
            ),
        ));
    } else {
        cards.push((
            "their agents' compaction, replayed".to_owned(),
            group_thousands(total.own.billed_equivalent_tokens.round() as u64),
            escape(&format!("billed-equivalent tokens ({})", total.own.name)),
        ));
        cards.push((
            "SOBA, replayed".to_owned(),
            soba.map_or_else(
                || "–".to_owned(),
                |s| group_thousands(s.billed_equivalent_tokens.round() as u64),
            ),
            format!(
                "billed-equivalent tokens · saving {}",
                saving_cell(
                    total.saving_tokens(),
                    Some(total.own.billed_equivalent_tokens),
                    false,
                    &HTML
                )
            ),
        ));
    }
    cards.push((
        "requests over the window".to_owned(),
        format!(
            "{} → {}",
            group_thousands(total.own.over_window),
            soba.map_or_else(|| "–".to_owned(), |s| group_thousands(s.over_window))
        ),
        "the agents' policies → SOBA".to_owned(),
    ));
    cards.push((
        "recall".to_owned(),
        format!(
            "{} → {}",
            ratio(total.own.recall_mean()),
            ratio(soba.and_then(PolicyStats::recall_mean))
        ),
        "mean probe recall, the agents' policies → SOBA".to_owned(),
    ));
    let mut out = String::from("<section class=\"cards\">");
    for (title, figure, detail) in cards {
        out.push_str(&format!(
            "<div class=\"card\"><div class=\"label\">{title}</div><div class=\"figure\">{figure}</div><div class=\"detail\">{detail}</div></div>"
        ));
    }
    out.push_str("</section>\n");
    if report.show_dollars
        && let Some((recorded, modelled, _)) = report.none_vs_recorded()
    {
        out.push_str(&format!(
            "<p class=\"note\">How faithful the model is: <code>none</code> (every request as recorded, no compaction) costs {} under the replay's cost model, {:+.1} % against the {} recorded. The model prices a cache write only where the prompt's prefix changed or the cache lifetime ran out; the agents' real caches miss more often than that.</p>\n",
            money(Some(modelled)),
            (modelled / recorded - 1.0) * 100.0,
            money(Some(recorded)),
        ));
    }
    out
}

/// The hover read-out: on a chart, the request under the pointer and
/// every policy's input tokens there.
const SCRIPT: &str = r#"<script>
for (const fig of document.querySelectorAll('figure.chart')) {
  const data = JSON.parse(fig.querySelector('script').textContent);
  const svg = fig.querySelector('svg'), tip = fig.querySelector('.tip'), rule = fig.querySelector('.rule');
  const hide = () => { tip.style.display = 'none'; rule.style.display = 'none'; };
  svg.addEventListener('mouseleave', hide);
  svg.addEventListener('mousemove', (event) => {
    const box = svg.getBoundingClientRect(), scale = box.width / data.width;
    const x = (event.clientX - box.left) / scale;
    if (x < data.x0 || x > data.x1) { hide(); return; }
    const step = Math.round((x - data.x0) / (data.x1 - data.x0) * data.steps);
    if (step >= data.steps) { hide(); return; }
    const rows = data.series.map((s) => {
      const v = s.tokens[step];
      const mark = s.compactions.includes(step) ? ' (compacted)' : '';
      return '<tr><td style="color:' + s.color + '">' + s.name + '</td><td>' + (v == null ? '–' : v.toLocaleString('en')) + mark + '</td></tr>';
    });
    tip.innerHTML = '<b>request ' + step + '</b><table>' + rows.join('') + '</table>';
    const left = event.clientX - fig.getBoundingClientRect().left;
    tip.style.display = 'block';
    tip.style.left = (left + tip.offsetWidth + 16 > fig.clientWidth ? left - tip.offsetWidth - 12 : left + 12) + 'px';
    rule.style.display = 'block';
    rule.style.left = (data.x0 + step / data.steps * (data.x1 - data.x0)) * scale + 'px';
  });
}
</script>
"#;

const STYLE: &str = "<style>\
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;max-width:1180px;padding:16px 24px;color:#222;line-height:1.4}\
h1{font-size:1.6em;margin:.2em 0}h2{margin-top:1.6em;border-bottom:1px solid #ddd}h3{margin-top:1.6em;overflow-wrap:anywhere}\
.meta,.note,.detail{color:#555;font-size:13px}.note{max-width:900px}\
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(240px,1fr));gap:10px;margin:12px 0}\
.card{border:1px solid #ddd;border-radius:6px;padding:8px 12px}.card .label{font-size:13px;color:#555}\
.card .figure{font-size:1.5em;font-weight:600;margin:2px 0}\
.scroll{overflow-x:auto;max-width:100%;margin:8px 0}\
.pair{display:flex;flex-wrap:wrap;gap:0 16px;align-items:flex-start}.pair>.scroll{flex:0 1 auto}\
td.key{white-space:normal;overflow-wrap:anywhere;min-width:12em;max-width:34em}\
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right;white-space:nowrap}\
td:first-child,th:first-child{text-align:left}th{background:#f4f4f4}th[title]{cursor:help}\
tr.total td{font-weight:600;background:#fafafa}\
.skipped{color:#a00}.warning{color:#8a5a00}\
.legend{display:flex;flex-wrap:wrap;gap:4px 18px;font-size:13px;margin:6px 0;padding:0;list-style:none}\
.legend li{display:flex;align-items:center;gap:5px}\
figure.chart{position:relative;margin:0}figure.chart svg{width:100%;height:auto;display:block}\
.tip{position:absolute;top:8px;display:none;pointer-events:none;background:#fff;border:1px solid #888;border-radius:4px;padding:4px 8px;font-size:12px;box-shadow:0 1px 4px #0003}\
.tip table{font-size:12px}.tip td{border:none;padding:0 4px}\
.rule{position:absolute;top:10px;bottom:50px;width:1px;background:#0006;display:none;pointer-events:none}\
.glossary{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;font-size:13px}.glossary dt{font-weight:600}.glossary dd{margin:0}\
</style>";

/// Returns the whole HTML page: a summary, the groups by project and by
/// day, the policies over every session, the recorded compactions, then
/// one section per session with its chart.
pub fn html(report: &ReplayReport) -> Result<String, String> {
    let folder = common_folder(report.traces.iter().map(|trace| trace.trace.as_str()));
    let mut out = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>soba replay</title>{STYLE}</head><body>\n<h1>soba replay</h1>\n"
    );
    out.push_str(&format!(
        "<p class=\"meta\">{}{} session(s) replayed, {} skipped · cache {} · TTL {} · summarizer price {}{}</p>\n",
        if folder.is_empty() {
            String::new()
        } else {
            format!("under <code>{}</code> · ", escape(&folder))
        },
        report.replayed(),
        report.traces.len() - report.replayed(),
        report.cache.map_or("by model family", |c| c.as_str()),
        if report.cache_ttl == 0 {
            "none (no expiry)".to_owned()
        } else {
            format!("{} s", report.cache_ttl)
        },
        report.summarizer_price,
        report
            .peer_trigger
            .map(|n| format!(" · peer trigger {}", group_thousands(n)))
            .unwrap_or_default(),
    ));
    out.push_str(&summary(report));
    if report.bill.total.responses > 0 {
        out.push_str("<h2>What was billed</h2>\n<p class=\"note\">Every response the transcripts record, abandoned branches and interrupted requests included, each at its own model's price.</p>\n");
        out.push_str(&bill_table(&report.bill, report.show_dollars));
    }
    let several = report.replayed() > 1;
    if several {
        out.push_str("<h2>By project</h2>\n");
        out.push_str(&group_table(report, GroupBy::Project, &folder));
        out.push_str("<h2>By day</h2>\n");
        out.push_str(&group_table(report, GroupBy::Day, &folder));
    }
    out.push_str("<h2>Every policy, over all sessions</h2>\n");
    out.push_str(&policy_table(&report.totals, report.show_dollars));
    out.push_str(&glossary(report.show_dollars));
    out.push_str(&fidelity_table(&report.totals));
    if !report.real_summaries.is_empty() {
        out.push_str("<h2>Recorded compactions vs SOBA capsules</h2>\n<p class=\"note\">Each agent's own summary and SOBA's capsule at the same point, judged on their text alone.</p>\n<div class=\"scroll\"><table><thead><tr><th>session</th><th title=\"the entry the compaction was recorded at\">entry</th><th>who</th><th title=\"the summary's size\">tokens</th>");
        for (name, meaning) in PROBE_NAMES.iter().zip(PROBE_MEANINGS) {
            out.push_str(&format!("<th title=\"{}\">{name}</th>", escape(meaning)));
        }
        out.push_str("<th>mean</th></tr></thead><tbody>\n");
        for summary in &report.real_summaries {
            for (who, tokens, probes) in [
                (
                    summary.agent.as_str(),
                    summary.agent_tokens,
                    &summary.agent_probes,
                ),
                ("soba", summary.soba_tokens, &summary.soba_probes),
            ] {
                out.push_str(&format!(
                    "<tr><td title=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}</td>",
                    escape(&summary.trace),
                    escape(
                        summary
                            .trace
                            .strip_prefix(folder.as_str())
                            .unwrap_or(&summary.trace)
                    ),
                    summary.entry_index,
                    escape(who),
                    group_thousands(tokens)
                ));
                for value in probes.values() {
                    out.push_str(&format!("<td>{}</td>", ratio(value)));
                }
                out.push_str(&format!("<td>{}</td></tr>\n", ratio(Some(probes.mean()))));
            }
        }
        out.push_str("</tbody></table></div>\n");
    }
    if several {
        out.push_str("<h2>Sessions</h2>\n");
        out.push_str(&group_table(report, GroupBy::Session, &folder));
    }
    for (idx, trace) in report.traces.iter().enumerate() {
        let name = trace
            .trace
            .strip_prefix(folder.as_str())
            .unwrap_or(&trace.trace);
        out.push_str(&format!(
            "<section id=\"s{idx}\"><h3 title=\"{}\">{}</h3>\n",
            escape(&trace.trace),
            escape(name)
        ));
        if let Some(reason) = &trace.skipped {
            out.push_str(&format!(
                "<p class=\"skipped\">skipped: {}</p></section>\n",
                escape(reason)
            ));
            continue;
        }
        out.push_str(&format!(
            "<p class=\"meta\">{} · model {} · window {} · max output {} · cache {} · {} recorded requests{}{}{}</p>\n",
            escape(&trace.format),
            escape(&trace.model),
            group_thousands(trace.window),
            group_thousands(trace.max_output),
            trace.cache.map_or("none", |c| c.as_str()),
            trace.recorded_requests,
            trace.started.map(|at| format!(" · started {}", at.strftime("%Y-%m-%d %H:%M UTC"))).unwrap_or_default(),
            trace.project.as_deref().map(|p| format!(" · in <code>{}</code>", escape(p))).unwrap_or_default(),
            if report.show_dollars { format!(" · recorded {}", money(trace.recorded_dollars)) } else { String::new() },
        ));
        let calibrations: Vec<String> = trace
            .calibration
            .iter()
            .map(|c| {
                format!(
                    "{} factor {:.4}, overhead {} ({}, {} samples)",
                    escape(&c.model),
                    c.factor,
                    group_thousands(c.overhead),
                    c.source.as_str(),
                    c.samples
                )
            })
            .collect();
        out.push_str(&format!(
            "<p class=\"meta\">calibration: {}</p>\n",
            calibrations.join("; ")
        ));
        for warning in &trace.warnings {
            out.push_str(&format!(
                "<p class=\"warning\">warning: {}</p>\n",
                escape(warning)
            ));
        }
        if trace.bill.total.responses > 0 {
            out.push_str(&bill_table(&trace.bill, report.show_dollars));
        }
        out.push_str(&chart_figure(trace)?);
        out.push_str(&policy_table(&trace.policies, report.show_dollars));
        out.push_str("</section>\n");
    }
    out.push_str(SCRIPT);
    out.push_str("</body></html>\n");
    Ok(out)
}

/// One session's legend, chart and hover data.
fn chart_figure(trace: &TraceReport) -> Result<String, String> {
    let drawn = draw(trace)?;
    let mut out = String::from("<ul class=\"legend\">");
    for series in &trace.series {
        let line = style(&series.name);
        out.push_str(&format!(
            "<li>{}{}</li>",
            line.swatch(),
            escape(&series.name)
        ));
    }
    for (label, value, line) in limits(trace) {
        out.push_str(&format!(
            "<li>{}{label} {}</li>",
            line.swatch(),
            group_thousands(value)
        ));
    }
    out.push_str("<li><svg width=\"10\" height=\"10\" aria-hidden=\"true\"><circle cx=\"5\" cy=\"5\" r=\"4\" fill=\"#444\"/></svg>a compaction</li></ul>\n");
    let data = serde_json::json!({
        "width": WIDTH,
        "steps": drawn.steps,
        "x0": drawn.x_pixels.0,
        "x1": drawn.x_pixels.1,
        "series": trace.series.iter().map(|series| serde_json::json!({
            "name": escape(&series.name),
            "color": style(&series.name).hex(),
            "tokens": series.tokens,
            "compactions": series.compactions,
        })).collect::<Vec<_>>(),
    });
    // `<` never appears raw inside the script element.
    let data = data.to_string().replace('<', "\\u003c");
    out.push_str(&format!(
        "<figure class=\"chart\" aria-label=\"input tokens per recorded request under each policy\">{}<div class=\"rule\"></div><div class=\"tip\"></div><script type=\"application/json\">{data}</script></figure>\n",
        drawn.svg
    ));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::report::Series;
    use super::*;

    #[test]
    fn the_fidelity_table_explains_each_column() {
        let mut soba = PolicyStats::new("soba");
        soba.fidelity.kept = [3, 0, 1, 0, 2];
        soba.fidelity.items = [4, 0, 1, 0, 8];
        let table = fidelity_table(&[soba]);
        assert!(table.contains("<h2>What each policy keeps</h2>"));
        assert!(table.contains("<td title=\"3 of 4\">0.750</td><td>n/a</td><td title=\"1 of 1\">1.000</td><td>n/a</td><td title=\"2 of 8\">0.250</td>"));
        for meaning in FIDELITY_MEANINGS {
            assert!(table.contains(&escape(meaning)), "{meaning}");
        }
        assert_eq!(fidelity_table(&[PolicyStats::new("none")]), "");
    }

    #[test]
    fn the_page_holds_a_chart_with_every_policy_markers_and_limits() {
        let trace = TraceReport {
            trace: "t.jsonl".into(),
            format: "pi-v1".into(),
            model: "claude-sonnet-4-5".into(),
            window: 200_000,
            max_output: 32_000,
            soba_limits: Some((159_808, 80_000)),
            recorded_requests: 4,
            policies: vec![PolicyStats::new("none"), PolicyStats::new("soba")],
            series: vec![
                Series {
                    name: "none".into(),
                    tokens: vec![Some(10_000), Some(90_000), Some(120_000), Some(150_000)],
                    compactions: vec![],
                },
                Series {
                    name: "soba".into(),
                    tokens: vec![Some(10_000), Some(90_000), Some(30_000), None],
                    compactions: vec![2],
                },
            ],
            ..TraceReport::default()
        };
        let report = ReplayReport {
            traces: vec![trace],
            totals: vec![PolicyStats::new("none"), PolicyStats::new("soba")],
            cache_ttl: 300,
            summarizer_price: 0.33,
            ..ReplayReport::default()
        };
        let page = html(&report).unwrap();
        assert!(page.starts_with("<!DOCTYPE html>"));
        // One chart (the legend's samples are small SVGs of their own).
        assert_eq!(page.matches("<figure class=\"chart\"").count(), 1);
        assert_eq!(page.matches("<svg width=\"1100\"").count(), 1);
        for label in [
            "none",
            "soba",
            "window 200,000",
            "SOBA hardLimit 159,808",
            "SOBA autoLimit 80,000",
        ] {
            assert!(page.contains(label), "{label}");
        }
        // One compaction marker, and the legend's sample of one.
        assert_eq!(page.matches("<circle").count(), 2);
        assert!(page.contains("TTL 300 s"));
        // The hover read-out has every request of every policy.
        assert!(
            page.contains("\"tokens\":[10000,90000,30000,null]"),
            "{page}"
        );
        // One session: no per-day or per-project tables.
        assert!(!page.contains("By day"));
    }

    #[test]
    fn outside_text_cannot_break_out_of_the_page() {
        let hostile = "m\u{202e}<script>alert(1)</script>\u{85}'\"";
        let trace = TraceReport {
            trace: format!("/x/{hostile}.jsonl"),
            format: "pi-v1".into(),
            model: hostile.into(),
            project: Some(hostile.into()),
            window: 1_000,
            policies: vec![PolicyStats::new("none")],
            series: vec![Series {
                name: "none".into(),
                tokens: vec![Some(1)],
                compactions: vec![],
            }],
            warnings: vec![hostile.into()],
            ..TraceReport::default()
        };
        let mut skipped = TraceReport::skipped("/x/y</h3>".into(), None, hostile.into());
        skipped.agent = "pi".into();
        let report = ReplayReport {
            traces: vec![trace.clone(), trace, skipped],
            show_dollars: true,
            ..ReplayReport::default()
        };
        let page = html(&report).unwrap();
        assert!(
            !page.contains("<script>alert"),
            "raw markup from a transcript"
        );
        assert!(
            !page.contains('\u{202e}'),
            "a bidi override reached the page"
        );
        assert!(!page.contains('\u{85}'), "a C1 control reached the page");
        assert!(page.contains("&lt;script&gt;"));
        assert!(page.contains("y&lt;/h3&gt;"));
    }
}
