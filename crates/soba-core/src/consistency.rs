//! The consistency guard (issue 32, item 4): a model summary that passed the
//! shape guards ([`crate::guard`]) is checked against what the log itself
//! shows. An open-work item the log contradicts is removed, with the reason:
//!
//! - a step listed as in progress, pending or next that the plan or a
//!   milestone checkpoint marks done;
//! - "tests fail" (or the build, or a named check) while the newest result
//!   of every verification command the log holds passed;
//! - a file still "to create" that an edit tool already wrote.
//!
//! A summary with more than [`MAX_CORRECTIONS`] such items is rejected like
//! the other guards ([`Guard::Contradicted`]): a model that misread the
//! session that often is not trusted with the rest of it either.

use std::collections::BTreeSet;
use std::fmt;

use crate::capsule::{Narrative, PlanStatus};
use crate::entry::CheckpointKind;
use crate::facts::Facts;
use crate::guard::{Guard, GuardRejection};

/// At most this many contradicted items are removed; one more rejects the
/// summary.
pub const MAX_CORRECTIONS: usize = 2;

/// One narrative item the log contradicts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Correction {
    /// The narrative section it was in (`In progress`, `Pending`, …).
    pub section: &'static str,
    /// The item as the model wrote it.
    pub item: String,
    /// What in the log contradicts it.
    pub reason: String,
}

impl fmt::Display for Correction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} item {:?}: {}", self.section, self.item, self.reason)
    }
}

/// Removes from `narrative` the open-work items `facts` contradict and
/// returns what was removed, or rejects the summary when more than
/// [`MAX_CORRECTIONS`] items are contradicted.
pub fn check(
    mut narrative: Narrative,
    facts: &Facts,
) -> Result<(Narrative, Vec<Correction>), GuardRejection> {
    let evidence = Evidence::from_facts(facts);
    let mut corrections = Vec::new();
    for (section, slot) in [
        ("In progress", &mut narrative.in_progress),
        ("Pending", &mut narrative.pending),
        ("Blockers", &mut narrative.blockers),
        ("Next steps", &mut narrative.next_steps),
    ] {
        let mut kept = Vec::new();
        let mut removed_here = 0;
        for item in items(slot) {
            match evidence.contradiction(section, &item) {
                Some(reason) => {
                    removed_here += 1;
                    corrections.push(Correction {
                        section,
                        item: item.trim().to_owned(),
                        reason,
                    });
                }
                None => kept.push(item),
            }
        }
        if removed_here > 0 {
            *slot = if kept.iter().all(|item| item.trim().is_empty()) {
                NOTHING_LEFT.to_owned()
            } else {
                kept.join("\n").trim().to_owned()
            };
        }
    }
    if corrections.len() > MAX_CORRECTIONS {
        let first = corrections
            .iter()
            .take(3)
            .map(Correction::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        return Err(GuardRejection {
            guard: Guard::Contradicted,
            detail: format!(
                "{} open-work items contradict the log, more than {MAX_CORRECTIONS}: {first}",
                corrections.len()
            ),
        });
    }
    Ok((narrative, corrections))
}

/// What a section says when every item in it was contradicted.
pub const NOTHING_LEFT: &str = "(none: the log shows every item the summary listed here as done)";

/// Splits a section into items: one per list line (`-`, `*`, `+`, `1.`),
/// a continuation line staying with its item; a paragraph without a list
/// marker is one item.
fn items(section: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in section.lines() {
        if line.trim().is_empty() {
            out.extend(current.take());
        } else if is_list_line(line) {
            out.extend(current.replace(line.to_owned()));
        } else {
            match current.as_mut() {
                Some(item) => {
                    item.push('\n');
                    item.push_str(line);
                }
                None => current = Some(line.to_owned()),
            }
        }
    }
    out.extend(current);
    out
}

fn is_list_line(line: &str) -> bool {
    let line = line.trim_start();
    if let Some(rest) = line.strip_prefix(['-', '*', '+']) {
        return rest.starts_with(' ');
    }
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    digits > 0 && matches!(line[digits..].chars().next(), Some('.' | ')'))
}

/// What the log shows done, passed and written.
struct Evidence {
    /// Completed plan steps and milestone notes, as word sets.
    done: Vec<(String, Words)>,
    /// Every verification command's newest result passed (and there is one).
    all_checks_pass: bool,
    /// Verification commands whose newest result passed.
    passed: Vec<String>,
    /// Files an edit tool wrote, workspace-relative.
    written: Vec<String>,
}

impl Evidence {
    fn from_facts(facts: &Facts) -> Evidence {
        let mut done: Vec<(String, Words)> = Vec::new();
        if let Some(plan) = &facts.plan {
            for item in &plan.items {
                if item.status == PlanStatus::Completed {
                    done.push((
                        format!("the plan marks {:?} completed", item.text),
                        words(&item.text),
                    ));
                }
            }
        }
        for (kind, note) in &facts.checkpoints {
            if *kind == CheckpointKind::Milestone {
                done.push((format!("the milestone {note:?} marks it done"), words(note)));
            }
        }
        Evidence {
            done,
            all_checks_pass: !facts.verification.is_empty()
                && facts.verification.iter().all(|check| check.passed),
            passed: facts
                .verification
                .iter()
                .filter(|check| check.passed)
                .map(|check| check.command.clone())
                .collect(),
            written: facts.files_modified.clone(),
        }
    }

    fn contradiction(&self, section: &str, item: &str) -> Option<String> {
        let text = item.trim();
        if text.is_empty() {
            return None;
        }
        if section != "Blockers"
            && let Some(reason) = self.done_step(text)
        {
            return Some(reason);
        }
        if let Some(reason) = self.passing_checks(text) {
            return Some(reason);
        }
        if section != "Blockers" {
            return self.written_file(text);
        }
        None
    }

    /// The item names a step the plan or a milestone marks done.
    fn done_step(&self, item: &str) -> Option<String> {
        let item_words = words(item);
        self.done
            .iter()
            .find(|(_, done)| same_step(&item_words, done))
            .map(|(reason, _)| reason.clone())
    }

    /// The item says tests (or the build) fail, and the log's newest
    /// results say they pass.
    fn passing_checks(&self, item: &str) -> Option<String> {
        let lower = item.to_lowercase();
        let item_words: Vec<&str> = lower
            .split(|c: char| !c.is_alphanumeric() && c != '\'')
            .filter(|word| !word.is_empty())
            .collect();
        let says_failing = item_words.iter().any(|word| FAILING.contains(word))
            || item_words
                .windows(2)
                .any(|pair| NEGATIONS.contains(&pair[0]) && pair[1].starts_with("pass"));
        let about_checks = item_words.iter().any(|word| CHECKS.contains(word));
        if !says_failing || !about_checks {
            return None;
        }
        if let Some(command) = self
            .passed
            .iter()
            .find(|command| !command.is_empty() && lower.contains(&command.to_lowercase()))
        {
            return Some(format!("the newest run of `{command}` passed"));
        }
        self.all_checks_pass.then(|| {
            format!(
                "the newest result of every verification command passed ({})",
                self.passed
                    .iter()
                    .map(|command| format!("`{command}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
    }

    /// The item says a file is still to be created, and an edit tool wrote
    /// it.
    fn written_file(&self, item: &str) -> Option<String> {
        let lower = item.to_lowercase();
        if !CREATE.iter().any(|word| lower.contains(word)) {
            return None;
        }
        self.written
            .iter()
            .find(|path| names_file(&lower, path))
            .map(|path| format!("`{path}` was already written by an edit tool"))
    }
}

/// Words that say something fails.
const FAILING: [&str; 9] = [
    "fail", "fails", "failing", "failed", "failure", "failures", "broken", "breaks", "red",
];

/// Words that, before `pass…`, say something fails.
const NEGATIONS: [&str; 5] = ["not", "don't", "doesn't", "won't", "never"];

/// Words that say what fails is a check.
const CHECKS: [&str; 13] = [
    "test",
    "tests",
    "testing",
    "build",
    "builds",
    "lint",
    "linter",
    "check",
    "checks",
    "compile",
    "compilation",
    "ci",
    "suite",
];

/// Words that say a file is yet to be made.
const CREATE: [&str; 5] = ["create", "creating", "new file", "scaffold", "to write"];

/// Whether `lower` (an item, lowercased) names `path` as a whole path or
/// by its file name when the name has an extension.
fn names_file(lower: &str, path: &str) -> bool {
    let path = path.to_lowercase();
    if contains_token(lower, &path) {
        return true;
    }
    let name = path.rsplit('/').next().unwrap_or(&path);
    name.contains('.') && name != path && contains_token(lower, name)
}

/// Whether `needle` occurs in `haystack` as a path of its own: not glued
/// to other path characters (a full stop after it ends a sentence).
fn contains_token(haystack: &str, needle: &str) -> bool {
    let path_char = |c: char| c.is_alphanumeric() || matches!(c, '_' | '-' | '/' | '.');
    haystack.match_indices(needle).any(|(at, _)| {
        let before = haystack[..at].chars().next_back();
        let mut after = haystack[at + needle.len()..].chars();
        let glued_after = match after.next() {
            None => false,
            Some('.') => after.next().is_some_and(path_char),
            Some(c) => path_char(c),
        };
        !before.is_some_and(path_char) && !glued_after
    })
}

type Words = BTreeSet<String>;

/// Words that say nothing about which step an item is.
const STOP_WORDS: [&str; 40] = [
    "a",
    "an",
    "the",
    "to",
    "of",
    "for",
    "and",
    "or",
    "in",
    "on",
    "with",
    "by",
    "is",
    "are",
    "be",
    "will",
    "we",
    "i",
    "it",
    "its",
    "this",
    "that",
    "now",
    "then",
    "still",
    "next",
    "step",
    "task",
    "work",
    "working",
    "implement",
    "implementing",
    "finish",
    "finishing",
    "add",
    "adding",
    "do",
    "doing",
    "done",
    "please",
];

/// The content words of a text: lowercased, split on anything but letters,
/// digits, `_`, `-`, `.`, `/` and `%`, stop words out, a plural or `-ing`
/// / `-ed` ending cut from words over four letters.
fn words(text: &str) -> Words {
    text.to_lowercase()
        .split(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | '%')))
        .map(|word| word.trim_matches(['.', '-', '/']))
        .filter(|word| !word.is_empty() && !STOP_WORDS.contains(word))
        .map(stem)
        .collect()
}

fn stem(word: &str) -> String {
    if word.chars().count() <= 4 || word.chars().any(|c| c.is_ascii_digit()) {
        return word.to_owned();
    }
    for suffix in ["ing", "ed", "es", "s"] {
        if let Some(root) = word.strip_suffix(suffix)
            && root.chars().count() >= 3
        {
            return root.to_owned();
        }
    }
    word.to_owned()
}

/// Whether an item and a done step name the same step: at least two
/// shared content words covering three quarters of the shorter of the two,
/// and no disagreement on numbers (`Feature 3` is not `Feature 10`).
fn same_step(item: &Words, done: &Words) -> bool {
    let shared = item.intersection(done).count();
    let shorter = item.len().min(done.len());
    if shared < 2 || shared * 4 < shorter * 3 {
        return false;
    }
    let numbers = |set: &Words| -> Words {
        set.iter()
            .filter(|word| word.chars().all(|c| c.is_ascii_digit()))
            .cloned()
            .collect()
    };
    let (item_numbers, done_numbers) = (numbers(item), numbers(done));
    item_numbers.is_empty() || done_numbers.is_empty() || item_numbers == done_numbers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capsule::{PlanItem, Verification};
    use crate::facts::{PlanSource, PlanState};

    fn facts() -> Facts {
        Facts {
            plan: Some(PlanState {
                source: PlanSource::UpdatePlan,
                explanation: None,
                items: vec![
                    PlanItem {
                        text: "Feature 3: p50/p95/p99 latency percentiles".into(),
                        status: PlanStatus::Completed,
                    },
                    PlanItem {
                        text: "Feature 10: error budget report".into(),
                        status: PlanStatus::InProgress,
                    },
                ],
            }),
            checkpoints: vec![(
                CheckpointKind::Milestone,
                "Config loading moves ahead of the report features".into(),
            )],
            verification: vec![Verification {
                command: "sh run_tests.sh".into(),
                passed: true,
                exit_code: Some(0),
            }],
            files_modified: vec!["src/config.py".into(), "src/report.py".into()],
            ..Facts::default()
        }
    }

    #[test]
    fn a_done_step_a_passing_check_and_a_written_file_are_removed() {
        let narrative = Narrative {
            in_progress:
                "- Implementing feature 3 (latency percentiles)\n- Feature 10: error budget report"
                    .into(),
            pending: "- Config loading moves ahead of the report features\n- Create src/config.py"
                .into(),
            blockers: "Tests fail in tests/test_report.py".into(),
            ..Narrative::default()
        };
        let rejection = check(narrative.clone(), &facts()).expect_err("four contradictions");
        assert_eq!(rejection.guard, Guard::Contradicted);
        assert!(rejection.detail.starts_with("4 open-work items contradict the log, more than 2: In progress item \"- Implementing feature 3 (latency percentiles)\": the plan marks \"Feature 3: p50/p95/p99 latency percentiles\" completed"), "{}", rejection.detail);

        let two = Narrative {
            pending: String::new(),
            ..narrative
        };
        let (kept, corrections) = check(two, &facts()).expect("two contradictions are removed");
        assert_eq!(kept.in_progress, "- Feature 10: error budget report");
        assert_eq!(kept.blockers, NOTHING_LEFT);
        assert_eq!(
            corrections
                .iter()
                .map(|c| (c.section, c.reason.as_str()))
                .collect::<Vec<_>>(),
            [
                (
                    "In progress",
                    "the plan marks \"Feature 3: p50/p95/p99 latency percentiles\" completed"
                ),
                (
                    "Blockers",
                    "the newest result of every verification command passed (`sh run_tests.sh`)"
                ),
            ]
        );
    }

    #[test]
    fn a_milestone_and_a_written_file_settle_pending_items() {
        let narrative = Narrative {
            pending: "1. Config loading moves ahead of the report features\n2. Create `src/report.py`.\n3. Write the changelog".into(),
            ..Narrative::default()
        };
        let (kept, corrections) = check(narrative, &facts()).expect("two removed");
        assert_eq!(kept.pending, "3. Write the changelog");
        assert_eq!(
            corrections[0].reason,
            "the milestone \"Config loading moves ahead of the report features\" marks it done"
        );
        assert_eq!(
            corrections[1].reason,
            "`src/report.py` was already written by an edit tool"
        );
    }

    #[test]
    fn open_work_the_log_does_not_settle_stays() {
        let narrative = Narrative {
            in_progress: "- Feature 10: error budget report\n  (the 4xx share is next)".into(),
            pending: "- Feature 13: latency percentiles per endpoint\n- Create docs/usage.md"
                .into(),
            blockers: "The deploy key is missing".into(),
            next_steps: "Re-run the tests for feature 3 after the refactor".into(),
            ..Narrative::default()
        };
        let (kept, corrections) = check(narrative.clone(), &facts()).expect("nothing contradicted");
        assert_eq!(corrections, []);
        assert_eq!(kept, narrative);
    }

    #[test]
    fn failing_tests_stand_while_a_check_failed_last() {
        let mut facts = facts();
        facts.verification.push(Verification {
            command: "cargo clippy".into(),
            passed: false,
            exit_code: Some(101),
        });
        let narrative = Narrative {
            blockers: "- cargo clippy fails on src/lib.rs\n- The tests fail".into(),
            ..Narrative::default()
        };
        let (kept, corrections) = check(narrative.clone(), &facts).expect("nothing contradicted");
        assert_eq!(corrections, []);
        assert_eq!(kept, narrative);
        let named = Narrative {
            blockers: "- `sh run_tests.sh` fails".into(),
            ..Narrative::default()
        };
        let (_, corrections) = check(named, &facts).expect("one removed");
        assert_eq!(
            corrections[0].reason,
            "the newest run of `sh run_tests.sh` passed"
        );
    }

    #[test]
    fn items_follow_list_markers_and_paragraphs() {
        assert_eq!(
            items("- a\n  more of a\n- b\n\nc\nmore of c\n\n1) d"),
            ["- a\n  more of a", "- b", "c\nmore of c", "1) d"]
        );
        assert_eq!(
            items("one paragraph\nover two lines"),
            ["one paragraph\nover two lines"]
        );
    }

    #[test]
    fn numbers_must_agree() {
        assert!(same_step(
            &words("Feature 3: latency percentiles"),
            &words("feature 3 latency percentiles added")
        ));
        assert!(!same_step(
            &words("Feature 10: latency report"),
            &words("Feature 1: latency report")
        ));
        assert!(!same_step(&words("the report"), &words("report")));
    }
}
