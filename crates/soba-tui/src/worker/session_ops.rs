//! The session commands the worker runs on the open session: rewind
//! (`/rewind`, its picker and confirmation, during a barrier or after the
//! turn stops), `/resume` and its picker, `/model` (checked by
//! `soba_workspace::session::usable_model` before the log says anything,
//! then the session reopened on it), `/skill` and `/auto-compact`; the
//! entries come from `soba_workspace`, the words are the TUI's.

use super::*;

impl Worker {
    pub(super) async fn set_auto_compact(&self, on: bool) {
        if self.append(session::auto_compact(on)).await.is_some() {
            self.note(session::auto_compact_line(on));
        }
    }

    pub(super) async fn rewind_command(&mut self, target: Option<RewindTarget>) {
        let Some(live) = &self.live else {
            return;
        };
        let core = live.core.lock().await;
        let short = self.short(&core);
        // Rewind targets may lie before the live stretch: read the log.
        let Some(log) = self.read_log(&core, "rewind") else {
            return;
        };
        let path: Vec<Entry> = log.path().into_iter().map(|l| l.entry.clone()).collect();
        let entries: Vec<Entry> = log.entries().iter().map(|l| l.entry.clone()).collect();
        drop(log);
        let found = match &target {
            None => {
                let items = view::rewind_choices(&path, short);
                drop(core);
                if items.is_empty() {
                    self.note("nothing to rewind to yet");
                } else {
                    self.send(UiEvent::Overlay(Overlay::Picker(Picker {
                        title: "Rewind to (newest first)".to_owned(),
                        purpose: PickerPurpose::Rewind,
                        items,
                        selected: 0,
                        header: None,
                        note: None,
                    })));
                }
                return;
            }
            Some(RewindTarget::Nth(n)) => view::nth_user_message(&path, *n),
            Some(RewindTarget::Id(id)) => view::find_entry(&entries, id),
        };
        let planned = found.and_then(|entry| view::plan_rewind(&core, entry, &entries, &path));
        drop(core);
        match planned {
            Ok(plan) => self.send(UiEvent::Overlay(Overlay::ConfirmRewind(plan))),
            Err(problem) => self.note(problem),
        }
    }

    pub(super) async fn rewind(&mut self, plan: RewindPlan) {
        if self.running.is_none() || self.in_barrier.load(Ordering::SeqCst) {
            // During a barrier the rewind acts at once: the barrier ends
            // stale and appends nothing (SPEC §7.1).
            self.rewound_in_barrier = self.running.is_some();
            let note = self.apply_rewind(&plan).await;
            self.refresh().await;
            // After the shorter conversation, so the note is not one of the
            // rewound-past notes the screen drops.
            if let Some(note) = note {
                self.note(note);
            }
        } else {
            // Outside a barrier a tool or a request may still append: end
            // the turn first, then move the leaf.
            self.pending_rewind = Some(plan);
            self.deny_pending();
            if let Some(running) = &self.running {
                running.cancel.cancel();
            }
            self.note("rewinding once the running turn has stopped");
        }
    }

    /// Moves the leaf for `plan`; returns the note to show once the
    /// shorter conversation is on screen.
    pub(super) async fn apply_rewind(&mut self, plan: &RewindPlan) -> Option<String> {
        let live = self.live.as_ref()?;
        let result = session::rewind(&mut *live.core.lock().await, &plan.leaf);
        match result {
            Ok(target) => {
                if let Some(text) = &plan.restore_input {
                    self.send(UiEvent::SetInput(text.clone()));
                    // The leaf is the entry before the message: name what the
                    // user picked, not an id the picker never showed.
                    Some(
                        "rewound to before your message, which is back in the input box; files on disk are unchanged"
                            .to_owned(),
                    )
                } else {
                    let short = self.short_now().await;
                    Some(format!(
                        "rewound to {}; files on disk are unchanged",
                        target.short_with(short)
                    ))
                }
            }
            Err(err) => Some(note_error(err)),
        }
    }

    pub(super) fn resume_picker(&self, at_start: bool) {
        let dir = &self.launch.ctx.locations.sessions_dir;
        // As `soba sessions` lists them: most recently modified first,
        // unused ones (left by a crash or an older version, not worth
        // resuming) hidden, ids at the length that tells every session of
        // the folder apart (`soba -r` takes it: sessions started within
        // the minute share their first 8 characters).
        let listed = match soba_workspace::session_list::list(dir, false) {
            Ok(listed) => listed,
            Err(err) => {
                self.note(cli_note(&err));
                return;
            }
        };
        let sessions: Vec<_> = listed
            .sessions
            .into_iter()
            .filter(|summary| summary.problem.is_none())
            .map(|summary| {
                let glance = soba_store::reader::session_glance(&summary.path);
                (summary, glance)
            })
            .collect();
        let (header, items) = view::session_choices(&sessions, listed.short_len, at_start);
        if items.is_empty() {
            self.note(format!("no sessions in {}", dir.display()));
            return;
        }
        self.send(UiEvent::Overlay(Overlay::Picker(Picker {
            title: "Resume a session (most recently modified first)".to_owned(),
            purpose: PickerPurpose::Resume,
            items,
            selected: 0,
            header: Some(header),
            note: None,
        })));
    }

    pub(super) async fn on_picked(&mut self, purpose: PickerPurpose, key: String) {
        match purpose {
            PickerPurpose::Rewind => {
                self.rewind_command(Some(RewindTarget::Id(key))).await;
            }
            PickerPurpose::Resume => {
                if self.running.is_some() {
                    self.note("finish or cancel the running turn before switching sessions");
                    return;
                }
                let mut current = match &self.live {
                    Some(live) => Some(live.core.lock().await.log_path().to_path_buf()),
                    None => None,
                };
                if current.as_deref() == Some(Path::new(&key)) {
                    self.note("that session is already open");
                    return;
                }
                let leaving = current.is_some();
                // Leaving an unused session removes it; there is nothing to
                // go back to then.
                if self
                    .close_session()
                    .await
                    .is_some_and(|closed| closed.removed)
                {
                    current = None;
                }
                let opened = if key.is_empty() {
                    self.open_new()
                } else {
                    self.open_path(&PathBuf::from(&key))
                };
                match opened {
                    Ok(notes) => {
                        if leaving {
                            // The notes shown (a `/status`, a warning) and
                            // the scroll position were the session left's.
                            self.send(UiEvent::ClearNotes);
                        }
                        // Its conversation first, so the notes of opening
                        // it follow it rather than where the other ended.
                        self.refresh().await;
                        for note in notes {
                            self.note(note);
                        }
                    }
                    Err(err) => {
                        self.note(cli_note(&err));
                        // Opening closed the current session first: go back to it.
                        if self.live.is_none()
                            && let Some(path) = current
                            && let Err(err) = self.open_path(&path)
                        {
                            self.note(cli_note(&err));
                        }
                        self.refresh().await;
                    }
                }
            }
            PickerPurpose::Model => self.switch_model(&key).await,
        }
    }

    pub(super) async fn model_picker(&self) {
        let current = match &self.live {
            Some(live) => live.core.lock().await.model_id().to_owned(),
            None => String::new(),
        };
        let ids = view::model_ids(self.launch.ctx.config(), &current);
        let (items, note) = view::model_choices(&ids, &current, |id| {
            view::model_access(&self.launch.ctx, id)
        });
        let selected = items
            .iter()
            .position(|item| item.key == current)
            .unwrap_or(0);
        self.send(UiEvent::Overlay(Overlay::Picker(Picker {
            title: "Switch model".to_owned(),
            purpose: PickerPurpose::Model,
            items,
            selected,
            header: None,
            note,
        })));
    }

    pub(super) async fn switch_model(&mut self, id: &str) {
        if self.running.is_some() {
            self.note("/model waits until the turn ends");
            return;
        }
        // Everything the new model needs (limits, its key, its client) is
        // checked before the log says anything: a switch that cannot work
        // leaves the session, its model and its conversation as they are.
        let setup = match session::usable_model(&self.launch.ctx, id) {
            Ok(setup) => setup,
            Err(err) => {
                self.note(cli_note(&err));
                self.note("the model was not changed");
                return;
            }
        };
        let Some(live) = &self.live else {
            return;
        };
        let path = live.core.lock().await.log_path().to_path_buf();
        let previous = live.setup.info.id.clone();
        if live.setup.info.id == setup.info.id {
            self.note(format!("already using {}", setup.info.id));
            return;
        }
        if self
            .append(EntryBody::ModelChange {
                model: setup.info.id.clone(),
            })
            .await
            .is_none()
        {
            return;
        }
        // Reopen the session so its limits, counter and client follow the
        // new model (the log's model_change makes resume do the same).
        let flag = self.launch.model_flag.replace(setup.info.id.clone());
        let reopened = self.open_path(&path);
        self.launch.model_flag = flag;
        match reopened {
            Ok(notes) => {
                for note in notes {
                    self.note(note);
                }
                self.note(format!("model {}", setup.info.id));
            }
            Err(err) => {
                self.note(cli_note(&err));
                // Back to the model that worked, in the same session.
                let flag = self.launch.model_flag.replace(previous.clone());
                let restored = self.open_path(&path);
                self.launch.model_flag = flag;
                match restored {
                    Ok(_) => self.note(format!("still on {previous}")),
                    Err(err) => self.note(cli_note(&err)),
                }
            }
        }
        self.refresh().await;
    }

    pub(super) async fn skill(&self, name: &str, off: bool) {
        let Some(live) = &self.live else {
            return;
        };
        let active = live.core.lock().await.live().pinned_state().skills;
        match skill::change(&self.launch.ctx.workspace, &active, name, off) {
            Ok(body) => {
                if self.append(EntryBody::Skill(body)).await.is_some() {
                    self.note(skill::confirmation(name, off));
                }
            }
            Err(refusal) => self.note(refusal.to_string()),
        }
    }
}
