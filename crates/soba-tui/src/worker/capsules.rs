//! The `/capsule` commands (list, export, load, create) and `/compact
//! --save`, each one call into `soba_workspace::capsule` or
//! `soba_workspace::memory`, worded for the conversation view.

use super::*;

impl Worker {
    pub(super) async fn capsule_list(&self) {
        let Some(live) = &self.live else {
            return;
        };
        let core = live.core.lock().await;
        let short = self.short(&core);
        let Some(log) = self.read_log(&core, "list capsules") else {
            return;
        };
        let mut lines = vec!["capsules in this session (newest first):".to_owned()];
        let mut n = 0;
        for listed in capsule::listing(&log).into_iter().rev() {
            if let ListedKind::Capsule(capsule) = listed.kind {
                n += 1;
                lines.push(format!(
                    "  {}  {:<15} {:<8} {} → {} tokens{}",
                    listed.entry.id.short_with(short),
                    capsule.trigger.as_str(),
                    capsule.quality.as_str(),
                    group_thousands(capsule.tokens_before.get()),
                    group_thousands(capsule.tokens_after.get()),
                    if listed.on_path {
                        ""
                    } else {
                        "  (not on the current path)"
                    }
                ));
            }
        }
        if n == 0 {
            lines.push("  (none)".to_owned());
        }
        for folder in capsule::capsule_folders(&self.launch.ctx.workspace.project_dir()) {
            if !folder.files.is_empty() {
                lines.push(format!(".soba/{}/:", folder.dir));
                lines.extend(folder.files.iter().map(|file| {
                    let name = file
                        .file_name()
                        .map(|name| name.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    format!("  {}", soba_core::terminal::Line(&name))
                }));
            }
        }
        drop(core);
        self.note(lines.join("\n"));
    }

    pub(super) async fn capsule_export(&self, wanted: &str, given: &str, force: bool) {
        let Some(live) = &self.live else {
            return;
        };
        let root = self.launch.ctx.workspace.root.clone();
        let prepared = {
            let core = live.core.lock().await;
            let leaf = core
                .leaf()
                .map(|id| id.as_str().to_owned())
                .unwrap_or_default();
            let Some(log) = self.read_log(&core, "export") else {
                return;
            };
            let entries: Vec<Entry> = log.entries().iter().map(|l| l.entry.clone()).collect();
            capsule::prepare_export(
                &root,
                ExportSource {
                    entries: &entries,
                    session: core.header().id.as_str(),
                    leaf: &leaf,
                    counter: core.counter().as_ref(),
                },
                wanted,
                Path::new(given),
            )
        };
        // The file is written without holding the session.
        let written = prepared.and_then(|export| {
            capsule::write_file(&root, &export.file, &export.rendered.text, force).map(|()| export)
        });
        match written {
            Ok(export) => self.note(format!(
                "wrote {} ({} tokens; {})",
                capsule::display_path(&root, &export.file),
                group_thousands(export.rendered.tokens.get()),
                capsule::redaction_note(&export.rendered)
            )),
            Err(err) => self.note(cli_note(&err)),
        }
    }

    pub(super) async fn capsule_load(&self, given: &str) {
        let Some(live) = &self.live else {
            return;
        };
        let root = self.launch.ctx.workspace.root.clone();
        let file = capsule_file::load_path(&root, Path::new(given));
        let text = match capsule_file::read_capsule_text(&root, &file) {
            Ok(text) => text,
            Err(err) => {
                self.note(cli_note(&err));
                return;
            }
        };
        let checked = {
            let core = live.core.lock().await;
            capsule_file::check_capsule_file(
                &root,
                &file,
                text,
                core.budget().auto_limit(),
                core.counter().as_ref(),
            )
        };
        let loadable = match checked {
            Ok(loadable) => loadable,
            Err(err) => {
                self.note(cli_note(&err));
                return;
            }
        };
        let (details, shown) = (loadable.details(), loadable.entry.path.clone());
        if let Some(appended) = self.append(EntryBody::Context(loadable.entry)).await {
            let short = self.short_now().await;
            self.note(format!(
                "loaded {shown} as {} ({} tokens{details}); the model sees it as untrusted data",
                appended.id.short_with(short),
                group_thousands(loadable.tokens.get()),
            ));
        }
    }

    pub(super) async fn capsule_create(&self, title: &str, force: bool) {
        let Some(live) = &self.live else {
            return;
        };
        let started = Instant::now();
        let summarizer = live.agent.barrier.summarizer.clone();
        // Everything needed is taken under the lock; the summarizer runs
        // without it.
        let (span, previous, cwd, auto_limit, counter, session, leaf, limits, compaction) = {
            let core = live.core.lock().await;
            let previous: Option<Capsule> = core.path().iter().rev().find_map(|entry| match &entry
                .body
            {
                EntryBody::Capsule(capsule) => Some((**capsule).clone()),
                _ => None,
            });
            let span: Vec<Entry> = core.path()[core.live().region_start()..]
                .iter()
                .filter(|entry| !matches!(entry.body, EntryBody::Capsule(_)))
                .cloned()
                .collect();
            (
                span,
                previous,
                core.header().cwd.clone(),
                core.budget().auto_limit(),
                core.counter().clone(),
                core.header().id.as_str().to_owned(),
                core.leaf()
                    .map(|id| id.as_str().to_owned())
                    .unwrap_or_default(),
                core.flight_limits(),
                core.config().compaction.clone(),
            )
        };
        if span.is_empty() && previous.is_none() {
            self.note("nothing to hand off yet: send a message first");
            return;
        }
        let project_dir = self.launch.ctx.workspace.project_dir();
        let made = handoff::create_handoff(HandoffInput {
            title,
            force,
            root: &self.launch.ctx.workspace.root,
            project_dir: &project_dir,
            session: &session,
            leaf: &leaf,
            cwd: Some(&cwd),
            span: &span,
            previous: previous.as_ref(),
            summarizer: summarizer.as_deref(),
            compaction: &compaction,
            auto_limit,
            limits,
            counter: counter.as_ref(),
            started,
        })
        .await;
        match made {
            Ok(handoff) => {
                live.core.lock().await.flight(&handoff.record);
                let mut text = handoff.line(&self.launch.ctx.workspace.root);
                if let Some(reason) = &handoff.fallback {
                    text.push_str(&format!("\nfallback used: {reason}"));
                }
                self.note(text);
            }
            Err(err) => self.note(cli_note(&err)),
        }
    }

    pub(super) async fn save_to_memory(&self, end: &CompactionEnd) {
        let id = match memory::savable(end) {
            Ok(id) => id,
            Err(NotSaved::NoCapsule { reason, skipped }) => {
                self.note(format!(
                    "not saved to Project Memory: no capsule was made ({}){}",
                    reason.as_deref().unwrap_or("nothing to compact"),
                    if skipped {
                        "; to save the state as it is, write a handoff: /capsule create \"title\""
                    } else {
                        ""
                    }
                ));
                return;
            }
            Err(NotSaved::Degraded { .. }) => {
                self.note("not saved to Project Memory: the capsule is degraded (fallback used); only full capsules are saved");
                return;
            }
        };
        let Some(live) = &self.live else {
            return;
        };
        let core = live.core.lock().await;
        let session_id = core.header().id.as_str().to_owned();
        match memory::save(&self.launch.ctx.workspace, &core, id, &session_id) {
            Ok(saved) => self.note(format!(
                "saved to Project Memory: .soba/memory/{}.capsule.md ({})",
                saved.id,
                capsule::redaction_note(&saved.rendered)
            )),
            // The capsule just appended is always there.
            Err(MemoryError::Missing(_) | MemoryError::NotACapsule(_)) => {}
            Err(MemoryError::Write(err)) => self.note(cli_note(&err)),
        }
    }
}
