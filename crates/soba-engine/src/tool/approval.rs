//! Approval of the tools that change things (`bash`, `write_file`,
//! `edit_file`, SPEC §11.1, §11.4): the [`ApprovalPolicy`] built from
//! `--auto-approve`, `--allow` and the user-level `tools.allow`; the
//! session's "always" grants; and the [`Approver`] the UI answers.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use soba_core::{ApprovalGrants, ToolInput};

use super::plain_line::{self, NotPlain};
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
        match command_words(self.input.str_arg("command").unwrap_or_default()) {
            Ok(words) if !words.is_empty() => {
                let listed: Vec<String> = words.iter().map(|word| format!("`{word}`")).collect();
                format!(
                    "bash commands starting with {} this session",
                    listed.join(", ")
                )
            }
            Ok(_) => "this call only: it runs no command".to_owned(),
            Err(why) => format!("this call only: it has {why}, which no grant covers"),
        }
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
                    // A line that is not plain is approved this once.
                    grants
                        .bash_words
                        .extend(command_words(command).unwrap_or_default());
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
        // A grant with no word (a hand-written log) would match nothing
        // anyway; it is not kept, so it is not shown either.
        grants.bash_words.extend(
            recorded
                .bash_words
                .iter()
                .filter(|words| !words.trim().is_empty())
                .cloned(),
        );
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
        let Ok(commands) = plain_line::commands(command) else {
            return false;
        };
        !commands.is_empty()
            && commands.iter().all(|words| {
                self.bash_words
                    .iter()
                    .any(|grant| grant_covers(grant, words))
            })
    }
}

/// Returns whether `grant` (its words: two, or one recorded by an older
/// soba) starts the command `words`. An empty grant, as a hand-written log
/// may hold, grants nothing.
fn grant_covers(grant: &str, words: &[String]) -> bool {
    // Words are joined by one space: a grant with an empty or blank word
    // (`"sed "` from `sed '' f`) would otherwise cover every `sed`.
    let granted: Vec<&str> = grant.split(' ').collect();
    granted
        .iter()
        .all(|word| !word.is_empty() && !word.contains(char::is_whitespace))
        && granted.len() <= words.len()
        && granted
            .iter()
            .zip(words)
            .all(|(wanted, word)| wanted == word)
}

/// Returns what an "always" answer to `command` grants: the first two
/// words of each of its commands (`cargo test`, `rm -r`, `sh
/// run_tests.sh`), or its one word, so approving `git status` does not
/// approve `git push`. A line that is not plain ([`plain_line`]) grants
/// nothing beyond the call itself: no grant would ever cover it.
pub(crate) fn command_words(command: &str) -> Result<Vec<String>, NotPlain> {
    let mut prefixes: Vec<String> = Vec::new();
    for words in plain_line::commands(command)? {
        let prefix: Vec<&str> = words
            .iter()
            .take(PREFIX_WORDS)
            .map(String::as_str)
            .collect();
        // A grant is its words joined by spaces, so an empty word or one
        // with blanks in it (`sed '' f`, `'git status' x`) cannot be one.
        if prefix
            .iter()
            .any(|word| word.is_empty() || word.contains(char::is_whitespace))
        {
            return Err(NotPlain::BlankWord);
        }
        let prefix = prefix.join(" ");
        if !prefix.trim().is_empty() && !prefixes.contains(&prefix) {
            prefixes.push(prefix);
        }
    }
    Ok(prefixes)
}

/// The words of a command an "always" answer grants.
const PREFIX_WORDS: usize = 2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_words_take_each_commands_first_two_words() {
        let words = |line: &str| command_words(line).unwrap();
        assert_eq!(words("cargo test -p x"), ["cargo test"]);
        assert_eq!(
            words("cargo test 2>&1 | tail -5"),
            ["cargo test", "tail -5"]
        );
        assert_eq!(words("make &>/dev/null & sleep 1"), ["make", "sleep 1"]);
        assert_eq!(words("make 2>&1 >/dev/null"), ["make"]);
        assert_eq!(
            words("cd a && make; make install\nls"),
            ["cd a", "make", "make install", "ls"]
        );
        assert!(words("   ").is_empty());
        assert_eq!(command_words("make > log"), Err(NotPlain::Redirection));
        // The attack of session 23: `sed '' README.md` granted "sed ",
        // read back as "sed", which covered `sed -n '1e touch p'`.
        assert_eq!(command_words("sed '' README.md"), Err(NotPlain::BlankWord));
        assert_eq!(command_words("'git status' x"), Err(NotPlain::BlankWord));
        let mut grants = Grants::default();
        grants
            .bash_words
            .extend(["sed ".to_owned(), " ls".to_owned()]);
        assert!(!grants.covers("bash", "sed -n '1e touch p' README.md"));
        assert!(!grants.covers("bash", "ls -la"));
    }

    #[test]
    fn grants_cover_plain_commands_whose_every_command_starts_with_a_grant() {
        let mut grants = Grants::default();
        grants
            .bash_words
            .extend(["cargo test".to_owned(), "tail".to_owned()]);
        assert!(grants.covers("bash", "cargo test --lib"));
        assert!(grants.covers("bash", "cargo test | tail -3"));
        assert!(grants.covers("bash", "cargo test 2>&1 | tail -3"));
        assert!(!grants.covers("bash", "cargo build"));
        assert!(!grants.covers("bash", "cargo"));
        assert!(!grants.covers("bash", "cargo test && rm -rf target"));
        assert!(!grants.covers("bash", "cargo test $(rm x)"));
        assert!(!grants.covers("bash", "cargo test `rm x`"));
        assert!(!grants.covers("bash", ""));
        assert!(!grants.covers("write_file", ""));
        // The walk: "always" for `git status` approved `git push`.
        let mut grants = Grants::default();
        grants
            .bash_words
            .extend(command_words("git status").unwrap());
        assert!(grants.covers("bash", "git status --short"));
        assert!(!grants.covers("bash", "git push --force"));
        // The attack of session 22: each ran `touch` under the grant.
        for line in [
            "git status \\<& touch /tmp/pwnA",
            "git status \\>&touch /tmp/pwnD",
            "git status ${x:=a[\\$\\(touch /tmp/pwnB\\)]} ${PATH:x}",
            "git status --short > /tmp/pwnC",
            "git status & touch /tmp/pwnF",
        ] {
            assert!(!grants.covers("bash", line), "{line}");
        }
    }

    #[test]
    fn an_empty_grant_from_a_log_grants_nothing() {
        let approvals = Approvals::non_interactive(ApprovalPolicy::default());
        approvals.restore(&ApprovalGrants {
            tools: BTreeSet::new(),
            bash_words: ["".to_owned(), "  ".to_owned()].into_iter().collect(),
        });
        assert!(approvals.grants().bash_words.is_empty());
        assert!(!approvals.lock().covers("bash", "rm -rf /tmp/x"));
    }
}
