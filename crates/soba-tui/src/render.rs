//! Drawing: a pure function from [`AppState`] to a ratatui frame, so every
//! screen can be snapshot-tested on a `TestBackend`. Layout: conversation
//! pane, sidebar (hidden below [`SIDEBAR_MIN_WIDTH`] columns), status line
//! and input box, with modal boxes over the conversation.
//!
//! Text reaches the screen through [`wrap`], [`truncate_to`] and
//! [`input_layout`], which pass it through `soba_core::terminal` (tool
//! output with escape sequences is shown as `\x1b[…`), and [`render`] ends
//! by [`scrub`]bing the frame, so a cell that still holds a control, bidi
//! or format character (a span built elsewhere) is drawn as `�` instead of
//! reaching the terminal.

use ratatui::Frame;
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Direction, Layout, Position, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use soba_core::facts::PlanStatus;
use soba_core::terminal::{self, Line as SafeLine};
use soba_core::tokens::group_thousands;
use unicode_width::UnicodeWidthChar;

use super::preview::{DiffKind, DiffLine};
use super::state::{
    Activity, AppState, ApprovalView, HistoryItem, Overlay, Picker, RewindPlan, ToolOutput,
};

/// Below this width the sidebar is hidden and the context figure moves to
/// the conversation's title.
pub const SIDEBAR_MIN_WIDTH: u16 = 80;
/// The sidebar's width, borders included.
const SIDEBAR_WIDTH: u16 = 30;
/// The input box never grows beyond this many text lines.
const INPUT_MAX_LINES: usize = 6;

/// The status line during a barrier before a response (SPEC §11.2).
pub fn barrier_text(percent: u8, idle: bool) -> String {
    if idle {
        format!("Compacting context · {percent}%")
    } else {
        format!("Compacting context before response · {percent}%")
    }
}

/// Draws the whole screen.
pub fn render(frame: &mut Frame<'_>, state: &AppState) {
    let area = frame.area();
    if area.width < 10 || area.height < 6 {
        frame.render_widget(Paragraph::new("soba: terminal too small"), area);
        return;
    }
    let input_width = area.width.saturating_sub(2).max(1) as usize;
    let (input_lines, cursor) = input_layout(&state.input.text, state.input.cursor, input_width);
    let input_height = input_lines.len().clamp(1, INPUT_MAX_LINES) as u16 + 2;
    let rows = Layout::default()
        .direction(Direction::Vertical)
        .constraints([
            Constraint::Min(3),
            Constraint::Length(1),
            Constraint::Length(input_height),
        ])
        .split(area);
    let (body, status, input) = (rows[0], rows[1], rows[2]);
    let show_sidebar = area.width >= SIDEBAR_MIN_WIDTH;
    let conversation = if show_sidebar {
        let cols = Layout::default()
            .direction(Direction::Horizontal)
            .constraints([Constraint::Min(20), Constraint::Length(SIDEBAR_WIDTH)])
            .split(body);
        render_sidebar(frame, state, cols[1]);
        cols[0]
    } else {
        body
    };
    render_conversation(frame, state, conversation, !show_sidebar);
    render_status(frame, state, status);
    render_input(frame, state, input, &input_lines, cursor);
    if let Some(overlay) = &state.overlay {
        // A picker spans the sidebar too: its rows end with each session's
        // first prompt, which a 76-column box cut to a few words.
        let over = if matches!(overlay, Overlay::Picker(_)) {
            body
        } else {
            conversation
        };
        render_overlay(frame, overlay, over);
    }
    scrub(frame.buffer_mut());
}

/// Replaces every cell whose symbol a terminal would act on (or that would
/// reorder or hide text) with `�`: the last guard before the terminal.
pub fn scrub(buffer: &mut Buffer) {
    for cell in &mut buffer.content {
        if !terminal::is_safe(cell.symbol()) || cell.symbol().contains(['\n', '\t']) {
            cell.set_symbol("\u{fffd}");
        }
    }
}

fn dim() -> Style {
    Style::default().fg(Color::DarkGray)
}

fn title_text(state: &AppState, narrow: bool) -> String {
    if narrow && state.sidebar.hard_limit > 0 {
        // The sidebar is hidden: the context figure comes first so that a
        // long model id is what gets cut.
        return format!(
            " {} / {} · {} ",
            group_thousands(state.sidebar.effective),
            group_thousands(state.sidebar.hard_limit),
            SafeLine(&state.header.model)
        );
    }
    if state.header.model.is_empty() {
        return " soba · no session open ".to_owned();
    }
    let mut title = format!(" soba · {}", SafeLine(&state.header.model));
    if !state.header.session.is_empty() {
        title.push_str(&format!(" · session {}", SafeLine(&state.header.session)));
    }
    title.push(' ');
    title
}

/// Returns the conversation's lines wrapped to `width`.
pub fn conversation_lines(state: &AppState, width: usize) -> Vec<Line<'static>> {
    let mut lines: Vec<Line<'static>> = Vec::new();
    let mut notes = state.notes.iter().peekable();
    let mut push_notes = |anchor: usize, lines: &mut Vec<Line<'static>>| {
        while let Some((_, text)) = notes.next_if(|(at, _)| *at <= anchor) {
            if lines.last().is_some_and(|line| !line.spans.is_empty()) {
                lines.push(Line::default());
            }
            for row in wrap(text, width.saturating_sub(2)) {
                lines.push(Line::from(Span::styled(
                    format!("  {row}"),
                    Style::default().fg(Color::Yellow),
                )));
            }
            lines.push(Line::default());
        }
    };
    push_notes(0, &mut lines);
    for (idx, item) in state.history.iter().enumerate() {
        let separated = lines.last().is_none_or(|line| line.spans.is_empty());
        if matches!(item, HistoryItem::User(_) | HistoryItem::Assistant(_)) && !separated {
            lines.push(Line::default());
        }
        match item {
            HistoryItem::User(text) => {
                for (n, row) in wrap(text, width.saturating_sub(2)).into_iter().enumerate() {
                    let prefix = if n == 0 { "› " } else { "  " };
                    lines.push(Line::from(vec![
                        Span::styled(prefix, Style::default().fg(Color::Cyan)),
                        Span::styled(row, Style::default().add_modifier(Modifier::BOLD)),
                    ]));
                }
                lines.push(Line::default());
            }
            HistoryItem::Assistant(text) => {
                for row in wrap(text, width.saturating_sub(2)) {
                    lines.push(Line::from(format!("  {row}")));
                }
                lines.push(Line::default());
            }
            HistoryItem::Tool {
                line,
                is_error,
                output,
                diff,
            } => {
                let style = if *is_error {
                    Style::default().fg(Color::Red)
                } else {
                    Style::default().fg(Color::Blue)
                };
                let marker = if state.expand_tools { "▾" } else { "▸" };
                // A call the approval box is asking about has not started.
                let line = match (&state.overlay, line.strip_suffix(" (running…)")) {
                    (Some(Overlay::Approval(_)), Some(call)) => {
                        format!("{call} (waiting for your answer)")
                    }
                    _ => line.clone(),
                };
                let row = truncate_to(&format!("  {marker} {line}"), width);
                lines.push(Line::from(Span::styled(row, style)));
                if !diff.is_empty() {
                    lines.extend(change_lines(diff, state.expand_tools, width));
                }
                if state.expand_tools
                    && let Some(output) = output
                {
                    lines.extend(output_lines(output, width));
                }
            }
            HistoryItem::Event(text) => {
                for (n, row) in wrap(text, width.saturating_sub(4)).into_iter().enumerate() {
                    let prefix = if n == 0 { "  · " } else { "    " };
                    lines.push(Line::from(Span::styled(
                        format!("{prefix}{row}"),
                        dim().add_modifier(Modifier::ITALIC),
                    )));
                }
            }
        }
        push_notes(idx + 1, &mut lines);
    }
    if !state.streaming.is_empty() {
        let text = format!("{}▍", state.streaming);
        for row in wrap(&text, width.saturating_sub(2)) {
            lines.push(Line::from(format!("  {row}")));
        }
        lines.push(Line::default());
    } else if state.activity == Activity::Turn && state.barrier.is_none() {
        lines.push(Line::from(Span::styled("  … working", dim())));
    }
    for queued in &state.queue {
        let text = format!("queued: {queued}");
        for (n, row) in wrap(&text, width.saturating_sub(4)).into_iter().enumerate() {
            let prefix = if n == 0 { "  ⏸ " } else { "    " };
            lines.push(Line::from(Span::styled(format!("{prefix}{row}"), dim())));
        }
    }
    while lines.last().is_some_and(|line| line.spans.is_empty()) {
        lines.pop();
    }
    lines
}

/// The lines of a file change shown under its tool line while tool
/// output is folded.
pub const FOLDED_CHANGE_LINES: usize = 8;

/// Returns a file change's lines under a `│` gutter: `-` red, `+` green,
/// context plain, notes dim; the first [`FOLDED_CHANGE_LINES`] unless
/// `expanded`, then how many more Ctrl-O shows.
fn change_lines(diff: &[DiffLine], expanded: bool, width: usize) -> Vec<Line<'static>> {
    let gutter = Span::styled("    │ ", dim());
    let shown = if expanded {
        diff.len()
    } else {
        diff.len().min(FOLDED_CHANGE_LINES)
    };
    let mut lines: Vec<Line<'static>> = diff[..shown]
        .iter()
        .map(|DiffLine { kind, text }| {
            let (mark, style) = match kind {
                DiffKind::Context => (' ', Style::default()),
                DiffKind::Removed => ('-', Style::default().fg(Color::Red)),
                DiffKind::Added => ('+', Style::default().fg(Color::Green)),
                DiffKind::Note => (' ', dim().add_modifier(Modifier::ITALIC)),
            };
            let row = truncate_to(
                &format!("{mark} {}", expand_tabs(text)),
                width.saturating_sub(6),
            );
            Line::from(vec![gutter.clone(), Span::styled(row, style)])
        })
        .collect();
    if shown < diff.len() {
        lines.push(Line::from(vec![
            gutter,
            Span::styled(
                format!(
                    "… {} more lines (Ctrl-O shows them)",
                    group_thousands((diff.len() - shown) as u64)
                ),
                dim(),
            ),
        ]));
    }
    lines
}

/// Returns a tool result's lines as the expanded view shows them, under
/// a `│` gutter, wrapped and escaped.
fn output_lines(output: &ToolOutput, width: usize) -> Vec<Line<'static>> {
    let gutter = Span::styled("    │ ", dim());
    let mut lines = Vec::new();
    for text in &output.lines {
        for row in wrap(text, width.saturating_sub(6)) {
            lines.push(Line::from(vec![gutter.clone(), Span::raw(row)]));
        }
    }
    if output.lines.is_empty() {
        lines.push(Line::from(vec![
            gutter.clone(),
            Span::styled("(no output)", dim()),
        ]));
    }
    if output.more_lines > 0 {
        lines.push(Line::from(vec![
            gutter,
            Span::styled(
                format!("… {} more lines", group_thousands(output.more_lines as u64)),
                dim(),
            ),
        ]));
    }
    lines
}

fn render_conversation(frame: &mut Frame<'_>, state: &AppState, area: Rect, narrow: bool) {
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(dim())
        .title(Span::styled(
            title_text(state, narrow),
            Style::default().add_modifier(Modifier::BOLD),
        ));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let lines = conversation_lines(state, inner.width as usize);
    let height = inner.height as usize;
    let max_scroll = lines.len().saturating_sub(height);
    let scroll = state.scroll.min(max_scroll);
    let end = lines.len() - scroll;
    let start = end.saturating_sub(height);
    let visible: Vec<Line<'static>> = lines[start..end].to_vec();
    frame.render_widget(Paragraph::new(visible), inner);
}

/// Returns the context bar: `width` cells filled up to effective/hardLimit,
/// with the autoLimit (`┃`) and hygieneLimit (`╎`) positions marked.
pub fn context_bar(sidebar: &super::state::Sidebar, width: usize) -> Line<'static> {
    if width == 0 || sidebar.hard_limit == 0 {
        return Line::default();
    }
    let cell = |tokens: u64| -> usize {
        ((u128::from(tokens) * width as u128) / u128::from(sidebar.hard_limit)) as usize
    };
    let filled = cell(sidebar.effective).min(width);
    let auto = cell(sidebar.auto_limit).min(width - 1);
    let hygiene = cell(sidebar.hygiene_limit).min(width - 1);
    let fill_color = if sidebar.effective >= sidebar.auto_limit {
        Color::Red
    } else if sidebar.effective >= sidebar.hygiene_limit {
        Color::Yellow
    } else {
        Color::Green
    };
    let spans: Vec<Span<'static>> = (0..width)
        .map(|idx| {
            if idx == auto {
                Span::styled("┃", Style::default().fg(Color::Magenta))
            } else if idx == hygiene {
                Span::styled("╎", Style::default().fg(Color::Cyan))
            } else if idx < filled {
                Span::styled("█", Style::default().fg(fill_color))
            } else {
                Span::styled("░", dim())
            }
        })
        .collect();
    Line::from(spans)
}

fn render_sidebar(frame: &mut Frame<'_>, state: &AppState, area: Rect) {
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(dim())
        .title(" context ");
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let width = inner.width as usize;
    let side = &state.sidebar;
    if side.hard_limit == 0 {
        // No session is open yet (the `soba -r` picker at launch): no
        // figures to show, rather than zeros.
        frame.render_widget(
            Paragraph::new(vec![
                Line::from(Span::styled("no session open yet", dim())),
                Line::from(Span::styled("choose one, or a new session", dim())),
            ]),
            inner,
        );
        return;
    }
    let percent = (u128::from(side.effective) * 100)
        .checked_div(u128::from(side.hard_limit))
        .unwrap_or(0);
    let label = |name: &str, value: u64| {
        Line::from(vec![
            Span::styled(format!("{name:<9}"), dim()),
            Span::raw(group_thousands(value)),
        ])
    };
    let mut lines = vec![
        Line::from(Span::styled(
            format!("{} tokens", group_thousands(side.effective)),
            Style::default().add_modifier(Modifier::BOLD),
        )),
        Line::from(Span::styled(
            format!(
                "{percent}% of hardLimit {}",
                group_thousands(side.hard_limit)
            ),
            dim(),
        )),
        context_bar(side, width),
        Line::from(vec![
            Span::styled("┃", Style::default().fg(Color::Magenta)),
            Span::raw(format!(" auto    {}", group_thousands(side.auto_limit))),
        ]),
        Line::from(vec![
            Span::styled("╎", Style::default().fg(Color::Cyan)),
            Span::raw(format!(" hygiene {}", group_thousands(side.hygiene_limit))),
        ]),
        label("soft", side.soft_limit),
        Line::from(vec![
            Span::styled(format!("{:<9}", "source"), dim()),
            Span::raw(terminal::sanitize_line(&side.source).into_owned()),
        ]),
    ];
    if let Some(note) = &side.source_note {
        lines.extend(
            wrap(&format!("({note})"), width)
                .into_iter()
                .map(|row| Line::from(Span::styled(row, dim()))),
        );
    }
    lines.extend([
        Line::from(vec![
            Span::styled("auto-compact ", dim()),
            Span::raw(if side.auto_compact { "on" } else { "off" }),
        ]),
        Line::default(),
        Line::from(Span::styled("last compaction", dim())),
    ]);
    match &side.last_compaction {
        Some(text) => lines.extend(wrap(text, width).into_iter().map(Line::from)),
        None => lines.push(Line::from("(none)")),
    }
    if !side.plan.is_empty() {
        lines.push(Line::default());
        lines.push(Line::from(Span::styled("plan", dim())));
        for item in &side.plan {
            let (mark, style) = match item.status {
                PlanStatus::Completed => ("✓ ", dim()),
                PlanStatus::InProgress => ("▸ ", Style::default().add_modifier(Modifier::BOLD)),
                PlanStatus::Pending => ("· ", Style::default()),
            };
            let text = truncate_to(&format!("{mark}{}", item.text.trim()), width);
            lines.push(Line::from(Span::styled(text, style)));
        }
    }
    if !state.queue.is_empty() {
        lines.push(Line::default());
        lines.push(Line::from(Span::styled(
            format!("{} queued", state.queue.len()),
            Style::default().fg(Color::Yellow),
        )));
    }
    frame.render_widget(Paragraph::new(lines), inner);
}

fn render_status(frame: &mut Frame<'_>, state: &AppState, area: Rect) {
    let width = area.width as usize;
    let line = if let Some((percent, idle)) = state.barrier {
        Line::from(Span::styled(
            truncate_to(&format!(" {}", barrier_text(percent, idle)), width),
            Style::default()
                .fg(Color::Yellow)
                .add_modifier(Modifier::BOLD),
        ))
    } else if let Some(retry) = &state.retry {
        Line::from(Span::styled(
            truncate_to(&format!(" {retry}"), width),
            Style::default().fg(Color::Yellow),
        ))
    } else if let Some(result) = &state.result_line {
        let color = if result.warn {
            Color::Yellow
        } else {
            Color::Green
        };
        Line::from(Span::styled(
            truncate_to(&format!(" {}", result.text), width),
            Style::default().fg(color),
        ))
    } else {
        Line::default()
    };
    frame.render_widget(Paragraph::new(line), area);
}

fn render_input(
    frame: &mut Frame<'_>,
    state: &AppState,
    area: Rect,
    input_lines: &[String],
    cursor: (usize, usize),
) {
    let title = match state.activity {
        Activity::Idle => {
            " message · /help · Tab completes · ↑↓ history · Ctrl-O tool output ".to_owned()
        }
        Activity::Turn => " message · turn running: Enter queues, Esc cancels ".to_owned(),
        Activity::Compact => " message · compacting: Enter queues, Esc cancels ".to_owned(),
    };
    let mut block = Block::default()
        .borders(Borders::ALL)
        .border_style(Style::default().fg(if state.is_busy() {
            Color::Yellow
        } else {
            Color::Cyan
        }))
        .title(title);
    if let Some(hint) = &state.hint {
        block = block.title_bottom(Span::styled(
            format!(" {} ", SafeLine(hint)),
            Style::default().fg(Color::Yellow),
        ));
    }
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let height = inner.height as usize;
    let first = (cursor.0 + 1).saturating_sub(height);
    let visible: Vec<Line<'static>> = input_lines
        .iter()
        .skip(first)
        .take(height)
        .map(|row| Line::from(row.clone()))
        .collect();
    frame.render_widget(Paragraph::new(visible), inner);
    if state.overlay.is_none() && inner.width > 0 && inner.height > 0 {
        let col = (cursor.1 as u16).min(inner.width - 1);
        let row = (cursor.0.saturating_sub(first) as u16).min(inner.height - 1);
        frame.set_cursor_position(Position::new(inner.x + col, inner.y + row));
    }
}

fn render_overlay(frame: &mut Frame<'_>, overlay: &Overlay, area: Rect) {
    // A picker's rows end with a session's title: it takes the
    // terminal's width, the other boxes stay narrow.
    let widest = if matches!(overlay, Overlay::Picker(_)) {
        u16::MAX
    } else {
        76
    };
    let width = area.width.saturating_sub(4).clamp(10, widest);
    let text_width = width.saturating_sub(2) as usize;
    let (title, lines): (String, Vec<Line<'static>>) = match overlay {
        Overlay::Approval(view) => {
            let scope_rows = wrap(
                &format!("always: {}", view.scope),
                text_width.saturating_sub(4),
            )
            .len();
            // The keys always show; the command gets what is left, with its
            // blank runs folded and its last lines kept, so nothing can hide
            // below the box.
            let summary_room = (area.height as usize)
                .saturating_sub(2 + 1 + 2 + scope_rows + 1)
                .max(3);
            let mut lines: Vec<Line<'static>> = summary_rows(
                wrap(&view.summary, text_width.saturating_sub(2)),
                summary_room,
            )
            .into_iter()
            .map(|(row, marker)| {
                if marker {
                    Line::from(Span::styled(
                        format!("  {row}"),
                        Style::default().fg(Color::Yellow),
                    ))
                } else {
                    Line::from(Span::styled(
                        format!("  {row}"),
                        Style::default().add_modifier(Modifier::BOLD),
                    ))
                }
            })
            .collect();
            if !view.preview.is_empty() {
                // What fits: the box minus its borders, the summary, two
                // blank lines and the keys.
                let room =
                    (area.height as usize).saturating_sub(2 + lines.len() + 2 + 2 + scope_rows + 1);
                lines.push(Line::default());
                lines.extend(preview_lines(view, text_width, room));
            }
            lines.push(Line::default());
            lines.push(key_line("y", "run once"));
            for (n, row) in wrap(
                &format!("always: {}", view.scope),
                text_width.saturating_sub(4),
            )
            .into_iter()
            .enumerate()
            {
                if n == 0 {
                    lines.push(key_line("a", &row));
                } else {
                    lines.push(Line::from(format!("   {row}")));
                }
            }
            lines.push(key_line("n", "deny"));
            (format!(" Allow {}? ", SafeLine(&view.tool)), lines)
        }
        Overlay::Picker(picker) => picker_lines(picker, text_width, area.height),
        Overlay::ConfirmRewind(plan) => (
            " Rewind the conversation? ".to_owned(),
            confirm_lines(plan, text_width),
        ),
    };
    let height = (lines.len() as u16 + 2).min(area.height);
    let rect = Rect {
        x: area.x + (area.width.saturating_sub(width)) / 2,
        y: area.y + area.height.saturating_sub(height + 1),
        width: width.min(area.width),
        height,
    };
    // The rows the box covers are cleared across the whole area, inside
    // its borders: the margin beside a centred box showed the screen
    // beneath (a conversation's `›` beside the `/rewind` list's own).
    let top = rect.y.max(area.y + 1);
    let bottom = (rect.y + rect.height).min(area.bottom().saturating_sub(1));
    if bottom > top && area.width > 2 {
        frame.render_widget(
            Clear,
            Rect {
                x: area.x + 1,
                y: top,
                width: area.width - 2,
                height: bottom - top,
            },
        );
    }
    frame.render_widget(Clear, rect);
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(Style::default().fg(Color::Yellow))
        .title(Span::styled(
            title,
            Style::default().add_modifier(Modifier::BOLD),
        ));
    frame.render_widget(Paragraph::new(lines).block(block), rect);
}

/// Folds the rows of an approval's command to at most `room`: each run of
/// two or more blank rows becomes one `⋯ N blank lines` marker, and a
/// command still too long keeps its first and last rows around a
/// `⋯ N more lines` marker (the end of a command is where something would
/// hide). Returns each row and whether it is a marker.
pub(crate) fn summary_rows(rows: Vec<String>, room: usize) -> Vec<(String, bool)> {
    let mut folded: Vec<(String, bool)> = Vec::with_capacity(rows.len());
    let mut blank = 0usize;
    let flush = |folded: &mut Vec<(String, bool)>, blank: &mut usize| {
        match *blank {
            0 => {}
            1 => folded.push((String::new(), false)),
            n => folded.push((format!("⋯ {n} blank lines"), true)),
        }
        *blank = 0;
    };
    for row in rows {
        if row.trim().is_empty() {
            blank += 1;
        } else {
            flush(&mut folded, &mut blank);
            folded.push((row, false));
        }
    }
    flush(&mut folded, &mut blank);
    if folded.len() <= room {
        return folded;
    }
    let room = room.max(3);
    let tail = (room - 1) / 2;
    let head = room - 1 - tail;
    let hidden = folded.len() - head - tail;
    let mut out: Vec<(String, bool)> = folded[..head].to_vec();
    out.push((format!("⋯ {hidden} more lines"), true));
    out.extend_from_slice(&folded[folded.len() - tail..]);
    out
}

/// Returns the approval preview's lines: `-` red, `+` green, context
/// plain, notes dim; cut to `room` lines with "… N more lines".
fn preview_lines(view: &ApprovalView, width: usize, room: usize) -> Vec<Line<'static>> {
    if room == 0 {
        return Vec::new();
    }
    let shown = super::preview::bound(view.preview.clone(), room);
    shown
        .iter()
        .map(|DiffLine { kind, text }| {
            let (mark, style) = match kind {
                DiffKind::Context => (' ', Style::default()),
                DiffKind::Removed => ('-', Style::default().fg(Color::Red)),
                DiffKind::Added => ('+', Style::default().fg(Color::Green)),
                DiffKind::Note => (' ', dim().add_modifier(Modifier::ITALIC)),
            };
            let row = truncate_to(&format!("{mark} {}", expand_tabs(text)), width);
            Line::from(Span::styled(row, style))
        })
        .collect()
}

fn key_line(key: &str, text: &str) -> Line<'static> {
    Line::from(vec![
        Span::styled(
            format!(" {key} "),
            Style::default()
                .fg(Color::Yellow)
                .add_modifier(Modifier::BOLD),
        ),
        Span::raw(terminal::sanitize_line(text).into_owned()),
    ])
}

fn picker_lines(picker: &Picker, width: usize, height: u16) -> (String, Vec<Line<'static>>) {
    let note_rows = picker
        .note
        .as_ref()
        .map_or(0, |note| wrap(note, width).len());
    let header_rows = usize::from(picker.header.is_some());
    let room = (height as usize)
        .saturating_sub(4 + note_rows + header_rows)
        .max(1);
    let first = (picker.selected + 1).saturating_sub(room);
    let mut lines: Vec<Line<'static>> = picker
        .header
        .iter()
        .map(|header| {
            Line::from(Span::styled(
                truncate_to(&format!("  {header}"), width),
                dim(),
            ))
        })
        .collect();
    lines.extend(
        picker
            .items
            .iter()
            .enumerate()
            .skip(first)
            .take(room)
            .map(|(idx, item)| {
                let row = truncate_to(
                    &format!(
                        "{} {}",
                        if idx == picker.selected { "›" } else { " " },
                        item.label
                    ),
                    width,
                );
                if idx == picker.selected {
                    Line::from(Span::styled(
                        row,
                        Style::default().add_modifier(Modifier::REVERSED),
                    ))
                } else {
                    Line::from(row)
                }
            }),
    );
    if picker.items.is_empty() {
        lines.push(Line::from("(nothing to choose)"));
    }
    if let Some(note) = &picker.note {
        lines.extend(
            wrap(note, width)
                .into_iter()
                .map(|row| Line::from(Span::styled(row, dim()))),
        );
    }
    lines.push(Line::from(Span::styled(
        "↑/↓ choose · Enter select · Esc close",
        dim(),
    )));
    (format!(" {} ", SafeLine(&picker.title)), lines)
}

fn confirm_lines(plan: &RewindPlan, width: usize) -> Vec<Line<'static>> {
    let mut lines: Vec<Line<'static>> = Vec::new();
    for text in &plan.lines {
        lines.extend(wrap(text, width).into_iter().map(Line::from));
    }
    lines.push(Line::default());
    lines.push(key_line("y", "rewind (files on disk are not changed)"));
    lines.push(key_line("n", "keep going"));
    lines
}

/// Returns the display width of `text`.
pub fn text_width(text: &str) -> usize {
    text.chars().map(|ch| ch.width().unwrap_or(0)).sum()
}

/// Cuts `text` to `width` columns, ending in `…` when cut; it is shown as
/// one line ([`terminal::sanitize_line`]).
pub fn truncate_to(text: &str, width: usize) -> String {
    let text = terminal::sanitize_line(text);
    let text = text.as_ref();
    if text_width(text) <= width {
        return text.to_owned();
    }
    let mut out = String::new();
    let mut used = 0;
    for ch in text.chars() {
        let w = ch.width().unwrap_or(0);
        if used + w + 1 > width {
            break;
        }
        out.push(ch);
        used += w;
    }
    out.push('…');
    out
}

/// The columns a tab advances to the next multiple of.
pub const TAB_WIDTH: usize = 4;

/// Returns one line with each tab expanded to spaces, up to the next
/// multiple of [`TAB_WIDTH`] columns: the one tab rule of the screen (the
/// conversation, tool output, diffs).
pub fn expand_tabs(line: &str) -> std::borrow::Cow<'_, str> {
    if !line.contains('\t') {
        return std::borrow::Cow::Borrowed(line);
    }
    let mut out = String::with_capacity(line.len() + 8);
    let mut column = 0;
    for ch in line.chars() {
        if ch == '\t' {
            let n_spaces = TAB_WIDTH - column % TAB_WIDTH;
            out.extend(std::iter::repeat_n(' ', n_spaces));
            column += n_spaces;
        } else {
            out.push(ch);
            column += ch.width().unwrap_or(0);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Wraps `text` at word boundaries to `width` columns (long words are cut),
/// keeping its newlines and each line's indentation, which the rows a long
/// line wraps to keep too while it leaves half the width to the text; tabs
/// are expanded ([`expand_tabs`]) and other unsafe characters are shown
/// escaped ([`terminal::sanitize`]).
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut rows = Vec::new();
    for paragraph in terminal::sanitize(text).split('\n') {
        let line = expand_tabs(paragraph);
        let body = line.trim_start_matches(' ');
        let indent = " ".repeat((line.len() - body.len()).min(width / 2));
        let mut row = indent.clone();
        let mut row_width = indent.len();
        // Whether the row holds text after its indentation (a word, or the
        // empty word between two spaces).
        let mut has_text = false;
        for word in body.split(' ') {
            let word_width = text_width(word);
            let gap = usize::from(has_text);
            if row_width + gap + word_width <= width {
                if has_text {
                    row.push(' ');
                }
                row.push_str(word);
                row_width += gap + word_width;
                has_text = true;
                continue;
            }
            if has_text {
                rows.push(std::mem::replace(&mut row, indent.clone()));
                row_width = indent.len();
            }
            for ch in word.chars() {
                let w = ch.width().unwrap_or(0);
                if row_width + w > width && row_width > indent.len() {
                    rows.push(std::mem::replace(&mut row, indent.clone()));
                    row_width = indent.len();
                }
                row.push(ch);
                row_width += w;
            }
            has_text = true;
        }
        rows.push(row);
    }
    rows
}

/// Lays the input out hard-wrapped at `width`; returns the rows and the
/// cursor's (row, column). A pasted control or bidi character is shown as
/// its escape and counts as that many columns.
pub fn input_layout(text: &str, cursor: usize, width: usize) -> (Vec<String>, (usize, usize)) {
    let width = width.max(1);
    let mut rows = vec![String::new()];
    let mut col = 0;
    let mut at = (0, 0);
    for (idx, ch) in text.chars().enumerate() {
        if idx == cursor {
            at = (rows.len() - 1, col);
        }
        if ch == '\n' {
            rows.push(String::new());
            col = 0;
            continue;
        }
        let mut buf = [0u8; 4];
        let shown = terminal::sanitize_line(ch.encode_utf8(&mut buf));
        let w = text_width(&shown);
        if col + w > width {
            rows.push(String::new());
            col = 0;
            if idx == cursor {
                at = (rows.len() - 1, 0);
            }
        }
        if let Some(row) = rows.last_mut() {
            row.push_str(&shown);
        }
        col += w;
    }
    if cursor >= text.chars().count() {
        if col >= width {
            rows.push(String::new());
            col = 0;
        }
        at = (rows.len() - 1, col);
    }
    (rows, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_rows_fold_blank_runs_and_keep_the_end() {
        let rows = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            summary_rows(rows(&["a", "", "b", "", "", "", "c"]), 10),
            [
                ("a".to_owned(), false),
                (String::new(), false),
                ("b".to_owned(), false),
                ("⋯ 3 blank lines".to_owned(), true),
                ("c".to_owned(), false),
            ]
        );
        let long: Vec<String> = (0..10).map(|n| format!("l{n}")).collect();
        let shown: Vec<String> = summary_rows(long, 5)
            .into_iter()
            .map(|(row, _)| row)
            .collect();
        assert_eq!(shown, ["l0", "l1", "⋯ 6 more lines", "l8", "l9"]);
    }

    #[test]
    fn wrap_keeps_words_and_newlines() {
        assert_eq!(wrap("the quick brown fox", 9), ["the quick", "brown fox"]);
        assert_eq!(wrap("a\n\nb", 5), ["a", "", "b"]);
        assert_eq!(wrap("abcdefghij", 4), ["abcd", "efgh", "ij"]);
        assert_eq!(wrap("", 4), [""]);
        assert_eq!(wrap("日本語テキスト", 6), ["日本語", "テキス", "ト"]);
    }

    /// Issue 36 (first hour) item 3: a line's indentation stays (it was
    /// dropped from every wrapped text: an answer's code, a tool's output,
    /// a command to approve), on the rows a long line wraps to as well;
    /// tabs go to the next multiple of four columns.
    #[test]
    fn wrap_keeps_indentation_and_expands_tabs_alike() {
        assert_eq!(wrap("    let x = 1;", 40), ["    let x = 1;"]);
        assert_eq!(
            wrap("def f():\n\tif x:\n\t\treturn  1", 40),
            ["def f():", "    if x:", "        return  1"]
        );
        assert_eq!(wrap("    aaa bbb ccc", 11), ["    aaa bbb", "    ccc"]);
        assert_eq!(wrap("        deep", 8), ["    deep"]);
        assert_eq!(expand_tabs("ab\tc\td"), "ab  c   d");
        assert_eq!(expand_tabs("  \tx"), "    x");
    }

    #[test]
    fn input_layout_tracks_the_cursor() {
        assert_eq!(input_layout("abc", 3, 10), (vec!["abc".to_owned()], (0, 3)));
        assert_eq!(
            input_layout("abcd", 4, 4),
            (vec!["abcd".to_owned(), String::new()], (1, 0))
        );
        assert_eq!(
            input_layout("ab\ncd", 3, 10),
            (vec!["ab".to_owned(), "cd".to_owned()], (1, 0))
        );
        assert_eq!(
            input_layout("abcdef", 1, 3),
            (vec!["abc".to_owned(), "def".to_owned()], (0, 1))
        );
    }

    #[test]
    fn truncation_marks_the_cut() {
        assert_eq!(truncate_to("abcdef", 4), "abc…");
        assert_eq!(truncate_to("abc", 4), "abc");
    }

    #[test]
    fn bar_marks_the_limits() {
        let sidebar = super::super::state::Sidebar {
            effective: 5_000,
            hard_limit: 20_000,
            auto_limit: 16_000,
            hygiene_limit: 10_000,
            ..Default::default()
        };
        let line = context_bar(&sidebar, 20);
        let text: String = line
            .spans
            .iter()
            .map(|span| span.content.as_ref())
            .collect();
        assert_eq!(text, "█████░░░░░╎░░░░░┃░░░");
    }
}
