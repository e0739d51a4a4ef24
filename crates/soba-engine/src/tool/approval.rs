//! Approval of the tools that change things (`bash`, `write_file`,
//! `edit_file`, SPEC §11.1, §11.4): the [`ApprovalPolicy`] built from
//! `--auto-approve`, `--allow` and the user-level `tools.allow`; the
//! session's "always" grants; and the [`Approver`] the UI answers.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use soba_core::{ApprovalGrants, ToolInput};

use super::{Tool, ToolError};

/// The error result of a call needing approval in a run that cannot ask
/// (`soba run`), exactly as SPEC §11.4 words it.
pub const NON_INTERACTIVE_DENIAL: &str =
    "not approved: rerun with --auto-approve or --allow bash,write";

/// The error result of a call the user denied (soba-core's capsule
/// reads it as the user's decision).
pub const USER_DENIAL: &str = soba_core::facts::USER_DENIAL;

/// The names `--allow` and `tools.allow` take, each with the tools it lets
/// run without asking; the CLI checks configuration against this table.
pub const ALLOW_NAMES: &[(&str, &[&str])] = &[
    ("bash", &["bash"]),
    ("write", &["write_file", "edit_file"]),
    ("edit", &["edit_file"]),
    ("write_file", &["write_file"]),
    ("edit_file", &["edit_file"]),
];

/// The user's answer to an approval prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalDecision {
    /// `y`: run this call.
    Once,
    /// `a`: run it, and approve the same tool for the rest of the session;
    /// for `bash`, commands with the same first word.
    AlwaysForSession,
    /// `n`: do not run it.
    Deny,
}

/// One call waiting for approval.
#[derive(Debug, Clone, Copy)]
pub struct ApprovalRequest<'a> {
    tool: &'a str,
    input: &'a ToolInput,
}

impl<'a> ApprovalRequest<'a> {
    /// Builds a request for a call of `tool` with `input`.
    pub fn new(tool: &'a str, input: &'a ToolInput) -> Self {
        ApprovalRequest { tool, input }
    }

    /// Returns the tool's name.
    pub fn tool(&self) -> &'a str {
        self.tool
    }

    /// Returns the call's arguments.
    pub fn input(&self) -> &'a ToolInput {
        self.input
    }

    /// Returns what the prompt shows: the command for `bash`, the path for
    /// file tools, else the arguments as JSON.
    pub fn summary(&self) -> String {
        let key = if self.tool == "bash" {
            "command"
        } else {
            "path"
        };
        match self.input.str_arg(key) {
            Some(text) => text.to_owned(),
            None => self.input.to_json_text(),
        }
    }

    /// Returns what answering "always" would approve, for the prompt.
    pub fn session_scope(&self) -> String {
        if self.tool != "bash" {
            return format!("every {} call this session", self.tool);
        }
        let words = command_words(self.input.str_arg("command").unwrap_or_default());
        let listed: Vec<String> = words.iter().map(|word| format!("`{word}`")).collect();
        format!(
            "bash commands starting with {} this session",
            listed.join(", ")
        )
    }
}

/// A boxed approval future, so approvers can be trait objects.
pub type ApprovalFuture<'a> = Pin<Box<dyn Future<Output = ApprovalDecision> + Send + 'a>>;

/// Whoever answers approval prompts (the TUI).
pub trait Approver: Send + Sync {
    /// Asks about one call and resolves with the answer.
    fn decide<'a>(&'a self, request: ApprovalRequest<'a>) -> ApprovalFuture<'a>;
}

/// Which tools run without asking, from `--auto-approve`, `--allow` and
/// the user-level `tools.allow` (never a project file, SPEC §14.2).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApprovalPolicy {
    auto_approve: bool,
    allowed: BTreeSet<&'static str>,
}

impl ApprovalPolicy {
    /// Builds a policy. Each entry of `allow_flags` (`--allow`) and
    /// `user_allow` (`tools.allow`) is a name or a comma-separated list of
    /// names: `bash`; `write`, which covers `write_file` and `edit_file`;
    /// `edit` for `edit_file` alone; or a full tool name. Unknown names are
    /// errors.
    pub fn new(
        auto_approve: bool,
        allow_flags: &[String],
        user_allow: &[String],
    ) -> Result<Self, ToolError> {
        let mut allowed = BTreeSet::new();
        for (entries, origin) in [(allow_flags, "--allow"), (user_allow, "tools.allow")] {
            for name in entries
                .iter()
                .flat_map(|entry| entry.split(','))
                .map(str::trim)
                .filter(|name| !name.is_empty())
            {
                let Some((_, tools)) = ALLOW_NAMES.iter().find(|(known, _)| *known == name) else {
                    return Err(ToolError::UnknownAllowName {
                        name: name.to_owned(),
                        origin,
                    });
                };
                allowed.extend(tools.iter().copied());
            }
        }
        Ok(ApprovalPolicy {
            auto_approve,
            allowed,
        })
    }

    /// Returns a policy that approves everything (`--auto-approve`).
    pub fn auto_approve() -> Self {
        ApprovalPolicy {
            auto_approve: true,
            allowed: BTreeSet::new(),
        }
    }

    /// Returns whether the policy lets `tool` run without asking.
    pub fn covers(&self, tool: &str) -> bool {
        self.auto_approve || self.allowed.contains(tool)
    }
}

/// Why a call may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovedBy {
    /// The tool does not need approval.
    NotNeeded,
    /// `--auto-approve`, `--allow` or `tools.allow`.
    Policy,
    /// An earlier "always" answer this session.
    Session,
    /// The user approved this call.
    User,
}

/// The gate's answer for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalVerdict {
    /// The call may run.
    Approved(ApprovedBy),
    /// The call must not run; the text is its error result.
    Denied(String),
}

/// The session's approval gate: the policy, the "always" grants made so
/// far and, in interactive mode, the approver to ask.
pub struct Approvals {
    policy: ApprovalPolicy,
    approver: Option<Arc<dyn Approver>>,
    grants: Mutex<Grants>,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals")
            .field("policy", &self.policy)
            .field("interactive", &self.approver.is_some())
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct Grants {
    tools: BTreeSet<String>,
    bash_words: BTreeSet<String>,
}

impl Approvals {
    /// Returns a gate that asks `approver` about calls the policy does not
    /// cover.
    pub fn interactive(policy: ApprovalPolicy, approver: Arc<dyn Approver>) -> Self {
        Approvals {
            policy,
            approver: Some(approver),
            grants: Mutex::new(Grants::default()),
        }
    }

    /// Returns a gate that never asks: uncovered calls get
    /// [`NON_INTERACTIVE_DENIAL`].
    pub fn non_interactive(policy: ApprovalPolicy) -> Self {
        Approvals {
            policy,
            approver: None,
            grants: Mutex::new(Grants::default()),
        }
    }

    /// Returns the policy.
    pub fn policy(&self) -> &ApprovalPolicy {
        &self.policy
    }

    /// Decides whether a call of `tool` with `input` may run, asking the
    /// approver when neither the policy nor a session grant covers it.
    pub async fn check(&self, tool: &dyn Tool, input: &ToolInput) -> ApprovalVerdict {
        let name = tool.name();
        if !tool.needs_approval() {
            return ApprovalVerdict::Approved(ApprovedBy::NotNeeded);
        }
        if self.policy.covers(name) {
            return ApprovalVerdict::Approved(ApprovedBy::Policy);
        }
        let command = input.str_arg("command").unwrap_or_default();
        if self.lock().covers(name, command) {
            return ApprovalVerdict::Approved(ApprovedBy::Session);
        }
        let Some(approver) = &self.approver else {
            return ApprovalVerdict::Denied(NON_INTERACTIVE_DENIAL.to_owned());
        };
        match approver.decide(ApprovalRequest::new(name, input)).await {
            ApprovalDecision::Once => ApprovalVerdict::Approved(ApprovedBy::User),
            ApprovalDecision::AlwaysForSession => {
                let mut grants = self.lock();
                if name == "bash" {
                    grants.bash_words.extend(command_words(command));
                } else {
                    grants.tools.insert(name.to_owned());
                }
                ApprovalVerdict::Approved(ApprovedBy::User)
            }
            ApprovalDecision::Deny => ApprovalVerdict::Denied(USER_DENIAL.to_owned()),
        }
    }

    /// Returns the session's "always" grants so far, for the log.
    pub fn grants(&self) -> ApprovalGrants {
        let grants = self.lock();
        ApprovalGrants {
            tools: grants.tools.clone(),
            bash_words: grants.bash_words.clone(),
        }
    }

    /// Adds grants a session recorded earlier (its `config_change`
    /// entries), so a resumed session asks again only about what it never
    /// approved for good.
    pub fn restore(&self, recorded: &ApprovalGrants) {
        let mut grants = self.lock();
        grants.tools.extend(recorded.tools.iter().cloned());
        grants
            .bash_words
            .extend(recorded.bash_words.iter().cloned());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Grants> {
        // The grants are plain sets; a panic elsewhere cannot leave them
        // half-updated, so a poisoned lock is still usable.
        self.grants.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Grants {
    fn covers(&self, tool: &str, command: &str) -> bool {
        if tool != "bash" {
            return self.tools.contains(tool);
        }
        // A substitution runs commands that are no segment's first word.
        if ["$(", "`", "<(", ">("]
            .iter()
            .any(|marker| command.contains(marker))
        {
            return false;
        }
        let segments: Vec<String> = command_segments(command)
            .into_iter()
            .filter(|segment| !segment.trim().is_empty())
            .collect();
        !segments.is_empty()
            && segments.iter().all(|segment| {
                self.bash_words
                    .iter()
                    .any(|prefix| starts_with_words(segment, prefix))
            })
    }
}

/// Returns the prefix of each command in a shell line split at `;`, `|`,
/// `&` and newlines (`&&`, `||` included; not the `&` of `2>&1` or `&>`):
/// its first two words (`cargo test`, `rm -r`, `sh run_tests.sh`), or its
/// one word. An "always" answer grants these prefixes, so approving
/// `git status` does not approve `git push`. Quoting is not parsed, so a
/// separator inside quotes only yields an extra prefix that must be granted
/// too: the split errs towards asking.
pub(crate) fn command_words(command: &str) -> Vec<String> {
    let mut prefixes: Vec<String> = Vec::new();
    for segment in command_segments(command) {
        // A redirection (`> log`, `2>&1`) is no part of what runs.
        let prefix = segment
            .split_whitespace()
            .take_while(|word| !is_redirection(word))
            .take(PREFIX_WORDS)
            .collect::<Vec<_>>()
            .join(" ");
        if !prefix.is_empty() && !prefixes.contains(&prefix) {
            prefixes.push(prefix);
        }
    }
    prefixes
}

/// Returns whether a word of a command redirects (`>`, `2>&1`, `&>log`,
/// `<in`).
fn is_redirection(word: &str) -> bool {
    word.trim_start_matches(|ch: char| ch.is_ascii_digit())
        .starts_with(['>', '<', '&'])
}

/// The words of a command an "always" answer grants.
const PREFIX_WORDS: usize = 2;

/// Splits a shell line into its commands (see [`command_words`]).
fn command_segments(command: &str) -> Vec<String> {
    let chars: Vec<char> = command.chars().collect();
    let mut segments: Vec<String> = vec![String::new()];
    for (idx, &ch) in chars.iter().enumerate() {
        let redirect = ch == '&'
            && (matches!(idx.checked_sub(1).map(|prev| chars[prev]), Some('>' | '<'))
                || chars.get(idx + 1) == Some(&'>'));
        if matches!(ch, ';' | '|' | '\n') || (ch == '&' && !redirect) {
            segments.push(String::new());
        } else if let Some(current) = segments.last_mut() {
            current.push(ch);
        }
    }
    segments
}

/// Returns whether the command `segment` starts with the words of
/// `prefix` (a grant: two words, or one recorded by an older soba).
fn starts_with_words(segment: &str, prefix: &str) -> bool {
    let mut words = segment.split_whitespace();
    prefix
        .split_whitespace()
        .all(|wanted| words.next() == Some(wanted))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_words_take_each_segments_first_two_words() {
        assert_eq!(command_words("cargo test -p x"), ["cargo test"]);
        assert_eq!(
            command_words("cargo test 2>&1 | tail -5"),
            ["cargo test", "tail -5"]
        );
        assert_eq!(command_words("make &> log & sleep 1"), ["make", "sleep 1"]);
        assert_eq!(command_words("make 2>&1 >log"), ["make"]);
        assert_eq!(
            command_words("cd a && make; make install\nls"),
            ["cd a", "make", "make install", "ls"]
        );
        assert!(command_words("   ").is_empty());
    }

    #[test]
    fn grants_cover_commands_whose_segments_all_start_with_a_grant() {
        let mut grants = Grants::default();
        grants
            .bash_words
            .extend(["cargo test".to_owned(), "tail".to_owned()]);
        assert!(grants.covers("bash", "cargo test --lib"));
        assert!(grants.covers("bash", "cargo test | tail -3"));
        assert!(!grants.covers("bash", "cargo build"));
        assert!(!grants.covers("bash", "cargo"));
        assert!(!grants.covers("bash", "cargo test && rm -rf target"));
        assert!(!grants.covers("bash", "cargo test $(rm x)"));
        assert!(!grants.covers("bash", "cargo test `rm x`"));
        assert!(!grants.covers("bash", ""));
        assert!(!grants.covers("write_file", ""));
        // The walk: "always" for `git status` approved `git push`.
        let mut grants = Grants::default();
        grants.bash_words.extend(command_words("git status"));
        assert!(grants.covers("bash", "git status --short"));
        assert!(!grants.covers("bash", "git push --force"));
    }
}
