//! Go-on messages: a user message that only tells the agent to continue
//! carries no instruction of its own (SPEC §9.1).

/// Words a user types only to let the agent go on: a message made of
/// these alone says nothing the capsule has to keep.
const GO_ON_WORDS: &[&str] = &[
    "continue", "go", "on", "ahead", "keep", "going", "proceed", "carry", "next", "resume",
    "please", "pls", "ok", "okay", "yes", "y", "sure", "thanks", "thank", "you", "do", "it",
];

/// Returns whether `text` only tells the agent to go on (`continue`,
/// `go on`, `ok, keep going`, `please proceed.`): at most five words, each
/// one of `GO_ON_WORDS`, with at least one that is not a bare
/// acknowledgement (`yes` alone may answer a question and is kept).
pub fn is_go_on(text: &str) -> bool {
    let words: Vec<String> = text
        .split(|c: char| c.is_whitespace() || c.is_ascii_punctuation())
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
        .collect();
    !words.is_empty()
        && words.len() <= 5
        && words
            .iter()
            .all(|word| GO_ON_WORDS.contains(&word.as_str()))
        && words.iter().any(|word| {
            matches!(
                word.as_str(),
                "continue" | "go" | "keep" | "proceed" | "carry" | "next" | "resume"
            )
        })
}
