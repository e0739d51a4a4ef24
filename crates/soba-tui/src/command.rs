//! Slash commands of the interactive agent (SPEC §11.3): parsing one typed
//! line into a [`SlashCommand`], the usage text of each, and which of them
//! act at once during a turn or a barrier (SPEC §7.1).

use soba_core::CheckpointKind;

/// One parsed slash command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlashCommand {
    /// `/budget`: every limit, effective tokens and their source.
    Budget,
    /// `/compact [--save] [instructions]`.
    Compact {
        /// `--save`: mirror a `full` capsule into `.soba/memory/`.
        save: bool,
        /// Instructions for the summarizer.
        instructions: Option<String>,
    },
    /// `/auto-compact on|off`.
    AutoCompact(bool),
    /// `/model [id]`: switch model, or a picker without an id.
    Model(Option<String>),
    /// `/capsule`: list the session's capsules and the project's capsule files.
    CapsuleList,
    /// `/capsule create "title" [--force]`.
    CapsuleCreate {
        /// The handoff's title.
        title: String,
        /// Overwrite an existing file.
        force: bool,
    },
    /// `/capsule export <ck> <path> [--force]`.
    CapsuleExport {
        /// The checkpoint id, short or full.
        checkpoint: String,
        /// Where to write the `.capsule.md`.
        path: String,
        /// Overwrite an existing file.
        force: bool,
    },
    /// `/capsule load <path>`.
    CapsuleLoad {
        /// The `.capsule.md` to load.
        path: String,
    },
    /// `/checkpoint milestone|pivot "note"`.
    Checkpoint {
        /// Milestone or plan pivot.
        kind: CheckpointKind,
        /// The note.
        note: String,
    },
    /// `/rewind [N|id]`.
    Rewind(Option<RewindTarget>),
    /// `/resume`: a picker of this workspace's sessions.
    Resume,
    /// `/skill <name>` or `/skill off <name>`.
    Skill {
        /// The skill's file stem in `.soba/skills/`.
        name: String,
        /// `off`: deactivate.
        off: bool,
    },
    /// `/clear` (alias `/new`): leave this session (kept, `/resume` opens
    /// it again) for a new one.
    Clear,
    /// `/usage` (alias `/cost`): the session's recorded tokens, and their
    /// list price when the model has one.
    Usage,
    /// `/status`: model, window, session, context use.
    Status,
    /// `/help`.
    Help,
    /// `/quit` (alias `/exit`).
    Quit,
}

/// What `/rewind` was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RewindTarget {
    /// The N-th most recent real user message (1 = the latest).
    Nth(usize),
    /// A checkpoint id, a checkpoint entry or any entry id (short or full).
    Id(String),
}

/// A line that is not a valid command: what is wrong, plus the usage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandError {
    /// What is wrong, lowercase.
    pub message: String,
    /// The usage line(s) of the command, or the whole command list.
    pub usage: String,
}

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.usage.is_empty() {
            return write!(f, "{}", self.message);
        }
        write!(f, "{}\n{}", self.message, self.usage)
    }
}

/// Every command with its usage and one line of help, in `/help` order.
pub const COMMANDS: &[(&str, &str, &str)] = &[
    (
        "budget",
        "/budget",
        "every limit, effective tokens and their source",
    ),
    (
        "compact",
        "/compact [--save] [instructions]",
        "compact now (idle: no inference follows); --save mirrors a full capsule into .soba/memory/",
    ),
    (
        "auto-compact",
        "/auto-compact on|off",
        "turn soft compaction triggers on or off",
    ),
    (
        "model",
        "/model [id]",
        "switch model (a picker without an id)",
    ),
    (
        "capsule",
        "/capsule | /capsule create \"title\" [--force] | /capsule export <ck> <path> [--force] | /capsule load <path>",
        "list, write a handoff, export or load portable capsules",
    ),
    (
        "checkpoint",
        "/checkpoint milestone|pivot \"note\"",
        "record a milestone or a plan pivot",
    ),
    (
        "rewind",
        "/rewind [N|id]",
        "rewind the conversation (files on disk are not changed); a picker without an argument",
    ),
    (
        "resume",
        "/resume",
        "open another session of this workspace",
    ),
    (
        "skill",
        "/skill <name> | /skill off <name>",
        "activate or deactivate .soba/skills/<name>.md",
    ),
    (
        "clear",
        "/clear",
        "start a new session (this one is kept: /resume opens it again); also /new",
    ),
    (
        "usage",
        "/usage",
        "tokens the session's requests used, and their list price; also /cost",
    ),
    (
        "status",
        "/status",
        "model, context window, session and how full the context is",
    ),
    ("help", "/help", "this list"),
    (
        "quit",
        "/quit",
        "leave soba (also /exit, Ctrl-C twice, or Ctrl-D on an empty line)",
    ),
];

/// Returns the usage line of `name`, or every command's when unknown.
pub fn usage(name: &str) -> String {
    match COMMANDS.iter().find(|(command, _, _)| *command == name) {
        Some((_, usage, _)) => format!("usage: {usage}"),
        None => help_text(),
    }
}

/// Returns the `/help` text: keys, then every command with its help.
pub fn help_text() -> String {
    let mut text = String::from(
        "Enter sends (queued while a turn runs) · Alt-Enter new line · Esc or Ctrl-C cancels the turn · \
         Ctrl-C twice within 2 s quits · PgUp/PgDn scroll\n\
         Tab completes /commands and @paths · @path attaches a workspace file · \
         Up/Down recall what you sent · Ctrl-O shows tool output · Ctrl-U clears the line\n",
    );
    for (_, usage, help) in COMMANDS {
        text.push_str(&format!("{usage}\n    {help}\n"));
    }
    text.trim_end().to_owned()
}

fn error(name: &str, message: impl Into<String>) -> CommandError {
    CommandError {
        message: message.into(),
        usage: usage(name),
    }
}

/// Splits arguments at whitespace, honouring `"…"` and `'…'` quotes and
/// `\` escapes inside double quotes.
pub fn split_args(text: &str) -> Result<Vec<String>, String> {
    let mut args = Vec::new();
    let mut current = String::new();
    let mut in_arg = false;
    let mut chars = text.chars();
    while let Some(ch) = chars.next() {
        match ch {
            '"' => {
                in_arg = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(escaped) => current.push(escaped),
                            None => return Err("unterminated \" quote".to_owned()),
                        },
                        Some(other) => current.push(other),
                        None => return Err("unterminated \" quote".to_owned()),
                    }
                }
            }
            '\'' => {
                in_arg = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(other) => current.push(other),
                        None => return Err("unterminated ' quote".to_owned()),
                    }
                }
            }
            ch if ch.is_whitespace() => {
                if in_arg {
                    args.push(std::mem::take(&mut current));
                    in_arg = false;
                }
            }
            other => {
                in_arg = true;
                current.push(other);
            }
        }
    }
    if in_arg {
        args.push(current);
    }
    Ok(args)
}

/// Returns free text as typed: trimmed, and unquoted when the whole of it is
/// one quoted string.
fn free_text(text: &str) -> String {
    let trimmed = text.trim();
    if trimmed.len() >= 2 {
        for quote in ['"', '\''] {
            if trimmed.starts_with(quote)
                && trimmed.ends_with(quote)
                && !trimmed[1..trimmed.len() - 1].contains(quote)
            {
                return trimmed[1..trimmed.len() - 1].trim().to_owned();
            }
        }
    }
    trimmed.to_owned()
}

/// Removes a `--force` flag from `args`, returning whether it was there.
fn take_force(args: &mut Vec<String>) -> bool {
    let before = args.len();
    args.retain(|arg| arg != "--force");
    args.len() != before
}

/// Returns whether `line` is a slash command (as opposed to a message that
/// merely starts with a path such as `/usr/bin`, which has a second `/`).
pub fn is_command(line: &str) -> bool {
    let trimmed = line.trim_start();
    let Some(rest) = trimmed.strip_prefix('/') else {
        return false;
    };
    let word = rest.split_whitespace().next().unwrap_or("");
    !word.contains('/')
}

/// Parses one typed line starting with `/`.
pub fn parse(line: &str) -> Result<SlashCommand, CommandError> {
    let line = line.trim();
    let Some(body) = line.strip_prefix('/') else {
        return Err(CommandError {
            message: "a command starts with /".to_owned(),
            usage: help_text(),
        });
    };
    let (name, rest) = match body.find(char::is_whitespace) {
        Some(idx) => (&body[..idx], body[idx..].trim()),
        None => (body, ""),
    };
    let args = || split_args(rest).map_err(|problem| error(name, format!("/{name}: {problem}")));
    match name {
        "budget" | "help" | "resume" | "quit" | "exit" | "clear" | "new" | "usage" | "cost"
        | "status" => {
            if !rest.is_empty() {
                let canonical = match name {
                    "exit" => "quit",
                    "new" => "clear",
                    "cost" => "usage",
                    other => other,
                };
                return Err(error(canonical, format!("/{name} takes no arguments")));
            }
            Ok(match name {
                "budget" => SlashCommand::Budget,
                "help" => SlashCommand::Help,
                "resume" => SlashCommand::Resume,
                "clear" | "new" => SlashCommand::Clear,
                "usage" | "cost" => SlashCommand::Usage,
                "status" => SlashCommand::Status,
                _ => SlashCommand::Quit,
            })
        }
        "compact" => {
            let (save, text) = match rest.strip_prefix("--save") {
                Some(after) if after.is_empty() || after.starts_with(char::is_whitespace) => {
                    (true, after)
                }
                _ => (false, rest),
            };
            let instructions = free_text(text);
            if instructions.starts_with("--") && !instructions.contains(char::is_whitespace) {
                return Err(error(
                    name,
                    format!("/compact: unknown option {instructions}"),
                ));
            }
            Ok(SlashCommand::Compact {
                save,
                instructions: (!instructions.is_empty()).then_some(instructions),
            })
        }
        "auto-compact" => match args()?.as_slice() {
            [value] if value == "on" => Ok(SlashCommand::AutoCompact(true)),
            [value] if value == "off" => Ok(SlashCommand::AutoCompact(false)),
            [] => Err(error(name, "/auto-compact needs on or off")),
            _ => Err(error(
                name,
                format!("/auto-compact: expected on or off, got {rest:?}"),
            )),
        },
        "model" => match args()?.as_slice() {
            [] => Ok(SlashCommand::Model(None)),
            [id] => Ok(SlashCommand::Model(Some(id.clone()))),
            _ => Err(error(
                name,
                "/model takes one model id, e.g. /model anthropic/claude-sonnet-4-5",
            )),
        },
        "capsule" => {
            let mut args = args()?;
            if args.is_empty() {
                return Ok(SlashCommand::CapsuleList);
            }
            let sub = args.remove(0);
            let force = take_force(&mut args);
            match (sub.as_str(), args.as_slice()) {
                ("list", []) if !force => Ok(SlashCommand::CapsuleList),
                ("create", []) => Err(error(name, "/capsule create needs a title in quotes")),
                ("create", words) => Ok(SlashCommand::CapsuleCreate {
                    title: words.join(" "),
                    force,
                }),
                ("export", [checkpoint, path]) => Ok(SlashCommand::CapsuleExport {
                    checkpoint: checkpoint.clone(),
                    path: path.clone(),
                    force,
                }),
                ("export", _) => Err(error(
                    name,
                    "/capsule export needs a checkpoint id and a path, e.g. /capsule export ck_7f3a handoff.capsule.md",
                )),
                ("load", [path]) if !force => Ok(SlashCommand::CapsuleLoad { path: path.clone() }),
                ("load", _) => Err(error(name, "/capsule load needs one path")),
                (other, _) => Err(error(
                    name,
                    format!("/capsule: unknown subcommand {other:?}; use create, export or load"),
                )),
            }
        }
        "checkpoint" => {
            let (kind_word, note) = match rest.find(char::is_whitespace) {
                Some(idx) => (&rest[..idx], free_text(&rest[idx..])),
                None => (rest, String::new()),
            };
            let kind = match kind_word {
                "milestone" => CheckpointKind::Milestone,
                "pivot" | "plan_pivot" | "plan-pivot" => CheckpointKind::PlanPivot,
                "" => {
                    return Err(error(
                        name,
                        "/checkpoint needs milestone or pivot and a note",
                    ));
                }
                other => {
                    return Err(error(
                        name,
                        format!("/checkpoint: expected milestone or pivot, got {other:?}"),
                    ));
                }
            };
            if note.is_empty() {
                return Err(error(name, "/checkpoint needs a note in quotes"));
            }
            Ok(SlashCommand::Checkpoint { kind, note })
        }
        "rewind" => match args()?.as_slice() {
            [] => Ok(SlashCommand::Rewind(None)),
            [arg] if arg.bytes().all(|b| b.is_ascii_digit()) => match arg.parse::<usize>() {
                Ok(n) if n >= 1 => Ok(SlashCommand::Rewind(Some(RewindTarget::Nth(n)))),
                _ => Err(error(name, "/rewind N counts from 1 (the latest message)")),
            },
            [arg] if looks_like_id(arg) => {
                Ok(SlashCommand::Rewind(Some(RewindTarget::Id(arg.clone()))))
            }
            [arg] => Err(error(
                name,
                format!("/rewind: {arg:?} is neither a number nor an id like ck_7f3a or e_1b2c"),
            )),
            _ => Err(error(name, "/rewind takes one argument")),
        },
        "skill" => match args()?.as_slice() {
            [off, skill] if off == "off" => Ok(SlashCommand::Skill {
                name: valid_skill(skill)?,
                off: true,
            }),
            [skill] if skill != "off" => Ok(SlashCommand::Skill {
                name: valid_skill(skill)?,
                off: false,
            }),
            _ => Err(error(name, "/skill needs a skill name")),
        },
        "" => Err(CommandError {
            message: "type a command after /".to_owned(),
            usage: help_text(),
        }),
        other => Err(unknown(other)),
    }
}

/// The error for an unknown command: its name (escaped) and the closest
/// known one.
fn unknown(name: &str) -> CommandError {
    let shown: String = soba_core::terminal::sanitize_line(name)
        .chars()
        .take(40)
        .collect();
    CommandError {
        message: match closest(name) {
            Some(known) => format!(
                "unknown command /{shown}; did you mean /{known}? (/help lists every command)"
            ),
            None => format!("unknown command /{shown}; /help lists every command"),
        },
        usage: String::new(),
    }
}

/// Returns whether a parse error is about an unknown command (the line is
/// then taken out of the input box) rather than a known command's
/// arguments (left there to edit).
pub fn is_unknown(err: &CommandError) -> bool {
    err.message.starts_with("unknown command /") || err.message == "type a command after /"
}

/// Returns the known command (aliases included) closest to `name` by edit
/// distance, when it is close enough to be a likely typo or another
/// agent's spelling.
pub fn closest(name: &str) -> Option<&'static str> {
    const ALIASES: &[&str] = &["exit", "new", "cost"];
    let name = name.to_ascii_lowercase();
    let mut candidates: Vec<&'static str> = COMMANDS.iter().map(|(known, _, _)| *known).collect();
    candidates.extend(ALIASES);
    candidates
        .into_iter()
        .map(|known| {
            let prefix = known.starts_with(&name) || name.starts_with(known);
            (
                if prefix {
                    0
                } else {
                    edit_distance(&name, known)
                },
                known,
            )
        })
        .filter(|(distance, known)| *distance <= known.len().max(name.len()) / 2)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, known)| known)
}

/// Levenshtein distance, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous + usize::from(ca != *cb);
            previous = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

/// Returns whether `text` looks like a full or short entry id.
fn looks_like_id(text: &str) -> bool {
    let digits = text.strip_prefix("ck_").or_else(|| text.strip_prefix("e_"));
    digits.is_some_and(|digits| {
        digits.len() >= soba_core::id::MIN_SHORT_HEX
            && digits.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

/// Checks a skill name: a file stem without path separators.
fn valid_skill(name: &str) -> Result<String, CommandError> {
    if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
        return Err(error(
            "skill",
            format!(
                "/skill: {name:?} is not a skill name; use the file stem of .soba/skills/<name>.md"
            ),
        ));
    }
    Ok(name.strip_suffix(".md").unwrap_or(name).to_owned())
}

impl SlashCommand {
    /// Returns whether the command acts at once while a turn or a barrier
    /// runs (SPEC §7.1); every other command is queued until the turn ends.
    pub fn acts_during_turn(&self) -> bool {
        matches!(
            self,
            SlashCommand::Rewind(_)
                | SlashCommand::Budget
                | SlashCommand::Usage
                | SlashCommand::Status
                | SlashCommand::AutoCompact(_)
                | SlashCommand::Help
                | SlashCommand::Quit
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(line: &str, expected: SlashCommand) {
        assert_eq!(parse(line), Ok(expected), "{line}");
    }

    fn check_error(line: &str, message: &str, usage_contains: &str) {
        let err = parse(line).expect_err(line);
        assert_eq!(err.message, message, "{line}");
        assert!(
            err.usage.contains(usage_contains),
            "{line}: usage {:?} lacks {usage_contains:?}",
            err.usage
        );
    }

    #[test]
    fn help_names_the_keys() {
        let help = help_text();
        for key in [
            "Tab",
            "@path",
            "Up/Down",
            "Ctrl-O",
            "PgUp/PgDn",
            "Alt-Enter",
        ] {
            assert!(help.contains(key), "{key} in {help}");
        }
    }

    #[test]
    fn every_command_parses() {
        check("/budget", SlashCommand::Budget);
        check("  /help  ", SlashCommand::Help);
        check("/resume", SlashCommand::Resume);
        check("/quit", SlashCommand::Quit);
        check("/exit", SlashCommand::Quit);
        check(
            "/compact",
            SlashCommand::Compact {
                save: false,
                instructions: None,
            },
        );
        check(
            "/compact --save",
            SlashCommand::Compact {
                save: true,
                instructions: None,
            },
        );
        check(
            "/compact --save keep the API notes",
            SlashCommand::Compact {
                save: true,
                instructions: Some("keep the API notes".into()),
            },
        );
        check(
            "/compact \"focus on the parser\"",
            SlashCommand::Compact {
                save: false,
                instructions: Some("focus on the parser".into()),
            },
        );
        check(
            "/compact --saved is a word",
            SlashCommand::Compact {
                save: false,
                instructions: Some("--saved is a word".into()),
            },
        );
        check("/auto-compact on", SlashCommand::AutoCompact(true));
        check("/auto-compact off", SlashCommand::AutoCompact(false));
        check("/model", SlashCommand::Model(None));
        check(
            "/model openai/gpt-5",
            SlashCommand::Model(Some("openai/gpt-5".into())),
        );
        check("/capsule", SlashCommand::CapsuleList);
        check("/capsule list", SlashCommand::CapsuleList);
        check(
            "/capsule create \"auth refactor\"",
            SlashCommand::CapsuleCreate {
                title: "auth refactor".into(),
                force: false,
            },
        );
        check(
            "/capsule create handoff --force",
            SlashCommand::CapsuleCreate {
                title: "handoff".into(),
                force: true,
            },
        );
        check(
            "/capsule export ck_7f3a out/handoff.capsule.md",
            SlashCommand::CapsuleExport {
                checkpoint: "ck_7f3a".into(),
                path: "out/handoff.capsule.md".into(),
                force: false,
            },
        );
        check(
            "/capsule export ck_7f3a \"my file.capsule.md\" --force",
            SlashCommand::CapsuleExport {
                checkpoint: "ck_7f3a".into(),
                path: "my file.capsule.md".into(),
                force: true,
            },
        );
        check(
            "/capsule load .soba/capsules/a.capsule.md",
            SlashCommand::CapsuleLoad {
                path: ".soba/capsules/a.capsule.md".into(),
            },
        );
        check(
            "/checkpoint milestone \"tests pass\"",
            SlashCommand::Checkpoint {
                kind: CheckpointKind::Milestone,
                note: "tests pass".into(),
            },
        );
        check(
            "/checkpoint pivot switch to a streaming parser",
            SlashCommand::Checkpoint {
                kind: CheckpointKind::PlanPivot,
                note: "switch to a streaming parser".into(),
            },
        );
        check("/rewind", SlashCommand::Rewind(None));
        check(
            "/rewind 2",
            SlashCommand::Rewind(Some(RewindTarget::Nth(2))),
        );
        check(
            "/rewind ck_7f3a",
            SlashCommand::Rewind(Some(RewindTarget::Id("ck_7f3a".into()))),
        );
        check(
            "/rewind e_0190f3a2b4c577f3a9d1000000000001",
            SlashCommand::Rewind(Some(RewindTarget::Id(
                "e_0190f3a2b4c577f3a9d1000000000001".into(),
            ))),
        );
        check(
            "/skill rust-style",
            SlashCommand::Skill {
                name: "rust-style".into(),
                off: false,
            },
        );
        check(
            "/skill off rust-style.md",
            SlashCommand::Skill {
                name: "rust-style".into(),
                off: true,
            },
        );
    }

    #[test]
    fn bad_arguments_answer_with_usage() {
        check_error(
            "/budget now",
            "/budget takes no arguments",
            "usage: /budget",
        );
        check_error("/exit now", "/exit takes no arguments", "usage: /quit");
        check_error(
            "/auto-compact",
            "/auto-compact needs on or off",
            "usage: /auto-compact on|off",
        );
        check_error(
            "/auto-compact maybe",
            "/auto-compact: expected on or off, got \"maybe\"",
            "usage: /auto-compact on|off",
        );
        check_error(
            "/compact --bogus",
            "/compact: unknown option --bogus",
            "/compact [--save]",
        );
        check_error(
            "/model a b",
            "/model takes one model id, e.g. /model anthropic/claude-sonnet-4-5",
            "usage: /model [id]",
        );
        check_error(
            "/capsule create",
            "/capsule create needs a title in quotes",
            "/capsule create",
        );
        check_error(
            "/capsule export ck_7f3a",
            "/capsule export needs a checkpoint id and a path, e.g. /capsule export ck_7f3a handoff.capsule.md",
            "/capsule export",
        );
        check_error(
            "/capsule load",
            "/capsule load needs one path",
            "/capsule load",
        );
        check_error(
            "/capsule burn x",
            "/capsule: unknown subcommand \"burn\"; use create, export or load",
            "/capsule",
        );
        check_error(
            "/capsule create \"unterminated",
            "/capsule: unterminated \" quote",
            "/capsule",
        );
        check_error(
            "/checkpoint",
            "/checkpoint needs milestone or pivot and a note",
            "usage: /checkpoint milestone|pivot",
        );
        check_error(
            "/checkpoint done \"x\"",
            "/checkpoint: expected milestone or pivot, got \"done\"",
            "usage: /checkpoint",
        );
        check_error(
            "/checkpoint milestone",
            "/checkpoint needs a note in quotes",
            "usage: /checkpoint",
        );
        check_error(
            "/rewind 0",
            "/rewind N counts from 1 (the latest message)",
            "/rewind [N|id]",
        );
        check_error(
            "/rewind yesterday",
            "/rewind: \"yesterday\" is neither a number nor an id like ck_7f3a or e_1b2c",
            "/rewind [N|id]",
        );
        check_error(
            "/rewind ck_12",
            "/rewind: \"ck_12\" is neither a number nor an id like ck_7f3a or e_1b2c",
            "/rewind",
        );
        check_error("/rewind 1 2", "/rewind takes one argument", "/rewind");
        check_error(
            "/rewind 99999999999999999999999",
            "/rewind N counts from 1 (the latest message)",
            "/rewind",
        );
        check_error("/skill", "/skill needs a skill name", "usage: /skill");
        check_error("/skill off", "/skill needs a skill name", "usage: /skill");
        check_error(
            "/skill ../secrets",
            "/skill: \"../secrets\" is not a skill name; use the file stem of .soba/skills/<name>.md",
            "usage: /skill",
        );
        check_error(
            "/frobnicate",
            "unknown command /frobnicate; /help lists every command",
            "",
        );
        check_error("/", "type a command after /", "/help");
    }

    /// Issue 36 item 6: the unknown-command note names the closest command.
    #[test]
    fn closest_names_a_likely_command() {
        assert_eq!(closest("clera"), Some("clear"));
        assert_eq!(closest("stats"), Some("status"));
        assert_eq!(closest("compcat"), Some("compact"));
        assert_eq!(closest("frobnicate"), None);
        check_error(
            "/modle x",
            "unknown command /modle; did you mean /model? (/help lists every command)",
            "",
        );
    }

    #[test]
    fn paths_are_messages_not_commands() {
        assert!(is_command("/budget"));
        assert!(is_command("  /rewind 2"));
        assert!(!is_command("/usr/bin/env is missing"));
        assert!(!is_command("fix /budget"));
    }

    #[test]
    fn immediate_commands_follow_the_spec() {
        let immediate: Vec<&str> = [
            "/rewind",
            "/budget",
            "/auto-compact on",
            "/help",
            "/compact",
            "/checkpoint milestone x",
            "/skill a",
            "/model",
            "/capsule",
            "/resume",
            "/quit",
        ]
        .into_iter()
        .filter(|line| parse(line).expect("valid").acts_during_turn())
        .collect();
        assert_eq!(
            immediate,
            ["/rewind", "/budget", "/auto-compact on", "/help", "/quit"]
        );
    }

    #[test]
    fn quotes_split_like_a_shell() {
        assert_eq!(
            split_args(r#"a "b c" 'd "e"' "f\"g""#),
            Ok(vec![
                "a".into(),
                "b c".into(),
                "d \"e\"".into(),
                "f\"g".into()
            ])
        );
        assert_eq!(split_args("  "), Ok(Vec::<String>::new()));
        assert_eq!(split_args("\"\""), Ok(vec![String::new()]));
        assert!(split_args("'open").is_err());
    }
}
