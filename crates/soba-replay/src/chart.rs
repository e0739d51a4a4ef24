//! `--html report.html`: one self-contained page with the totals, the
//! real-summary comparison, the calibration of each trace and, per trace,
//! an SVG chart (plotters' SVG backend into a string) of the input tokens
//! of every request under every policy, with compaction markers and the
//! window and SOBA's limits as horizontal lines.

use plotters::prelude::*;
use soba_core::tokens::group_thousands;

use super::probe::PROBE_NAMES;
use super::report::{PolicyStats, ReplayReport, TraceReport};

/// The chart's size in pixels.
const WIDTH: u32 = 1_000;
const HEIGHT: u32 = 460;

/// Returns a stable color for a policy name.
fn color(name: &str) -> RGBColor {
    const COLORS: [(&str, RGBColor); 7] = [
        ("none", RGBColor(120, 120, 120)),
        ("soba", RGBColor(214, 39, 40)),
        ("claude-code", RGBColor(31, 119, 180)),
        ("codex", RGBColor(44, 160, 44)),
        ("pi", RGBColor(148, 103, 189)),
        ("opencode", RGBColor(255, 127, 14)),
        ("goose", RGBColor(23, 190, 207)),
    ];
    let base = name.split('@').next().unwrap_or(name);
    COLORS
        .iter()
        .find(|(policy, _)| *policy == base)
        .map_or(RGBColor(0, 0, 0), |(_, color)| *color)
}

/// Escapes text for HTML.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Returns the SVG chart of one trace.
pub fn trace_svg(trace: &TraceReport) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let steps = trace
            .series
            .iter()
            .map(|series| series.tokens.len())
            .max()
            .unwrap_or(0)
            .max(1);
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
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(72)
            .caption("input tokens per request", ("sans-serif", 16))
            .build_cartesian_2d(0usize..steps, 0u64..y_max)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("recorded request")
            .y_desc("input tokens")
            .y_label_formatter(&|v| group_thousands(*v))
            .light_line_style(WHITE)
            .draw()
            .map_err(|e| e.to_string())?;
        let mut limits = vec![("window", trace.window, RGBColor(0, 0, 0))];
        if let Some((hard, auto)) = trace.soba_limits {
            limits.push(("SOBA hardLimit", hard, RGBColor(214, 39, 40)));
            limits.push(("SOBA autoLimit", auto, RGBColor(250, 150, 150)));
        }
        for (label, value, line_color) in limits {
            chart
                .draw_series(LineSeries::new(
                    [(0usize, value), (steps, value)],
                    line_color.stroke_width(1),
                ))
                .map_err(|e| e.to_string())?
                .label(format!("{label} {}", group_thousands(value)))
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], line_color));
        }
        for series in &trace.series {
            let line_color = color(&series.name);
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
            let mut first = true;
            for segment in segments.into_iter().filter(|s| !s.is_empty()) {
                let drawn = chart
                    .draw_series(LineSeries::new(segment, line_color.stroke_width(2)))
                    .map_err(|e| e.to_string())?;
                if first {
                    drawn.label(series.name.clone()).legend(move |(x, y)| {
                        PathElement::new([(x, y), (x + 16, y)], line_color.stroke_width(2))
                    });
                    first = false;
                }
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
                        .map(|point| Circle::new(point, 4, line_color.filled())),
                )
                .map_err(|e| e.to_string())?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperMiddle)
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

fn ratio(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_owned(), |v| format!("{v:.3}"))
}

fn policy_rows(policies: &[PolicyStats]) -> String {
    let mut out = String::from(
        "<table><tr><th>policy</th><th>requests</th><th>overWindow</th><th>compactions</th>\
         <th>peak</th><th>mean</th><th>summarizer in</th><th>summarizer out</th><th>billed-eq.</th>\
         <th>recall mean</th><th>recall min</th><th>resends</th><th>calls</th><th>rejected</th>\
         <th>hygiene</th>",
    );
    for name in PROBE_NAMES {
        out.push_str(&format!("<th>{name}</th>"));
    }
    out.push_str("</tr>\n");
    for stats in policies {
        out.push_str(&format!(
            "<tr><td style=\"color:#{:02x}{:02x}{:02x}\">{}</td>",
            color(&stats.name).0,
            color(&stats.name).1,
            color(&stats.name).2,
            escape(&stats.name)
        ));
        for cell in [
            group_thousands(stats.requests),
            group_thousands(stats.over_window),
            group_thousands(stats.compactions),
            group_thousands(stats.peak_input_tokens),
            group_thousands(stats.mean_input_tokens()),
            group_thousands(stats.summarizer_input_tokens),
            group_thousands(stats.summarizer_output_tokens),
            group_thousands(stats.billed_equivalent_tokens.round() as u64),
            ratio(stats.recall_mean()),
            ratio(stats.recall_min),
            group_thousands(stats.resends),
            group_thousands(stats.summarizer_calls),
            group_thousands(stats.rejected_capsules),
            group_thousands(stats.hygiene_passes),
        ] {
            out.push_str(&format!("<td>{cell}</td>"));
        }
        for idx in 0..PROBE_NAMES.len() {
            out.push_str(&format!("<td>{}</td>", ratio(stats.probe_mean(idx))));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    out
}

/// Returns the whole HTML page.
pub fn html(report: &ReplayReport) -> Result<String, String> {
    let mut out = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>soba replay</title><style>\
         body{font-family:system-ui,sans-serif;margin:2em;color:#222}\
         table{border-collapse:collapse;margin:1em 0;font-size:13px}\
         td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}\
         td:first-child,th:first-child{text-align:left}\
         h2{margin-top:2em}.skipped{color:#a00}svg{max-width:100%;height:auto}</style></head><body>\n<h1>soba replay</h1>\n",
    );
    out.push_str(&format!(
        "<p>{} trace(s) replayed, {} skipped · cache {} · TTL {} · summarizer price {}{}</p>\n",
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
    out.push_str("<h2>All traces</h2>\n");
    out.push_str(&policy_rows(&report.totals));
    if !report.real_summaries.is_empty() {
        out.push_str("<h2>Recorded compactions vs SOBA capsules</h2>\n<table><tr><th>trace</th><th>entry</th><th>who</th><th>tokens</th>");
        for name in PROBE_NAMES {
            out.push_str(&format!("<th>{name}</th>"));
        }
        out.push_str("<th>mean</th></tr>\n");
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
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td>",
                    escape(&summary.trace),
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
        out.push_str("</table>\n");
    }
    for trace in &report.traces {
        out.push_str(&format!("<h2>{}</h2>\n", escape(&trace.trace)));
        if let Some(reason) = &trace.skipped {
            out.push_str(&format!(
                "<p class=\"skipped\">skipped: {}</p>\n",
                escape(reason)
            ));
            continue;
        }
        out.push_str(&format!(
            "<p>{} · model {} · window {} · max output {} · cache {} · {} recorded requests</p>\n",
            escape(&trace.format),
            escape(&trace.model),
            group_thousands(trace.window),
            group_thousands(trace.max_output),
            trace.cache.map_or("none", |c| c.as_str()),
            trace.recorded_requests
        ));
        out.push_str("<p>calibration: ");
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
        out.push_str(&calibrations.join("; "));
        out.push_str("</p>\n");
        out.push_str(&trace_svg(trace)?);
        out.push('\n');
        out.push_str(&policy_rows(&trace.policies));
    }
    out.push_str("</body></html>\n");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::report::Series;
    use super::*;

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
        assert_eq!(page.matches("<svg").count(), 1);
        for label in [
            "none",
            "soba",
            "window 200,000",
            "SOBA hardLimit 159,808",
            "SOBA autoLimit 80,000",
        ] {
            assert!(page.contains(label), "{label}");
        }
        // One compaction marker.
        assert_eq!(page.matches("<circle").count(), 1);
        assert!(page.contains("TTL 300 s"));
    }
}
