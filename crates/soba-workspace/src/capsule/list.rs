//! The text of `soba capsule list`: a session's capsules and loaded
//! capsule files with their marks, then the workspace's capsule files and
//! Project Memory, each described from its front matter.

use std::path::PathBuf;

use soba_core::id::shortest_unique_len;
use soba_core::terminal::Line;
use soba_core::tokens::group_thousands;
use soba_store::reader::read_log;

use super::{ListedKind, capsule_folders, describe_file, display_path, listing};
use crate::context::Context;
use crate::error::Result;

/// Returns `soba capsule list`'s text: the capsules of the session
/// `wanted` names (the most recent one when none is named; none found is
/// a line, not an error, then), one line each with its marks, then the
/// workspace's capsule files and Project Memory.
pub fn list_text(ctx: &Context, wanted: Option<&str>) -> Result<String> {
    let mut out = String::new();
    let chosen = ctx
        .select_session(wanted)
        .and_then(|summary| Ok((read_log(&summary.path)?, summary)));
    match chosen {
        Ok((log, summary)) => {
            out.push_str(&format!("session {}\n", summary.id));
            let short = shortest_unique_len(log.entries().iter().map(|logged| &logged.entry.id));
            let mut n_capsules = 0;
            for listed in listing(&log) {
                let mark = if listed.on_path { '*' } else { ' ' };
                let id = listed.entry.id.short_with(short);
                match listed.kind {
                    ListedKind::Capsule(capsule) => {
                        n_capsules += 1;
                        out.push_str(&format!(
                            "{mark} {id}  {:<16} {:<8} {:>9} → {:<9} {}  {}\n",
                            capsule.trigger.as_str(),
                            capsule.quality.as_str(),
                            group_thousands(capsule.tokens_before.get()),
                            group_thousands(capsule.tokens_after.get()),
                            capsule.summarizer,
                            listed
                                .entry
                                .timestamp
                                .chars()
                                .take(16)
                                .collect::<String>()
                                .replace('T', " ")
                        ));
                    }
                    ListedKind::Loaded(context) => {
                        out.push_str(&format!("{mark} {id}  loaded {}\n", context.path));
                    }
                }
            }
            if n_capsules == 0 {
                out.push_str("  no capsules yet (soba compact makes one)\n");
            } else {
                out.push_str(
                    "  (* on the live path, the rest rewound past · capsule id · trigger · quality · \
                     effective tokens before → after · summarizer · time; \
                     soba capsule export ID FILE writes one as markdown)\n",
                );
            }
        }
        Err(err) if wanted.is_none() => {
            out.push_str(&format!("no session: {}\n", err.message));
        }
        Err(err) => return Err(err),
    }
    for folder in capsule_folders(&ctx.workspace.project_dir()) {
        // Names that are not UTF-8 are left out here.
        let files: Vec<&PathBuf> = folder
            .files
            .iter()
            .filter(|file| file.file_name().and_then(|name| name.to_str()).is_some())
            .collect();
        if files.is_empty() {
            continue;
        }
        let label = match folder.dir {
            "memory" => "Project Memory",
            _ => "capsule files",
        };
        out.push_str(&format!(
            "\n{label} ({}):\n",
            display_path(&ctx.workspace.root, &folder.folder)
        ));
        for file in files {
            let name = file
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            match describe_file(&ctx.workspace.root, file) {
                Ok(parsed) => out.push_str(&format!(
                    "  {}  {}  {}  {} tokens\n",
                    Line(&name),
                    Line(parsed.front.title.as_deref().unwrap_or("(untitled)")),
                    parsed.front.quality.map_or("-", |q| q.as_str()),
                    parsed
                        .front
                        .tokens
                        .map_or_else(|| "?".to_owned(), group_thousands)
                )),
                Err(problem) => out.push_str(&format!(
                    "  {}  (unreadable: {})\n",
                    Line(&name),
                    Line(&problem)
                )),
            }
        }
    }
    Ok(out)
}
