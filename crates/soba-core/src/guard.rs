//! Summary guards (SPEC §9.3): a bad summary is worse than none. LLM output
//! is normalised (trimmed, a wrapping code fence and echoed `END-OF-SUMMARY`
//! markers stripped), then rejected when the whole text is a placeholder,
//! shorter than 50 characters, not smaller than the span it replaces, or
//! missing one of the eight narrative headings. A valid summary is parsed
//! into a [`Narrative`].

use std::fmt;
use std::sync::OnceLock;

use regex::Regex;

use crate::capsule::{NARRATIVE_HEADINGS, Narrative};
use crate::render::split_sections;
use crate::tokens::{TokenCount, TokenCounter};

/// The marker the summarizer is asked to end with.
pub const END_MARKER: &str = "END-OF-SUMMARY";

/// Summaries shorter than this many characters (after normalisation) are
/// rejected.
pub const MIN_SUMMARY_CHARS: usize = 50;

/// The guard that rejected a summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Guard {
    /// The whole text is a placeholder such as `Generating…` or `加载中`.
    Placeholder,
    /// Fewer than [`MIN_SUMMARY_CHARS`] characters.
    TooShort,
    /// At least as many tokens as the span it would replace.
    NotSmaller,
    /// One of the eight headings is absent; carries the heading.
    MissingHeading(&'static str),
    /// More open-work items than [`crate::consistency::MAX_CORRECTIONS`]
    /// contradict the log ([`crate::consistency::check`]).
    Contradicted,
}

impl Guard {
    /// Returns the name recorded with a rejection: `placeholder`,
    /// `too_short`, `not_smaller`, `missing_heading:<heading>` (the heading
    /// in snake case: `missing_heading:next_steps`) or `contradicts_log`.
    pub fn name(&self) -> String {
        match self {
            Guard::Placeholder => "placeholder".to_owned(),
            Guard::TooShort => "too_short".to_owned(),
            Guard::NotSmaller => "not_smaller".to_owned(),
            Guard::Contradicted => "contradicts_log".to_owned(),
            Guard::MissingHeading(heading) => {
                format!(
                    "missing_heading:{}",
                    heading.to_ascii_lowercase().replace(' ', "_")
                )
            }
        }
    }
}

/// Why a summary was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardRejection {
    /// The guard that fired.
    pub guard: Guard,
    /// What it saw, for logs and flight records (never the summary text).
    pub detail: String,
}

impl GuardRejection {
    /// Returns the guard's name (see [`Guard::name`]).
    pub fn name(&self) -> String {
        self.guard.name()
    }
}

impl fmt::Display for GuardRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "summary rejected by the {} guard: {}",
            self.guard.name(),
            self.detail
        )
    }
}

impl std::error::Error for GuardRejection {}

fn marker_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"(?i)[ \t]*[*_`<\[(]*[ \t]*END[-_ ]OF[-_ ]SUMMARY[ \t]*[*_`>\])]*[ \t]*")
            .expect("constant regex compiles")
    })
}

/// Placeholder words, English and Chinese; a placeholder is a text made of
/// nothing but these, punctuation and spaces.
const PLACEHOLDER_WORD: &str = r"(?:(?:still|now|currently)\s+)?(?:generating|loading|summari[sz]ing|processing|thinking|working|compacting|writing|pending|waiting|in\s+progress|please\s+wait|wait|one\s+moment|tbd|tba|todo|to\s+do|n/?a|none|null|nil|undefined|empty|placeholder|coming\s+soon|no\s+summary(?:\s+(?:yet|available))?|summary|not\s+available|unavailable|\.\.\.)(?:\s+(?:the\s+)?(?:summary|conversation|context|history|capsule))?(?:\s+(?:in\s+progress|pending|yet))?|(?:正在|等待|稍后)?(?:生成|加载|載入|载入|總結|总结|摘要|处理|處理|思考|压缩|壓縮|整理)(?:中)?(?:摘要|总结|總結)?(?:中)?|待定|待补充|待生成|暂无(?:摘要|总结)?|無|无|空|请稍候|请稍等|請稍候|稍候|占位符?";

fn placeholder_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        let sep = r"[\s\p{P}\p{S}]*";
        let source =
            format!("(?i)^{sep}(?:{PLACEHOLDER_WORD})(?:{sep}(?:{PLACEHOLDER_WORD}))*{sep}$");
        Regex::new(&source).expect("constant regex compiles")
    })
}

/// Returns whether the WHOLE text is a placeholder shape (`Generating…`,
/// `loading`, `TBD`, `N/A`, `…`, `正在生成…`, …). A text that merely
/// mentions such a word is not one.
pub fn is_placeholder(text: &str) -> bool {
    let text = text.trim();
    !text.is_empty()
        && (!text.chars().any(char::is_alphanumeric) || placeholder_regex().is_match(text))
}

/// Strips a code fence wrapping the whole text (its closing line may be
/// missing when the output was cut).
fn strip_wrapping_fence(text: &str) -> &str {
    let Some(first_line_end) = text.find('\n') else {
        return text;
    };
    let opener = text[..first_line_end].trim();
    let fence_char = match opener.chars().next() {
        Some(c @ ('`' | '~')) => c,
        _ => return text,
    };
    let fence_len = opener.chars().take_while(|c| *c == fence_char).count();
    if fence_len < 3 || opener[fence_len..].contains(fence_char) {
        return text;
    }
    let inner = &text[first_line_end + 1..];
    let trimmed = inner.trim_end();
    let is_closer = |line: &str| {
        let line = line.trim();
        line.len() >= fence_len && line.chars().all(|c| c == fence_char)
    };
    let last_line_start = trimmed.rfind('\n').map_or(0, |idx| idx + 1);
    // Models nest fences of equal length: a fence with an info string
    // (```rust) opens an inner block that the next bare fence closes. A bare
    // fence outside such a block, before the last line, closes the first
    // one early: it was a code block inside the text, not a wrapper.
    let mut inner_open = false;
    for line in trimmed[..last_line_start].lines() {
        let stripped = line.trim();
        let has_info = stripped.starts_with(&opener[..fence_len]) && !is_closer(line);
        if is_closer(line) {
            if !inner_open {
                return text;
            }
            inner_open = false;
        } else if has_info && !inner_open {
            inner_open = true;
        }
    }
    if is_closer(&trimmed[last_line_start..]) {
        return &trimmed[..last_line_start];
    }
    inner
}

/// Normalises LLM output: trims it, strips echoed `END-OF-SUMMARY` markers
/// and a wrapping code fence (repeatedly, in any nesting), and trims again.
pub fn normalize(raw: &str) -> String {
    let mut text = raw.trim().to_owned();
    loop {
        let unmarked = marker_regex().replace_all(&text, "\n");
        let stripped = strip_wrapping_fence(unmarked.trim()).trim().to_owned();
        if stripped == text {
            return stripped;
        }
        text = stripped;
    }
}

/// Returns the canonical heading a `## ` line names, if it is one of the
/// eight (case-insensitive; surrounding `*`/`_` and a trailing `:` allowed).
pub fn narrative_heading(heading: &str) -> Option<&'static str> {
    let cleaned = heading
        .trim()
        .trim_end_matches(':')
        .trim()
        .trim_matches(['*', '_'])
        .trim()
        .trim_end_matches(':');
    NARRATIVE_HEADINGS
        .iter()
        .copied()
        .find(|known| known.eq_ignore_ascii_case(cleaned))
}

/// Parses the eight sections of a normalised summary. Text before the first
/// heading is dropped; a repeated heading appends to its section; other
/// `## ` headings stay inside the section they appear in.
pub fn parse_narrative(text: &str) -> Narrative {
    let mut narrative = Narrative::default();
    let mut current: Option<&'static str> = None;
    for section in split_sections(text) {
        let known = section.heading.as_deref().and_then(narrative_heading);
        let body = section.body.trim();
        let target = match (known, &section.heading) {
            (Some(heading), _) => {
                current = Some(heading);
                Some(heading)
            }
            (None, Some(other)) => {
                // An unknown heading stays in the running section, as text.
                if let Some(heading) = current
                    && let Some(slot) = narrative.section_mut(heading)
                {
                    let piece = if body.is_empty() {
                        format!("## {other}")
                    } else {
                        format!("## {other}\n{body}")
                    };
                    append(slot, &piece);
                }
                None
            }
            (None, None) => None,
        };
        if let Some(heading) = target
            && let Some(slot) = narrative.section_mut(heading)
        {
            append(slot, body);
        }
    }
    narrative
}

fn append(slot: &mut String, piece: &str) {
    if piece.is_empty() {
        return;
    }
    if !slot.is_empty() {
        slot.push_str("\n\n");
    }
    slot.push_str(piece);
}

/// Judges one LLM summary against a span of `span_tokens` tokens and parses
/// it, or names the first guard that rejects it (placeholder, too short,
/// not smaller, then each heading in order).
pub fn check_summary(
    raw: &str,
    span_tokens: TokenCount,
    counter: &dyn TokenCounter,
) -> Result<Narrative, GuardRejection> {
    let text = normalize(raw);
    if is_placeholder(&text) {
        return Err(GuardRejection {
            guard: Guard::Placeholder,
            detail: format!(
                "the whole output ({} characters) is a placeholder",
                text.chars().count()
            ),
        });
    }
    let n_chars = text.chars().count();
    if n_chars < MIN_SUMMARY_CHARS {
        return Err(GuardRejection {
            guard: Guard::TooShort,
            detail: format!(
                "{n_chars} characters after normalisation, fewer than {MIN_SUMMARY_CHARS}"
            ),
        });
    }
    let n_tokens = counter.count_text(&text).n;
    if n_tokens >= span_tokens {
        return Err(GuardRejection {
            guard: Guard::NotSmaller,
            detail: format!("{n_tokens} tokens, not fewer than the span's {span_tokens}"),
        });
    }
    let present: Vec<&'static str> = split_sections(&text)
        .iter()
        .filter_map(|section| section.heading.as_deref().and_then(narrative_heading))
        .collect();
    if let Some(missing) = NARRATIVE_HEADINGS
        .iter()
        .find(|heading| !present.contains(heading))
    {
        return Err(GuardRejection {
            guard: Guard::MissingHeading(missing),
            detail: format!("no `## {missing}` heading"),
        });
    }
    Ok(parse_narrative(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_fences_and_markers() {
        assert_eq!(
            normalize("```markdown\n## Goal\nx\n```\nEND-OF-SUMMARY"),
            "## Goal\nx"
        );
        assert_eq!(normalize("  END-OF-SUMMARY  "), "");
        assert_eq!(normalize("```\nEND-OF-SUMMARY\n```"), "");
        assert_eq!(normalize("text\n**END-OF-SUMMARY**"), "text");
        assert_eq!(normalize("text\n<END-OF-SUMMARY>"), "text");
    }

    #[test]
    fn placeholders_match_the_whole_string_only() {
        for text in [
            "Generating…",
            "loading...",
            "正在生成…",
            "Summary pending",
            "N/A",
            "…",
            "TBD.",
        ] {
            assert!(is_placeholder(text), "{text}");
        }
        for text in [
            "Loading the config failed in src/config.rs",
            "generating code for the parser",
        ] {
            assert!(!is_placeholder(text), "{text}");
        }
    }

    #[test]
    fn guard_names() {
        assert_eq!(
            Guard::MissingHeading("In progress").name(),
            "missing_heading:in_progress"
        );
        assert_eq!(Guard::TooShort.name(), "too_short");
    }

    #[test]
    fn headings_are_case_insensitive() {
        assert_eq!(narrative_heading("next STEPS"), Some("Next steps"));
        assert_eq!(narrative_heading("**Goal**:"), Some("Goal"));
        assert_eq!(narrative_heading("Goals"), None);
    }
}
