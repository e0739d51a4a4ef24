//! What a user's words direct, read without a model: the constraints a
//! message or `AGENTS.md` states (always, never, must, don't, only, keep,
//! avoid, prefer …), whether a message is a task at all (a greeting or a
//! question about the agent is not), whether it redirects the work, and
//! the commands a task or `AGENTS.md` names as the project's own checks.
//!
//! Everything here is a heuristic over plain text, kept deliberately
//! narrow: a sentence wrongly kept as a constraint costs a line of the
//! capsule, one wrongly dropped is still in the log.

use crate::facts::instruction::is_go_on;
use crate::facts::shell::{shell_words, split_commands};

/// A constraint sentence longer than this many characters is cut at a word
/// break (a paragraph is rarely one rule).
pub const CONSTRAINT_MAX_CHARS: usize = 400;

/// Words that make a user's sentence a constraint, matched as whole words,
/// case-insensitively.
const CONSTRAINT_WORDS: &[&str] = &[
    "always",
    "never",
    "must",
    "mustn't",
    "don't",
    "dont",
    "do not",
    "does not need",
    "only",
    "keep",
    "avoid",
    "prefer",
    "make sure",
    "ensure",
    "should",
    "shouldn't",
    "should not",
    "required",
    "forbidden",
    "not allowed",
    "no need to",
    "without changing",
    "without touching",
    "stick to",
    "leave",
];

/// Verbs that open an instruction in `AGENTS.md`/`CLAUDE.md`, where nearly
/// every sentence that starts with one is a rule of the project.
const RULE_VERBS: &[&str] = &[
    "run", "use", "keep", "write", "add", "test", "check", "follow", "put", "name", "prefer",
    "avoid", "never", "always", "do", "don't", "make", "ensure", "format", "lint", "commit",
    "document", "update", "read", "call", "place", "store", "return", "log", "build",
];

/// Programs that start a command a user may name without backticks ("run
/// python3 hello.py after editing").
const PROGRAMS: &[&str] = &[
    "python", "python3", "py", "node", "npm", "npx", "pnpm", "yarn", "bun", "deno", "cargo", "go",
    "make", "gmake", "sh", "bash", "zsh", "pytest", "tox", "nox", "uv", "poetry", "just", "gradle",
    "gradlew", "mvn", "dotnet", "ruby", "bundle", "rake", "rspec", "php", "composer", "swift",
    "zig", "ctest", "ninja", "mix", "cabal", "stack", "dune", "ruff", "mypy", "eslint", "tsc",
    "jest", "vitest", "prettier", "black",
];

/// Returns the sentences of `text` outside code blocks: each line's list
/// marker and quote marker removed, split after `.`, `!` or `?` followed by
/// a space (never inside a backtick span), headings and blank pieces left
/// out.
pub fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_fence = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence || trimmed.starts_with('#') || trimmed.starts_with('|') {
            continue;
        }
        let body = strip_marker(trimmed);
        let mut current = String::new();
        let mut in_code = false;
        let mut chars = body.chars().peekable();
        while let Some(c) = chars.next() {
            current.push(c);
            if c == '`' {
                in_code = !in_code;
            }
            let ends = !in_code
                && matches!(c, '.' | '!' | '?')
                && chars.peek().is_none_or(|next| next.is_whitespace());
            if ends {
                push_sentence(&mut out, &current);
                current.clear();
            }
        }
        push_sentence(&mut out, &current);
    }
    out
}

fn push_sentence(out: &mut Vec<String>, sentence: &str) {
    let sentence = sentence.trim();
    if sentence.chars().any(char::is_alphabetic) {
        out.push(sentence.to_owned());
    }
}

/// Removes a Markdown list or quote marker (`- `, `* `, `1. `, `> `).
fn strip_marker(line: &str) -> &str {
    let line = line.trim_start_matches('>').trim_start();
    for marker in ["- ", "* ", "+ "] {
        if let Some(rest) = line.strip_prefix(marker) {
            return rest.trim_start();
        }
    }
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    if digits > 0
        && let Some(rest) = line[digits..]
            .strip_prefix(". ")
            .or_else(|| line[digits..].strip_prefix(") "))
    {
        return rest.trim_start();
    }
    line
}

/// Returns the words of `text` in lowercase, apostrophes kept, other
/// punctuation dropped, with `’` read as `'`.
fn lower_words(text: &str) -> Vec<String> {
    text.replace('’', "'")
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Returns whether the lowercase word list holds `phrase` (one or more
/// words) as consecutive whole words.
fn has_phrase(words: &[String], phrase: &str) -> bool {
    let wanted: Vec<&str> = phrase.split(' ').collect();
    words
        .windows(wanted.len())
        .any(|window| window.iter().zip(&wanted).all(|(a, b)| a == b))
}

/// Returns whether a user's sentence states a constraint: it holds one of
/// the constraint words and is not a question.
pub fn is_constraint(sentence: &str) -> bool {
    if sentence.trim_end().ends_with('?') {
        return false;
    }
    let words = lower_words(sentence);
    CONSTRAINT_WORDS
        .iter()
        .any(|phrase| has_phrase(&words, phrase))
}

/// Returns whether a sentence of `AGENTS.md`/`CLAUDE.md` is a rule: a
/// constraint, or a sentence that opens with an imperative verb.
pub fn is_rule(sentence: &str) -> bool {
    is_constraint(sentence)
        || lower_words(sentence)
            .first()
            .is_some_and(|first| RULE_VERBS.contains(&first.as_str()))
}

/// Returns a constraint as kept: whitespace runs collapsed, at most
/// [`CONSTRAINT_MAX_CHARS`] characters (cut at a word break, with `…`).
pub fn constraint_text(sentence: &str) -> String {
    let collapsed = sentence.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.chars().count() <= CONSTRAINT_MAX_CHARS {
        return collapsed;
    }
    let head: String = collapsed.chars().take(CONSTRAINT_MAX_CHARS).collect();
    let cut = head.rfind(' ').unwrap_or(head.len());
    format!("{}…", &head[..cut])
}

/// Returns the constraint sentences of a user message, in order.
pub fn user_constraints(text: &str) -> Vec<String> {
    sentences(text)
        .into_iter()
        .filter(|sentence| is_constraint(sentence))
        .map(|sentence| constraint_text(&sentence))
        .collect()
}

/// Returns the rules of an `AGENTS.md`/`CLAUDE.md` text, in order.
pub fn file_rules(text: &str) -> Vec<String> {
    sentences(text)
        .into_iter()
        .filter(|sentence| is_rule(sentence))
        .map(|sentence| constraint_text(&sentence))
        .collect()
}

/// Returns the key two constraints are compared by: whitespace-collapsed,
/// lowercase, without a closing period.
pub fn constraint_key(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .trim_end_matches(['.', '!'])
        .to_lowercase()
}

/// Phrases by which a later message takes back something said before.
const REVOKES: &[&str] = &[
    "no longer",
    "not anymore",
    "any more",
    "anymore",
    "forget",
    "ignore",
    "disregard",
    "scratch that",
    "never mind",
    "instead",
    "actually",
    "after all",
    "change of plan",
    "you can now",
    "you may now",
    "now you can",
    "now you may",
    "it's fine to",
    "it's ok to",
    "it's okay to",
    "feel free to",
    "go ahead and",
    "you can go ahead",
    "is allowed now",
    "are allowed now",
];

/// Phrases of a constraint that asks for something to stay as it is.
const PRESERVES: &[&str] = &[
    "unchanged",
    "as is",
    "as it is",
    "alone",
    "untouched",
    "don't change",
    "do not change",
    "don't touch",
    "do not touch",
    "don't modify",
    "do not modify",
    "don't edit",
    "do not edit",
    "don't rename",
    "do not rename",
    "don't delete",
    "do not delete",
    "don't remove",
    "do not remove",
    "never change",
    "never touch",
    "never modify",
    "never edit",
    "without changing",
    "without touching",
];

/// Verbs by which a message asks for something to change.
const CHANGES: &[&str] = &[
    "rename", "change", "edit", "modify", "rewrite", "remove", "delete", "replace", "refactor",
    "touch", "update", "drop", "move",
];

/// Words too common to tie a later message to an earlier rule.
const COMMON: &[&str] = &[
    "about",
    "after",
    "again",
    "also",
    "always",
    "another",
    "anything",
    "before",
    "being",
    "change",
    "changes",
    "changing",
    "code",
    "could",
    "does",
    "doing",
    "done",
    "each",
    "else",
    "ensure",
    "every",
    "everything",
    "file",
    "files",
    "first",
    "from",
    "function",
    "functions",
    "have",
    "into",
    "just",
    "keep",
    "later",
    "like",
    "make",
    "method",
    "methods",
    "more",
    "must",
    "need",
    "needs",
    "never",
    "nothing",
    "now",
    "only",
    "other",
    "plan",
    "please",
    "prefer",
    "really",
    "should",
    "some",
    "something",
    "still",
    "sure",
    "than",
    "that",
    "their",
    "them",
    "then",
    "there",
    "these",
    "they",
    "thing",
    "things",
    "this",
    "those",
    "unchanged",
    "until",
    "when",
    "where",
    "which",
    "while",
    "will",
    "with",
    "without",
    "would",
    "your",
    "alone",
    "instead",
    "actually",
    "forget",
    "ignore",
    "longer",
    "anymore",
    "allowed",
    "fine",
    "okay",
    "free",
    "ahead",
    "rename",
    "edit",
    "modify",
    "rewrite",
    "remove",
    "delete",
    "replace",
    "refactor",
    "touch",
    "update",
    "drop",
    "move",
    "don't",
    "dont",
    "avoid",
    "leave",
    "stick",
];

/// Returns the words that tie a sentence to a rule: those of four letters
/// or more that are not [`COMMON`], and every backticked span.
fn distinctive_terms(text: &str) -> std::collections::BTreeSet<String> {
    let mut terms: std::collections::BTreeSet<String> = lower_words(text)
        .into_iter()
        .filter(|word| word.chars().count() >= 4 && !COMMON.contains(&word.as_str()))
        .collect();
    terms.extend(
        text.split('`')
            .skip(1)
            .step_by(2)
            .map(|span| span.trim().to_lowercase())
            .filter(|span| !span.is_empty()),
    );
    terms
}

/// Returns whether a later user sentence overrides an earlier constraint:
/// it takes something back ("no longer", "instead", "you can now" …) or
/// asks to change (rename, edit, delete …) what the constraint keeps as
/// it is, and it names a distinctive word or backticked span of the
/// constraint. A constraint is never overridden by a sentence that states
/// it again.
pub fn overrides(later: &str, constraint: &str) -> bool {
    if constraint_key(later) == constraint_key(constraint) {
        return false;
    }
    let later_words = lower_words(later);
    let revokes = REVOKES
        .iter()
        .any(|phrase| has_phrase(&later_words, phrase));
    let constraint_words = lower_words(constraint);
    let changes_what_is_kept = PRESERVES
        .iter()
        .any(|phrase| has_phrase(&constraint_words, phrase))
        && CHANGES.iter().any(|verb| has_phrase(&later_words, verb));
    if !(revokes || changes_what_is_kept) {
        return false;
    }
    let wanted = distinctive_terms(constraint);
    !distinctive_terms(later).is_disjoint(&wanted)
}

/// How a constraint reads once a later sentence overrode it: the
/// constraint verbatim, then the sentence (cut at a word break after
/// [`OVERRIDE_SHOWN_CHARS`] characters).
pub fn overridden_text(constraint: &str, later: &str) -> String {
    let later = constraint_text(later);
    let shown = if later.chars().count() > OVERRIDE_SHOWN_CHARS {
        let head: String = later.chars().take(OVERRIDE_SHOWN_CHARS).collect();
        let cut = head.rfind(' ').unwrap_or(head.len());
        format!("{}…", &head[..cut])
    } else {
        later
    };
    format!("{constraint} {OVERRIDDEN_MARK} \"{shown}\")")
}

/// The mark of a constraint a later instruction overrode.
pub const OVERRIDDEN_MARK: &str = "(overridden by a later instruction:";

/// How much of an overriding sentence a constraint's line shows.
pub const OVERRIDE_SHOWN_CHARS: usize = 160;

/// Words of a message that is only a greeting or small talk.
const GREETING_WORDS: &[&str] = &[
    "hi",
    "hello",
    "hey",
    "hiya",
    "yo",
    "howdy",
    "greetings",
    "good",
    "morning",
    "afternoon",
    "evening",
    "there",
    "thanks",
    "thank",
    "you",
    "how",
    "are",
    "is",
    "it",
    "going",
    "what's",
    "whats",
    "up",
    "soba",
    "agent",
    "assistant",
    "claude",
    "bot",
];

/// Questions about the agent itself, not about the work.
const AGENT_QUESTIONS: &[&str] = &[
    "what can you do",
    "what are you",
    "who are you",
    "what do you do",
    "how do you work",
    "how does this work",
    "are you there",
    "can you help",
    "can you help me",
    "what is this",
    "what tools do you have",
    "which model are you",
    "what model are you",
];

/// Returns whether a real user message asks for work: not empty, not only
/// a greeting or small talk, not a question about the agent itself, and
/// not only a go-on ([`crate::facts::is_go_on`]).
pub fn is_task(text: &str) -> bool {
    let words = lower_words(text);
    if words.is_empty() || is_go_on(text) {
        return false;
    }
    if words.len() > 20 {
        return true;
    }
    if words
        .iter()
        .all(|word| GREETING_WORDS.contains(&word.as_str()))
    {
        return false;
    }
    let opens_with_greeting = words.first().is_some_and(|word| {
        matches!(
            word.as_str(),
            "hi" | "hello" | "hey" | "hiya" | "yo" | "howdy"
        )
    });
    let about_agent = AGENT_QUESTIONS
        .iter()
        .any(|question| has_phrase(&words, question));
    !(about_agent || (opens_with_greeting && words.len() <= 4 && text.trim_end().ends_with('?')))
}

/// Phrases that open a message which replaces the work in hand.
const REDIRECTS: &[&str] = &[
    "new task",
    "different task",
    "forget that",
    "forget about that",
    "forget the previous",
    "forget everything",
    "scratch that",
    "never mind",
    "nevermind",
    "instead",
    "stop working on",
    "switch to",
    "let's switch",
    "lets switch",
    "let's work on",
    "lets work on",
    "now work on",
    "drop that",
    "abandon",
];

/// Returns whether a task message redirects the work: at least four words
/// (a redirect names the new work), one of the redirect phrases among the
/// first eight.
pub fn is_redirect(text: &str) -> bool {
    let words = lower_words(text);
    let head = &words[..words.len().min(8)];
    words.len() >= 4 && is_task(text) && REDIRECTS.iter().any(|phrase| has_phrase(head, phrase))
}

/// Words that stop an unquoted command after "run" ("run python3 hello.py
/// after editing").
const COMMAND_STOPS: &[&str] = &[
    "after", "before", "when", "whenever", "each", "every", "to", "and", "then", "once", "on",
    "if", "for", "so", "first", "again",
];

/// Returns the commands a text names as checks to run: backtick spans in a
/// sentence that says to run, test, check or verify something, and an
/// unquoted command after "run" whose first word is a known program or a
/// path (`python3 hello.py`, `./check.sh`). Each command is returned as
/// its shell words joined by one space.
pub fn declared_commands(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |command: &str| {
        for part in split_commands(command) {
            let words = shell_words(&part);
            if words.is_empty() {
                continue;
            }
            let joined = words.join(" ");
            if !out.contains(&joined) {
                out.push(joined);
            }
        }
    };
    for sentence in sentences(text) {
        let words = lower_words(&sentence);
        let asks_to_run = ["run", "execute", "test", "check", "verify", "build", "lint"]
            .iter()
            .any(|verb| words.iter().any(|word| word == verb));
        if !asks_to_run {
            continue;
        }
        let mut rest = sentence.as_str();
        let mut found_code = false;
        while let Some(start) = rest.find('`') {
            let after = &rest[start + 1..];
            let Some(end) = after.find('`') else { break };
            let code = &after[..end];
            if looks_like_command(code) {
                push(code);
                found_code = true;
            }
            rest = &after[end + 1..];
        }
        if found_code {
            continue;
        }
        let tokens: Vec<&str> = sentence.split_whitespace().collect();
        for (idx, token) in tokens.iter().enumerate() {
            if !token.eq_ignore_ascii_case("run") {
                continue;
            }
            let command: Vec<&str> = tokens[idx + 1..]
                .iter()
                .take_while(|word| !COMMAND_STOPS.contains(&word.to_lowercase().as_str()))
                .take(6)
                .map(|word| word.trim_end_matches([',', '.', ';', ':', ')']))
                .collect();
            let joined = command.join(" ");
            if looks_like_command(&joined) {
                push(&joined);
            }
        }
    }
    out
}

/// Returns whether a text's first word is a known program or a path to
/// one.
fn looks_like_command(text: &str) -> bool {
    let Some(first) = text.split_whitespace().next() else {
        return false;
    };
    let program = first.rsplit('/').next().unwrap_or(first);
    PROGRAMS.contains(&program)
        || first.starts_with("./")
        || (first.contains('/') && !first.contains("://"))
        || first.ends_with(".sh")
        || first.ends_with(".py")
}

/// Returns whether a run command matches a declared one: the declared
/// command's words are the first words of the run command (`cargo test`
/// matches `cargo test -p core`), compared after both went through
/// [`shell_words`].
pub fn matches_declared(command: &str, declared: &[String]) -> bool {
    if declared.is_empty() {
        return false;
    }
    split_commands(command).iter().any(|part| {
        let words = shell_words(part);
        declared.iter().any(|wanted| {
            let wanted: Vec<&str> = wanted.split(' ').collect();
            !wanted.is_empty()
                && words.len() >= wanted.len()
                && words.iter().zip(&wanted).all(|(a, b)| a == b)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constraints_are_the_sentences_that_state_a_rule() {
        let task = "We are extending loglens, our access-log analyzer. Over this session I'll ask for ten \
                    features one by one. Always run `sh run_tests.sh` after a change and keep the public \
                    functions pure.";
        assert_eq!(
            user_constraints(task),
            ["Always run `sh run_tests.sh` after a change and keep the public functions pure."]
        );
        assert_eq!(
            user_constraints("Don't touch the vendored code. Can you only change src/?"),
            ["Don't touch the vendored code."]
        );
        assert!(user_constraints("Add gzip input support.").is_empty());
        assert_eq!(
            user_constraints("- never commit secrets\n- use tabs\n```\nalways in code\n```"),
            ["never commit secrets"]
        );
    }

    /// A later sentence overrides a rule when it takes it back or asks to
    /// change what the rule keeps, and names what the rule is about; the
    /// demo's change of plan and unrelated requests override nothing.
    #[test]
    fn a_later_sentence_overrides_a_rule_it_takes_back_and_names() {
        let overridden = [
            ("Keep greet unchanged.", "Rename greet to welcome."),
            (
                "Don't touch the vendored code.",
                "Update the vendored parser to 2.1.",
            ),
            (
                "Never use `unwrap` in src/.",
                "You can now use `unwrap` in tests and src/.",
            ),
            (
                "Only use the stdlib.",
                "Actually, the regex crate is fine: use the stdlib and regex.",
            ),
            (
                "Always run `make lint` before committing.",
                "Forget `make lint`, the linter is gone.",
            ),
            (
                "Prefer tabs for indentation.",
                "No longer tabs: indentation is four spaces now.",
            ),
        ];
        for (rule, later) in overridden {
            assert!(overrides(later, rule), "{later:?} should override {rule:?}");
        }
        let kept = [
            // The demo's pivot shares only common words with the task's rule.
            (
                "Always run `sh run_tests.sh` after a change and keep the public functions pure.",
                "Change of plan: config loading should come before the remaining report features.",
            ),
            ("Keep greet unchanged.", "Rename farewell to goodbye."),
            ("Keep greet unchanged.", "Call greet from main."),
            ("Keep greet unchanged.", "Keep greet unchanged."),
            ("Never commit secrets.", "Instead of print, use the logger."),
        ];
        for (rule, later) in kept {
            assert!(
                !overrides(later, rule),
                "{later:?} should not override {rule:?}"
            );
        }
        assert_eq!(
            overridden_text("Keep greet unchanged.", "Rename greet to welcome."),
            "Keep greet unchanged. (overridden by a later instruction: \"Rename greet to welcome.\")"
        );
    }

    #[test]
    fn agents_md_rules_include_imperative_sentences() {
        let agents = "# loglens\n\nRun `sh run_tests.sh` before saying a change is done. Keep functions pure.\n";
        assert_eq!(
            file_rules(agents),
            [
                "Run `sh run_tests.sh` before saying a change is done.",
                "Keep functions pure."
            ]
        );
        assert_eq!(
            file_rules("Always run python3 hello.py after editing"),
            ["Always run python3 hello.py after editing"]
        );
        assert!(file_rules("This project parses logs.").is_empty());
    }

    #[test]
    fn a_greeting_or_a_question_about_the_agent_is_not_a_task() {
        for text in [
            "hello, what can you do?",
            "hi",
            "Hey there!",
            "who are you?",
            "continue",
            "  ",
            "hello?",
        ] {
            assert!(!is_task(text), "{text:?}");
        }
        for text in [
            "Add a --json flag to the CLI.",
            "hi, please fix the failing test in src/lib.rs",
            "Why does the parser drop the last line?",
        ] {
            assert!(is_task(text), "{text:?}");
        }
    }

    #[test]
    fn redirects_open_with_a_redirect_phrase() {
        assert!(is_redirect("New task: port the CLI to clap."));
        assert!(is_redirect(
            "Forget that, let's work on the exporter instead."
        ));
        assert!(!is_redirect(
            "Change of plan: config loading should come before the remaining report features."
        ));
        assert!(!is_redirect("Feature 3: please add gzip input support."));
        assert!(!is_redirect("never mind"), "not a task on its own");
    }

    #[test]
    fn declared_commands_come_from_backticks_and_run_phrases() {
        assert_eq!(
            declared_commands(
                "Always run `sh run_tests.sh` after a change and keep the public functions pure."
            ),
            ["sh run_tests.sh"]
        );
        assert_eq!(
            declared_commands("Always run python3 hello.py after editing"),
            ["python3 hello.py"]
        );
        assert_eq!(
            declared_commands("Run `cargo fmt && cargo test` before you commit."),
            ["cargo fmt", "cargo test"]
        );
        assert!(declared_commands("Run the tests after each change.").is_empty());
        assert!(declared_commands("Keep `src/main.rs` small.").is_empty());
    }

    #[test]
    fn a_declared_command_matches_as_a_prefix() {
        let declared = vec!["python3 hello.py".to_owned(), "cargo test".to_owned()];
        assert!(matches_declared("python3 hello.py", &declared));
        assert!(matches_declared("cd src && cargo test -p core", &declared));
        assert!(!matches_declared("python3 other.py", &declared));
        assert!(!matches_declared("cargo", &declared));
    }
}
