//! Importing other agents' transcripts into a workspace (`soba import`,
//! SPEC §3.4): the tokenizer an imported session is counted with (the
//! model it will resume on), what its first resume meets, and writing it
//! once per source state (`soba_store::import::write` finds the earlier
//! imports), and the whole import of a file or folder (`import_source`);
//! `import::report` words what was imported.

pub mod report;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use soba_core::Encoding;
use soba_core::terminal::{Line, sanitize_line};
use soba_core::tokens::{BpeCounter, TokenCounter};
use soba_store::import::{
    FileOutcome, ImportedSession, PreviousImport, dir_files, import_key, import_path,
    previous_imports,
};
use soba_store::log::remove_stale_partials;

use crate::context::Context;
use crate::error::{Result, WorkspaceError};

/// The counter an imported session's messages are counted with: the
/// tokenizer of the model it will resume on (its own, as `soba run -c`
/// picks it, else the configured one), `o200k_base` when neither resolves.
pub fn import_counter(ctx: &Context, session: &ImportedSession) -> BpeCounter {
    BpeCounter::new(resume_model(ctx, session).map_or(Encoding::O200kBase, |info| info.tokenizer))
}

/// Loads `encoding`'s vocabulary on a thread of its own (a counter that
/// needs it meanwhile waits for it). Loading builds the vocabulary twice
/// over and drops one copy; that thread's freed memory goes back to the
/// system, as no other thread's allocations would reuse it.
pub fn preload_vocabulary(encoding: Encoding) {
    std::thread::spawn(move || {
        BpeCounter::new(encoding).count_text("load");
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        #[allow(unsafe_code)]
        // SAFETY: `malloc_trim` only returns free memory to the system.
        unsafe {
            libc::malloc_trim(0);
        }
    });
}

/// The tokenizer of the configured model, `o200k_base` when none resolves.
pub fn configured_encoding(ctx: &Context) -> Encoding {
    ctx.config()
        .resolve_model(None, &ctx.env)
        .ok()
        .and_then(|configured| ctx.config().registry().resolve(&configured.id).ok())
        .map_or(Encoding::O200kBase, |info| info.tokenizer)
}

/// The model an imported session resumes on: its own, as `soba run -c`
/// picks it, else the configured one.
pub fn resume_model(
    ctx: &Context,
    session: &ImportedSession,
) -> Option<soba_provider::registry::ModelInfo> {
    let model = crate::setup::session_model(&session.entries).or_else(|| session.model.clone());
    let registry = ctx.config().registry();
    model.and_then(|id| registry.resolve(&id).ok()).or_else(|| {
        let configured = ctx.config().resolve_model(None, &ctx.env).ok()?;
        registry.resolve(&configured.id).ok()
    })
}

/// What the first resume of an imported session meets: the tokens of its
/// history after the last compaction it records, against the window of
/// the model it resumes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirstResume {
    /// The tokens of the history after the last compaction it records.
    pub live_tokens: u64,
    /// The model it resumes on.
    pub model: String,
    /// That model's window.
    pub context_window: u64,
    /// `compaction.summarizer.maxChunks`.
    pub max_chunks: usize,
}

impl FirstResume {
    /// Returns what the first resume of `session` meets, when a model
    /// resolves.
    pub fn of(ctx: &Context, session: &ImportedSession) -> Option<FirstResume> {
        let info = resume_model(ctx, session)?;
        let since = session
            .entries
            .iter()
            .rposition(|entry| matches!(entry.body, soba_core::EntryBody::Capsule(_)))
            .map_or(0, |idx| idx + 1);
        let live_tokens = session.entries[since..]
            .iter()
            .filter_map(|entry| match &entry.body {
                soba_core::EntryBody::Message(logged) => logged.tokens.map(|t| t.n.get()),
                _ => None,
            })
            .sum();
        Some(FirstResume {
            live_tokens,
            model: info.id,
            context_window: info.context_window,
            max_chunks: ctx.config().compaction.summarizer.max_chunks,
        })
    }

    /// Whether the history is over the window (`soba run -c` compacts
    /// it first).
    pub fn over_window(&self) -> bool {
        self.live_tokens > self.context_window
    }
}

/// What happened to one imported session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// `--dry-run`: nothing written.
    DryRun,
    /// Written as this session file.
    New {
        /// The new session's id.
        id: String,
        /// Its file.
        path: PathBuf,
    },
    /// The same source session was imported before.
    Already {
        /// The earlier import's id.
        id: String,
        /// Its file.
        path: PathBuf,
    },
    /// The source session has more entries than when it was imported as
    /// `previous` (the agent went on with it): written again as a new
    /// session, the earlier one kept as it was.
    Grown {
        /// The new session's id.
        id: String,
        /// Its file.
        path: PathBuf,
        /// The earlier import's id.
        previous: String,
        /// The source's entries then.
        before: usize,
        /// The source's entries now.
        now: usize,
    },
}

/// Counts `session`'s messages with the tokenizer of the model it will
/// resume on and writes it into `out_dir` as a new session, unless an
/// earlier import of the same source (in `previous`) holds as many
/// entries (a source that has grown since is written again, the earlier
/// import kept); with `dry_run`, writes nothing. Returns what happened and
/// what its first resume meets.
pub fn import_session(
    ctx: &Context,
    session: &mut ImportedSession,
    out_dir: &Path,
    previous: &HashMap<(String, String), PreviousImport>,
    dry_run: bool,
) -> Result<(Written, Option<FirstResume>)> {
    let image_tokens = ctx.config().compaction.image_tokens;
    let counter = import_counter(ctx, session);
    session.store_counts(&counter, image_tokens);
    let resume = FirstResume::of(ctx, session);
    let written = if dry_run {
        Written::DryRun
    } else {
        let key = import_key(&session.source, &session.original_id);
        let now = session.entries.len();
        match previous.get(&key) {
            Some(earlier) => match earlier.source_entries.filter(|before| now > *before) {
                Some(before) => match write_new(session, out_dir, &ctx.workspace.root)? {
                    Written::New { id, path } => Written::Grown {
                        id,
                        path,
                        previous: earlier.id.clone(),
                        before,
                        now,
                    },
                    other => other,
                },
                None => Written::Already {
                    id: earlier.id.clone(),
                    path: earlier.path.clone(),
                },
            },
            None => write_new(session, out_dir, &ctx.workspace.root)?,
        }
    };
    Ok((written, resume))
}

/// Writes one imported session as a new SOBA session file
/// ([`soba_store::import::write_session`]).
fn write_new(session: &ImportedSession, out_dir: &Path, root: &Path) -> Result<Written> {
    let (id, path) = soba_store::import::write_session(session, out_dir, root).map_err(|err| {
        WorkspaceError::from(err).hint(format!(
            "{} was not imported; nothing was left behind",
            session.source.display()
        ))
    })?;
    Ok(Written::New {
        id: id.as_str().to_owned(),
        path,
    })
}

/// The lock file of an output folder, beside the sessions (named in
/// `soba-store`, whose folder walks say what it is).
pub const IMPORT_LOCK: &str = soba_store::import::IMPORT_LOCK;

/// Takes the exclusive lock of `dir`'s import lock file (creating both),
/// waiting for another import into `dir` to end (`waiting` is called
/// first, to say so).
/// The lock goes when the returned file is dropped (or the process ends).
/// A folder that cannot be created gives no lock (`None`): the session
/// write that follows fails with the storage error and says nothing was
/// left behind.
pub fn lock_out_dir(dir: &Path, waiting: impl FnOnce()) -> Result<Option<std::fs::File>> {
    let cannot = |err: std::io::Error| {
        WorkspaceError::user(format!(
            "cannot lock {} for the import",
            soba_core::terminal::sanitize_line(&dir.display().to_string())
        ))
        .caused_by(err)
    };
    if std::fs::create_dir_all(dir).is_err() {
        return Ok(None);
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(IMPORT_LOCK))
        .map_err(cannot)?;
    match file.try_lock() {
        Ok(()) => return Ok(Some(file)),
        Err(std::fs::TryLockError::Error(err)) => return Err(cannot(err)),
        Err(std::fs::TryLockError::WouldBlock) => {}
    }
    waiting();
    file.lock().map_err(cannot)?;
    Ok(Some(file))
}

/// One session of an import: what was read (its entries dropped once
/// written), what happened to it and what its first resume meets.
#[derive(Debug)]
pub struct Imported {
    /// The session as read, without its entries.
    pub session: ImportedSession,
    /// Where it went.
    pub written: Written,
    /// What its first resume meets, when a model resolves.
    pub resume: Option<FirstResume>,
}

/// What one import of a file or folder did.
#[derive(Debug, Default)]
pub struct ImportRun {
    /// The sessions imported (or, with `dry_run`, read), in order.
    pub sessions: Vec<Imported>,
    /// The folder's files that could not be imported.
    pub n_failed: usize,
    /// The folder's files that hold no transcript soba reads.
    pub n_skipped: usize,
    /// The error that stopped a folder's import (a full disk); the
    /// sessions before it were written and the files after it not tried.
    pub stopped: Option<WorkspaceError>,
}

/// Imports `source`, a transcript or a folder of them, into `out_dir`
/// (`soba import`): each file's sessions are counted and written before
/// the next file is read, and their entries dropped once written, so a
/// folder costs the memory of its largest file. With `dry_run` nothing is
/// written. `notice` receives, as they happen, the lines about waiting for
/// another import, unfinished files removed, and each file of a folder
/// skipped or failed. A folder with nothing importable is an error.
pub fn import_source(
    ctx: &Context,
    source: &Path,
    out_dir: &Path,
    dry_run: bool,
    notice: &mut dyn FnMut(String),
) -> Result<ImportRun> {
    let shown = |path: &Path| sanitize_line(&path.display().to_string()).into_owned();
    let metadata = std::fs::metadata(source).map_err(|err| {
        WorkspaceError::user(format!("cannot read {}", source.display())).caused_by(err)
    })?;
    if let Ok(out_metadata) = std::fs::metadata(out_dir)
        && !out_metadata.is_dir()
    {
        return Err(WorkspaceError::user(format!(
            "{} is not a folder, and --out takes a folder",
            shown(out_dir)
        ))
        .hint("pass the folder to write the sessions into (it is created when missing)"));
    }
    // Held until the import ends: the check for earlier imports and the
    // writes are one step, so two imports of one file at once write it once.
    let _out_lock = if dry_run {
        None
    } else {
        lock_out_dir(out_dir, || {
            notice(format!(
                "waiting for another import into {} to finish",
                shown(out_dir)
            ));
        })?
    };
    let previous = if dry_run {
        HashMap::new()
    } else {
        let stale = remove_stale_partials(out_dir);
        if !stale.is_empty() {
            notice(format!(
                "removed {} unfinished session file(s) an interrupted import left in {}",
                stale.len(),
                shown(out_dir)
            ));
        }
        previous_imports(out_dir)
    };
    // The vocabulary sessions are most likely counted in (the configured
    // model's) loads while the first file is read.
    preload_vocabulary(configured_encoding(ctx));
    let mut run = ImportRun::default();
    let handle = |run: &mut ImportRun, found: Vec<ImportedSession>| -> Result {
        for mut session in found {
            let (written, resume) = import_session(ctx, &mut session, out_dir, &previous, dry_run)?;
            session.entries = Vec::new();
            run.sessions.push(Imported {
                session,
                written,
                resume,
            });
        }
        Ok(())
    };
    if !metadata.is_dir() {
        handle(&mut run, import_path(source)?)?;
        return Ok(run);
    }
    for file in dir_files(source)? {
        let file = file.import();
        match file.outcome {
            FileOutcome::Imported(found) => {
                // A session that cannot be written (a full disk) stops a
                // folder's import; what was written before it is reported.
                if let Err(err) = handle(&mut run, found) {
                    run.stopped = Some(err);
                    break;
                }
            }
            FileOutcome::Skipped(diagnostic) => {
                run.n_skipped += 1;
                notice(format!(
                    "{}: {}",
                    shown(&file.path),
                    Line(&diagnostic.to_string())
                ));
            }
            FileOutcome::Failed(err) => {
                run.n_failed += 1;
                notice(format!(
                    "{}: {}",
                    shown(&file.path),
                    Line(&WorkspaceError::from(err).message)
                ));
            }
        }
    }
    if run.sessions.is_empty() {
        if let Some(err) = run.stopped {
            return Err(err);
        }
        let skipped = if run.n_skipped == 0 {
            String::new()
        } else {
            format!(" ({} files skipped, see above)", run.n_skipped)
        };
        return Err(WorkspaceError::user(format!(
            "no importable transcript in {}{skipped}",
            source.display()
        ))
        .hint(format!(
            "supported formats: {}",
            soba_store::import::Format::list()
        )));
    }
    Ok(run)
}
