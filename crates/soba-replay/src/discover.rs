//! Finds the session transcripts other agents keep in their standard
//! places, for `soba replay` with no path:
//!
//! | agent | where | moved by |
//! |---|---|---|
//! | Claude Code | `~/.claude/projects/<project>/<session>.jsonl`, and `~/.config/claude/projects` | `CLAUDE_CONFIG_DIR` (a comma-separated list, as ccusage reads it: only those then), `XDG_CONFIG_HOME` |
//! | Codex | `~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`, `~/.codex/archived_sessions/rollout-*.jsonl` | `CODEX_HOME` |
//! | pi | `~/.pi/agent/sessions/<project>/*.jsonl` | `PI_CODING_AGENT_SESSION_DIR`, `PI_CODING_AGENT_DIR` |
//! | Gemini CLI | `~/.gemini/tmp/<project>/chats/session-*.json` and `.jsonl` | `GEMINI_CLI_HOME` (replaces the home folder) |
//! | opencode | `~/.local/share/opencode/opencode.db` (SQLite, opencode 1.2.0 and later: one file, every session) and `~/.local/share/opencode/storage/session/<project>/ses_*.json` (the JSON storage of opencode before 1.2.0) | `XDG_DATA_HOME` |
//!
//! opencode 1.2.0 copied the sessions of its JSON storage into
//! `opencode.db` and left the old files in place: when `opencode.db` is
//! there, the storage is not searched (its sessions would be replayed
//! twice) and its row says so.
//!
//! Sub-agent transcripts (Claude Code's `subagents/` folders and
//! `agent-*.jsonl` files, Gemini's per-session sub-folders of `chats/`)
//! are left out: they are part of their parent's session, and replaying
//! them alone would count their work twice. The folders are walked as
//! `soba import` walks one (sorted, linked folders not followed, special
//! files skipped with a reason).

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use soba_store::import::{DirFile, dir_files_within};

/// An agent whose sessions are discovered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Agent {
    /// Anthropic's Claude Code.
    ClaudeCode,
    /// OpenAI's Codex CLI.
    Codex,
    /// The pi coding agent.
    Pi,
    /// Google's Gemini CLI.
    Gemini,
    /// sst's opencode.
    OpenCode,
}

impl Agent {
    /// Every agent, in report order.
    pub const ALL: [Agent; 5] = [
        Agent::ClaudeCode,
        Agent::Codex,
        Agent::Pi,
        Agent::Gemini,
        Agent::OpenCode,
    ];

    /// Returns the name used by `--agent` and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "claude-code",
            Agent::Codex => "codex",
            Agent::Pi => "pi",
            Agent::Gemini => "gemini",
            Agent::OpenCode => "opencode",
        }
    }

    /// Parses an `--agent` name (`claude` and `gemini-cli` too).
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "claude-code" | "claude" => Some(Agent::ClaudeCode),
            "codex" => Some(Agent::Codex),
            "pi" => Some(Agent::Pi),
            "gemini" | "gemini-cli" => Some(Agent::Gemini),
            "opencode" => Some(Agent::OpenCode),
            _ => None,
        }
    }
}

impl fmt::Display for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The environment discovery reads: the home folder and the variables
/// that move each agent's folder. [`Environment::from_process`] reads the
/// real one; tests build their own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    /// The user's home folder.
    pub home: Option<PathBuf>,
    /// `CLAUDE_CONFIG_DIR`.
    pub claude_config_dir: Option<OsString>,
    /// `XDG_CONFIG_HOME`.
    pub xdg_config_home: Option<OsString>,
    /// `CODEX_HOME`.
    pub codex_home: Option<OsString>,
    /// `PI_CODING_AGENT_DIR`.
    pub pi_agent_dir: Option<OsString>,
    /// `PI_CODING_AGENT_SESSION_DIR`.
    pub pi_session_dir: Option<OsString>,
    /// `GEMINI_CLI_HOME`.
    pub gemini_cli_home: Option<OsString>,
    /// `XDG_DATA_HOME` (where opencode keeps its data).
    pub xdg_data_home: Option<OsString>,
}

impl Environment {
    /// Reads the process's home folder and variables (an empty variable
    /// counts as unset).
    pub fn from_process() -> Self {
        let var = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
        Environment {
            home: etcetera::home_dir().ok(),
            claude_config_dir: var("CLAUDE_CONFIG_DIR"),
            xdg_config_home: var("XDG_CONFIG_HOME"),
            codex_home: var("CODEX_HOME"),
            pi_agent_dir: var("PI_CODING_AGENT_DIR"),
            pi_session_dir: var("PI_CODING_AGENT_SESSION_DIR"),
            gemini_cli_home: var("GEMINI_CLI_HOME"),
            xdg_data_home: var("XDG_DATA_HOME"),
        }
    }

    /// Returns the folders searched for `agent`'s sessions, each with the
    /// rule that picks its session files, in search order.
    pub fn roots(&self, agent: Agent) -> Vec<Root> {
        // A relative home or variable would depend on where soba runs:
        // such values are ignored, as the XDG spec says of its variables.
        let absolute = |value: &OsString| Some(PathBuf::from(value)).filter(|p| p.is_absolute());
        let home = self.home.as_deref().filter(|home| home.is_absolute());
        let under_home = |rest: &str| home.map(|home| home.join(rest));
        // One spelling of each folder (`/c/` and `/c/./` are `/c`), so a
        // root named twice is reported as one folder, not "X is X".
        let root = |path: PathBuf, layout: Layout| Root {
            agent,
            path: path.components().collect(),
            layout,
        };
        match agent {
            Agent::ClaudeCode => match &self.claude_config_dir {
                Some(list) => split_list(list)
                    .into_iter()
                    .filter(|dir| dir.is_absolute())
                    .map(|dir| root(dir.join("projects"), Layout::ClaudeProjects))
                    .collect(),
                None => {
                    let xdg = self
                        .xdg_config_home
                        .as_ref()
                        .and_then(absolute)
                        .or_else(|| under_home(".config"));
                    under_home(".claude")
                        .into_iter()
                        .chain(xdg.map(|config| config.join("claude")))
                        .map(|dir| root(dir.join("projects"), Layout::ClaudeProjects))
                        .collect()
                }
            },
            Agent::Codex => {
                let codex = self
                    .codex_home
                    .as_ref()
                    .and_then(absolute)
                    .or_else(|| under_home(".codex"));
                codex
                    .into_iter()
                    .flat_map(|dir| {
                        [
                            root(dir.join("sessions"), Layout::CodexDated),
                            root(dir.join("archived_sessions"), Layout::CodexFlat),
                        ]
                    })
                    .collect()
            }
            Agent::Pi => {
                let sessions = match (
                    self.pi_session_dir.as_ref().and_then(absolute),
                    self.pi_agent_dir.as_ref().and_then(absolute),
                ) {
                    (Some(dir), _) => Some(dir),
                    (None, Some(agent_dir)) => Some(agent_dir.join("sessions")),
                    (None, None) => under_home(".pi/agent/sessions"),
                };
                sessions
                    .into_iter()
                    .map(|dir| root(dir, Layout::PiProjects))
                    .collect()
            }
            Agent::Gemini => {
                let base = self
                    .gemini_cli_home
                    .as_ref()
                    .and_then(absolute)
                    .or_else(|| home.map(Path::to_owned));
                base.into_iter()
                    .map(|base| root(base.join(".gemini").join("tmp"), Layout::GeminiChats))
                    .collect()
            }
            Agent::OpenCode => self
                .opencode_data()
                .into_iter()
                .flat_map(|data| {
                    [
                        root(data.clone(), Layout::OpenCodeDb),
                        root(
                            data.join("storage").join("session"),
                            Layout::OpenCodeSessions,
                        ),
                    ]
                })
                .collect(),
        }
    }

    /// opencode's data folder: `$XDG_DATA_HOME/opencode`, by default
    /// `~/.local/share/opencode` (on macOS too).
    fn opencode_data(&self) -> Option<PathBuf> {
        let absolute = |value: &OsString| Some(PathBuf::from(value)).filter(|p| p.is_absolute());
        let home = self.home.as_deref().filter(|home| home.is_absolute());
        self.xdg_data_home
            .as_ref()
            .and_then(absolute)
            .or_else(|| home.map(|home| home.join(".local").join("share")))
            .map(|data| data.join("opencode"))
    }
}

/// Splits a comma-separated list of folders, dropping empty entries.
fn split_list(list: &OsString) -> Vec<PathBuf> {
    list.to_string_lossy()
        .split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(PathBuf::from)
        .collect()
}

/// A folder searched for one agent's sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    /// The agent.
    pub agent: Agent,
    /// The folder.
    pub path: PathBuf,
    /// How deep sessions lie under it, in folders.
    pub layout: Layout,
}

/// Where an agent's session files lie under a root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `<project>/<session>.jsonl` (Claude Code).
    ClaudeProjects,
    /// `YYYY/MM/DD/rollout-*.jsonl` (Codex's live sessions).
    CodexDated,
    /// `rollout-*.jsonl` (Codex's archived sessions).
    CodexFlat,
    /// `<project>/*.jsonl` or `*.jsonl` (pi).
    PiProjects,
    /// `<project>/chats/session-*.json[l]` (Gemini CLI).
    GeminiChats,
    /// `<project>/ses_*.json` (opencode's storage, before 1.2.0).
    OpenCodeSessions,
    /// `opencode.db` (opencode 1.2.0 and later: every session in one file).
    OpenCodeDb,
}

impl Layout {
    /// The most folders between the root and a session file.
    pub fn depth(self) -> usize {
        match self {
            Layout::ClaudeProjects | Layout::PiProjects | Layout::OpenCodeSessions => 1,
            Layout::CodexDated => 3,
            Layout::CodexFlat | Layout::OpenCodeDb => 0,
            Layout::GeminiChats => 2,
        }
    }
}

impl Root {
    /// Returns whether `path`, a file under this root, is one of the
    /// agent's session transcripts (not a sub-agent's, not another file
    /// the agent keeps there).
    pub fn is_session_file(&self, path: &Path) -> bool {
        let Ok(relative) = path.strip_prefix(&self.path) else {
            return false;
        };
        // Names are matched as text; bytes that are not UTF-8 do not hide a
        // file (they are replaced, and the name still ends in `.jsonl`).
        let parts: Vec<String> = relative
            .components()
            .map(|part| part.as_os_str().to_string_lossy().into_owned())
            .collect();
        let Some((name, folders)) = parts.split_last() else {
            return false;
        };
        let jsonl = name.ends_with(".jsonl");
        match self.layout {
            Layout::ClaudeProjects => folders.len() == 1 && jsonl && !name.starts_with("agent-"),
            Layout::CodexDated => folders.len() == 3 && jsonl && name.starts_with("rollout-"),
            Layout::CodexFlat => folders.is_empty() && jsonl && name.starts_with("rollout-"),
            Layout::PiProjects => folders.len() <= 1 && jsonl,
            Layout::GeminiChats => {
                folders.len() == 2
                    && folders[1] == "chats"
                    && name.starts_with("session-")
                    && (jsonl || name.ends_with(".json"))
            }
            Layout::OpenCodeSessions => {
                folders.len() == 1 && name.starts_with("ses") && name.ends_with(".json")
            }
            Layout::OpenCodeDb => folders.is_empty() && name == "opencode.db",
        }
    }
}

/// One transcript found.
#[derive(Debug)]
pub struct Found {
    /// The agent that wrote it.
    pub agent: Agent,
    /// The file, ready to import.
    pub file: DirFile,
}

/// What one root held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootReport {
    /// The folder searched.
    pub root: Root,
    /// Whether it exists.
    pub exists: bool,
    /// The session files found under it.
    pub files: usize,
    /// Why it could not be searched, when it exists: not a folder, or not
    /// readable (with the system's reason).
    pub error: Option<String>,
    /// The folder it is the same as, when an earlier root already named it
    /// (through a link or twice in a list): it is not searched again.
    pub same_as: Option<PathBuf>,
    /// What else the user should know about the agent's sessions there:
    /// why an existing folder was not searched (opencode's storage, when
    /// `opencode.db` holds its sessions).
    pub note: Option<String>,
}

/// Everything discovery found.
#[derive(Debug, Default)]
pub struct Discovery {
    /// Each folder searched, in search order.
    pub roots: Vec<RootReport>,
    /// The transcripts, root by root, each root's in walk order, and the
    /// subfolders where they could lie that could not be read (each an
    /// entry whose [`DirFile::walk_error`] says why, replayed as a skipped
    /// row). A file reached through two roots is listed once.
    pub files: Vec<Found>,
}

impl Discovery {
    /// Returns the number of files found for `agent`.
    pub fn count(&self, agent: Agent) -> usize {
        self.files
            .iter()
            .filter(|found| found.agent == agent)
            .count()
    }

    /// Returns what discovery found, per agent and folder, one safe line
    /// each.
    pub fn lines(&self) -> Vec<String> {
        use soba_core::terminal::sanitize_line;
        let mut lines = Vec::new();
        for root in &self.roots {
            let folder = sanitize_line(&root.root.path.display().to_string()).into_owned();
            let agent = root.root.agent;
            lines.push(match (&root.error, root.exists, &root.same_as) {
                (Some(error), _, _) => format!("{agent}: {folder} {}", sanitize_line(error)),
                (None, false, _) => format!("{agent}: no {folder}"),
                (None, true, Some(first)) if *first == root.root.path => {
                    format!("{agent}: {folder} named twice (searched once)")
                }
                (None, true, Some(first)) => format!(
                    "{agent}: {folder} is {} (searched once)",
                    sanitize_line(&first.display().to_string())
                ),
                (None, true, None) => format!(
                    "{agent}: {} session file{} in {folder}",
                    root.files,
                    if root.files == 1 { "" } else { "s" }
                ),
            });
            if let Some(note) = &root.note {
                lines.push(format!("{agent}: {}", sanitize_line(note)));
            }
        }
        lines
    }
}

/// Searches the standard places of `agents` (every agent when empty).
/// Each root is walked only as deep as its agent's layout puts sessions.
pub fn discover(env: &Environment, agents: &[Agent]) -> Discovery {
    let mut discovery = Discovery::default();
    let mut seen_files = std::collections::HashSet::new();
    let mut seen_roots: Vec<(PathBuf, PathBuf)> = Vec::new();
    for agent in Agent::ALL {
        if !agents.is_empty() && !agents.contains(&agent) {
            continue;
        }
        for root in env.roots(agent) {
            let mut report = RootReport {
                exists: false,
                root: root.clone(),
                files: 0,
                error: None,
                same_as: None,
                note: opencode_storage_note(&root),
            };
            match std::fs::metadata(&root.path) {
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => {
                    report.exists = true;
                    report.error = Some(format!("cannot be read: {err}"));
                }
                Ok(meta) if !meta.is_dir() => {
                    report.exists = true;
                    report.error = Some("is not a folder".to_owned());
                }
                Ok(_) => report.exists = true,
            }
            if report.exists && report.error.is_none() && report.note.is_none() {
                let canonical =
                    std::fs::canonicalize(&root.path).unwrap_or_else(|_| root.path.clone());
                if let Some((_, first)) = seen_roots.iter().find(|(seen, _)| *seen == canonical) {
                    report.same_as = Some(first.clone());
                } else {
                    seen_roots.push((canonical, root.path.clone()));
                    search(&root, &mut report, &mut seen_files, &mut discovery.files);
                }
            }
            discovery.roots.push(report);
        }
    }
    discovery
}

/// The note of opencode's pre-1.2 storage root when `opencode.db` is
/// beside it: opencode copied those sessions into the database, which is
/// read instead, so the storage is not searched.
fn opencode_storage_note(root: &Root) -> Option<String> {
    if root.layout != Layout::OpenCodeSessions {
        return None;
    }
    let db = root.path.parent()?.parent()?.join("opencode.db");
    db.is_file().then(|| {
        format!(
            "{} not searched: opencode 1.2.0 and later copied its sessions into {}, which is read instead",
            root.path.display(),
            db.display()
        )
    })
}

/// Walks one root and adds its session files (and its unreadable
/// subfolders) to `files`.
fn search(
    root: &Root,
    report: &mut RootReport,
    seen: &mut std::collections::HashSet<PathBuf>,
    files: &mut Vec<Found>,
) {
    let walked = match dir_files_within(&root.path, root.layout.depth()) {
        Ok(walked) => walked,
        Err(err) => {
            let cause = std::error::Error::source(&err)
                .map(|cause| format!(": {cause}"))
                .unwrap_or_default();
            report.error = Some(format!("cannot be read{cause}"));
            return;
        }
    };
    for file in walked {
        if file.walk_error().is_none() && !root.is_session_file(&file.path) {
            continue;
        }
        // Gemini CLI resumes an old `.json` recording by copying it into a
        // `.jsonl` of the same name and going on there: the `.jsonl` holds
        // the whole session, the `.json` only its start.
        if root.layout == Layout::GeminiChats
            && file.path.extension().is_some_and(|ext| ext == "json")
            && file.path.with_extension("jsonl").is_file()
        {
            continue;
        }
        let key = std::fs::canonicalize(&file.path).unwrap_or_else(|_| file.path.clone());
        if !seen.insert(key) {
            continue;
        }
        if file.walk_error().is_none() {
            report.files += 1;
        }
        files.push(Found {
            agent: root.agent,
            file,
        });
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStrExt;

    use super::*;

    fn env(home: &str) -> Environment {
        Environment {
            home: Some(PathBuf::from(home)),
            ..Environment::default()
        }
    }

    fn paths(roots: Vec<Root>) -> Vec<String> {
        roots
            .into_iter()
            .map(|root| root.path.display().to_string())
            .collect()
    }

    #[test]
    fn standard_places_follow_the_variables_that_move_them() {
        let plain = env("/h");
        assert_eq!(
            paths(plain.roots(Agent::ClaudeCode)),
            ["/h/.claude/projects", "/h/.config/claude/projects"]
        );
        assert_eq!(
            paths(plain.roots(Agent::Codex)),
            ["/h/.codex/sessions", "/h/.codex/archived_sessions"]
        );
        assert_eq!(paths(plain.roots(Agent::Pi)), ["/h/.pi/agent/sessions"]);
        assert_eq!(paths(plain.roots(Agent::Gemini)), ["/h/.gemini/tmp"]);

        let moved = Environment {
            claude_config_dir: Some(" /a, ,/b ,".into()),
            xdg_config_home: Some("/x".into()),
            codex_home: Some("/c".into()),
            pi_agent_dir: Some("/p".into()),
            gemini_cli_home: Some("/g".into()),
            ..env("/h")
        };
        assert_eq!(
            paths(moved.roots(Agent::ClaudeCode)),
            ["/a/projects", "/b/projects"]
        );
        assert_eq!(
            paths(moved.roots(Agent::Codex)),
            ["/c/sessions", "/c/archived_sessions"]
        );
        assert_eq!(paths(moved.roots(Agent::Pi)), ["/p/sessions"]);
        assert_eq!(paths(moved.roots(Agent::Gemini)), ["/g/.gemini/tmp"]);
        let xdg = Environment {
            xdg_config_home: Some("/x".into()),
            pi_session_dir: Some("/s".into()),
            pi_agent_dir: Some("/p".into()),
            ..env("/h")
        };
        assert_eq!(
            paths(xdg.roots(Agent::ClaudeCode)),
            ["/h/.claude/projects", "/x/claude/projects"]
        );
        assert_eq!(paths(xdg.roots(Agent::Pi)), ["/s"]);
        assert!(Environment::default().roots(Agent::Pi).is_empty());
        // Relative values are ignored: they would depend on where soba runs.
        let relative = Environment {
            codex_home: Some("rel/codex".into()),
            xdg_config_home: Some("rel".into()),
            ..env("/h")
        };
        assert_eq!(
            paths(relative.roots(Agent::Codex)),
            ["/h/.codex/sessions", "/h/.codex/archived_sessions"]
        );
        assert_eq!(
            paths(relative.roots(Agent::ClaudeCode)),
            ["/h/.claude/projects", "/h/.config/claude/projects"]
        );
        assert!(env("relative-home").roots(Agent::Gemini).is_empty());
    }

    #[test]
    fn only_session_files_are_picked_not_sub_agents_or_other_files() {
        let root = |agent, layout| Root {
            agent,
            path: "/r".into(),
            layout,
        };
        let claude = root(Agent::ClaudeCode, Layout::ClaudeProjects);
        assert!(claude.is_session_file(Path::new("/r/-w-app/0a1b.jsonl")));
        assert!(!claude.is_session_file(Path::new("/r/-w-app/agent-1.jsonl")));
        assert!(!claude.is_session_file(Path::new("/r/-w-app/0a1b/subagents/agent-1.jsonl")));
        assert!(!claude.is_session_file(Path::new("/r/-w-app/notes.txt")));
        assert!(!claude.is_session_file(Path::new("/elsewhere/-w-app/0a1b.jsonl")));
        let codex = root(Agent::Codex, Layout::CodexDated);
        assert!(codex.is_session_file(Path::new(
            "/r/2026/11/30/rollout-2026-11-30T10-00-00-x.jsonl"
        )));
        assert!(!codex.is_session_file(Path::new("/r/2026/11/30/history.jsonl")));
        assert!(!codex.is_session_file(Path::new("/r/rollout-x.jsonl")));
        let archived = root(Agent::Codex, Layout::CodexFlat);
        assert!(archived.is_session_file(Path::new("/r/rollout-x.jsonl")));
        assert!(!archived.is_session_file(Path::new("/r/old/rollout-x.jsonl")));
        let pi = root(Agent::Pi, Layout::PiProjects);
        // A name that is not UTF-8 is still a session file.
        let name = std::ffi::OsStr::from_bytes(b"/r/--w--/c\xfe.jsonl");
        assert!(pi.is_session_file(Path::new(name)));
        assert!(!pi.is_session_file(Path::new("/r/a/b/c.jsonl")));
        let gemini = root(Agent::Gemini, Layout::GeminiChats);
        assert!(
            gemini.is_session_file(Path::new("/r/app/chats/session-2026-11-30T10-00-1a2b.json"))
        );
        assert!(gemini.is_session_file(Path::new(
            "/r/app/chats/session-2026-11-30T10-00-1a2b.jsonl"
        )));
        assert!(!gemini.is_session_file(Path::new("/r/app/logs.json")));
        assert!(!gemini.is_session_file(Path::new("/r/app/chats/1a2b/session-x.jsonl")));
        assert_eq!(Agent::parse(" Claude "), Some(Agent::ClaudeCode));
        assert_eq!(Agent::parse("gemini-cli"), Some(Agent::Gemini));
        assert_eq!(Agent::parse("cursor"), None);
    }

    #[test]
    fn opencode_sessions_are_found_in_its_database_or_else_its_storage() {
        assert_eq!(
            paths(env("/h").roots(Agent::OpenCode)),
            [
                "/h/.local/share/opencode",
                "/h/.local/share/opencode/storage/session"
            ]
        );
        let moved = Environment {
            xdg_data_home: Some("/d".into()),
            ..env("/h")
        };
        assert_eq!(
            paths(moved.roots(Agent::OpenCode)),
            ["/d/opencode", "/d/opencode/storage/session"]
        );
        assert_eq!(Agent::parse("OpenCode"), Some(Agent::OpenCode));
        let home = tempfile::tempdir().unwrap();
        let data = home.path().join(".local/share/opencode");
        let project = data.join("storage/session/prj1");
        std::fs::create_dir_all(&project).unwrap();
        for name in ["ses_a.json", "notes.txt"] {
            std::fs::write(project.join(name), "{}").unwrap();
        }
        // Message files are read by the session's import, not found alone.
        std::fs::create_dir_all(data.join("storage/message/ses_a")).unwrap();
        std::fs::write(data.join("storage/message/ses_a/msg_1.json"), "{}").unwrap();
        // Other files of the data folder are not sessions.
        std::fs::write(data.join("auth.json"), "{}").unwrap();
        let env = Environment {
            home: Some(home.path().into()),
            ..Environment::default()
        };
        let found = discover(&env, &[Agent::OpenCode]);
        let names: Vec<PathBuf> = found.files.iter().map(|f| f.file.path.clone()).collect();
        assert_eq!(names, [project.join("ses_a.json")]);
        assert_eq!(found.roots[1].note, None);
        // With the database, its sessions are the storage's: only it is read.
        std::fs::write(data.join("opencode.db"), "").unwrap();
        let found = discover(&env, &[Agent::OpenCode]);
        let names: Vec<PathBuf> = found.files.iter().map(|f| f.file.path.clone()).collect();
        assert_eq!(names, [data.join("opencode.db")]);
        assert_eq!(found.roots[0].files, 1);
        assert_eq!(found.roots[0].note, None);
        assert_eq!(found.roots[1].files, 0);
        assert_eq!(
            found.roots[1].note.as_deref(),
            Some(
                format!(
                    "{} not searched: opencode 1.2.0 and later copied its sessions into {}, which is read instead",
                    data.join("storage/session").display(),
                    data.join("opencode.db").display()
                )
                .as_str()
            )
        );
    }

    #[test]
    fn a_gemini_recording_carried_on_in_jsonl_is_found_once() {
        let home = tempfile::tempdir().unwrap();
        let chats = home.path().join(".gemini/tmp/app/chats");
        std::fs::create_dir_all(&chats).unwrap();
        for name in ["session-a.json", "session-a.jsonl", "session-b.json"] {
            std::fs::write(chats.join(name), "{}").unwrap();
        }
        let env = Environment {
            home: Some(home.path().into()),
            ..Environment::default()
        };
        let found = discover(&env, &[Agent::Gemini]);
        let mut names: Vec<String> = found
            .files
            .iter()
            .map(|f| {
                f.file
                    .path
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        assert_eq!(names, ["session-a.jsonl", "session-b.json"]);
    }
}
