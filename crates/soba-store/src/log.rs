//! Writing a session log: the header, the single locked writer, crash-safe
//! appends, the current leaf, id and timestamp minting, and rewind.

use std::fmt;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::path::{Path, PathBuf};

use soba_core::entry::StoredTokens;
use soba_core::tokens::count_message;
use soba_core::{
    Entry, EntryBody, EntryId, IdKind, Message, MessageEntry, TokenCount, TokenCounter,
};

use crate::error::StoreError;
use crate::line::{UTF8_BOM, read_exact_at, read_first_line};
use crate::resume::{BLOCK_SIZE, BackwardLines, settle_backwards};
// The session's identity lives in `session`; these paths stay for the
// crates that name them here.
pub use crate::session::{
    Durability, ImportedFrom, MemoryItem, Minter, RECOVERED_INFIX, SequentialMinter, SessionHeader,
    SessionId, SystemMinter, leaf_after,
};
use crate::wire;

/// How a writer appends.
pub struct WriterOptions {
    /// fsync after every append, or not.
    pub durability: Durability,
    /// Where timestamps and ids come from.
    pub minter: Box<dyn Minter>,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            durability: Durability::Fsync,
            minter: Box::new(SystemMinter),
        }
    }
}

impl fmt::Debug for WriterOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriterOptions")
            .field("durability", &self.durability)
            .finish_non_exhaustive()
    }
}

/// The one writer of a session log, holding its exclusive lock.
///
/// Every append is one `write` of a complete line (a `\n` first when the
/// file ends with a torn line), then an `fsync` unless the durability is
/// `flush`. An entry returned by an append is acknowledged: it survives a
/// crash of the process at any later point. Nothing is ever rewritten.
pub struct SessionWriter {
    file: File,
    path: PathBuf,
    session: SessionId,
    leaf: Option<EntryId>,
    durability: Durability,
    minter: Box<dyn Minter>,
    torn_tail: bool,
    line: Vec<u8>,
    /// The device and inode of the file opened, compared with the path's
    /// before every append (another program may have replaced the file).
    identity: (u64, u64),
    /// Where this writer's own lines start in the file it opened.
    written_from: u64,
    /// The recovery file, once an append was refused: later lines go there.
    recovery: Option<PathBuf>,
    /// Where the file ended after this writer's last write: a file found
    /// shorter was truncated by another program, a longer one appended to.
    end: u64,
    /// A copy of the lines this writer wrote (not the header), while they
    /// fit in [`KEPT_MAX`]: what a truncated file no longer holds.
    kept: Vec<u8>,
    /// Whether `kept` holds every line this writer wrote.
    kept_whole: bool,
    /// Where a recovery file goes when neither the log's folder nor the one
    /// above it can take it (the workspace's `.soba/`).
    fallback_dir: Option<PathBuf>,
    /// Why an append failed (a full disk, a file size limit), once it did:
    /// later lines go to the recovery file with the same error.
    append_failure: Option<std::io::Error>,
}

/// The most bytes of its own lines a writer keeps a copy of.
const KEPT_MAX: usize = 16 << 20;

/// The largest file at the log's path that a refused append reads to find
/// which lines it lacks; a larger one (a sparse file put there) is not
/// read, and every line this writer wrote goes to the recovery file.
const MAX_RECHECKED: u64 = 1 << 30;

impl fmt::Debug for SessionWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionWriter")
            .field("path", &self.path)
            .field("session", &self.session)
            .field("leaf", &self.leaf)
            .field("durability", &self.durability)
            .finish_non_exhaustive()
    }
}

impl SessionWriter {
    /// Creates a new session file at `path` (creating its directory), locks
    /// it and writes the header line.
    pub fn create(
        path: impl AsRef<Path>,
        header: &SessionHeader,
        options: WriterOptions,
    ) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            crate::private::create_dir_all(dir)
                .map_err(|err| StoreError::io("create the sessions directory", dir, err))?;
        }
        let file = crate::private::open(
            OpenOptions::new().read(true).append(true).create_new(true),
            &path,
        )
        .map_err(|err| {
            if err.kind() == std::io::ErrorKind::AlreadyExists {
                StoreError::AlreadyExists { path: path.clone() }
            } else {
                StoreError::io("create", &path, err)
            }
        })?;
        lock(&file, header.id.as_str(), &path)?;
        let identity = identity_of(&file).map_err(|err| StoreError::io("stat", &path, err))?;
        let mut writer = SessionWriter {
            file,
            path,
            session: header.id.clone(),
            leaf: None,
            durability: options.durability,
            minter: options.minter,
            torn_tail: false,
            line: Vec::new(),
            identity,
            written_from: 0,
            recovery: None,
            end: 0,
            kept: Vec::new(),
            kept_whole: true,
            fallback_dir: fallback_dir(&header.cwd),
            append_failure: None,
        };
        let line = wire::encode_header(header)?;
        writer.write_line(&line)?;
        writer.written_from = line.len() as u64 + 1;
        writer.kept.clear();
        if writer.durability == Durability::Fsync {
            sync_parent_dir(&writer.path)?;
        }
        Ok(writer)
    }

    /// Opens an existing session for appending: checks its header, takes the
    /// lock, and finds the current leaf by reading backwards from the end.
    /// When the last entry is a `leaf` entry, its target is looked up
    /// further back, and a target that is itself a `leaf` entry is followed
    /// to the first entry that is not one, as the full reader and resume
    /// do (SPEC §3.1), so the next append continues the history.
    pub fn open(path: impl AsRef<Path>, options: WriterOptions) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let (file, _) = crate::untrusted::open_untrusted_with(
            &path,
            OpenOptions::new().read(true).append(true),
        )
        .map_err(StoreError::open)?;
        // A log written by an older soba (0644) or copied in becomes
        // owner-only once soba appends to it.
        crate::private::tighten_file(&file).map_err(|err| StoreError::io("chmod", &path, err))?;
        let first = read_first_line(&file).map_err(|err| StoreError::io("read", &path, err))?;
        let not_a_session = |reason: String| StoreError::NotASession {
            path: path.clone(),
            reason,
        };
        if first.bytes.is_empty() && !first.terminated {
            return Err(not_a_session("the file is empty".to_owned()));
        }
        if !first.terminated {
            return Err(not_a_session("line 1 is torn (no newline)".to_owned()));
        }
        let line_one = first.bytes.strip_prefix(UTF8_BOM).unwrap_or(&first.bytes);
        let text = std::str::from_utf8(line_one)
            .map_err(|_| not_a_session("line 1 is not UTF-8".to_owned()))?;
        let header = wire::decode_header(text).map_err(|err| not_a_session(err.to_string()))?;
        lock(&file, header.id.as_str(), &path)?;
        let fallback_dir = fallback_dir(&header.cwd);

        let len = file
            .metadata()
            .map_err(|err| StoreError::io("read", &path, err))?
            .len();
        let mut torn_tail = false;
        if len > 0 {
            let mut last = [0u8; 1];
            read_exact_at(&file, &mut last, len - 1)
                .map_err(|err| StoreError::io("read", &path, err))?;
            torn_tail = last[0] != b'\n';
        }
        let mut leaf = None;
        let mut lines = BackwardLines::new(&file, first.end, len, BLOCK_SIZE);
        let read_error = |err| StoreError::io("read", &path, err);
        while let Some(line) = lines.next_line().map_err(read_error)? {
            if !line.terminated {
                continue;
            }
            let Ok(text) = std::str::from_utf8(&line.bytes) else {
                continue;
            };
            // The same tolerant decode as the reader's: a damaged entry it
            // keeps as a placeholder is the current leaf here too.
            let Ok(wire::DecodedEntry { entry, .. }) = wire::decode_entry(text) else {
                continue;
            };
            leaf = Some(match entry.body {
                // A `leaf` entry targeting itself loops: the position stays.
                EntryBody::Leaf { target } if target != entry.id => {
                    match settle_backwards(&mut lines, target).map_err(read_error)? {
                        Some(position) => position,
                        // A missing or looping target, or one later in the
                        // file: the full reader decides.
                        None => crate::reader::read_log(&path)?
                            .leaf()
                            .cloned()
                            .unwrap_or(entry.id),
                    }
                }
                _ => leaf_after(&entry),
            });
            break;
        }
        let identity = identity_of(&file).map_err(|err| StoreError::io("stat", &path, err))?;
        Ok(SessionWriter {
            file,
            path,
            session: header.id,
            leaf,
            durability: options.durability,
            minter: options.minter,
            torn_tail,
            line: Vec::new(),
            identity,
            written_from: len,
            recovery: None,
            end: len,
            kept: Vec::new(),
            kept_whole: true,
            fallback_dir,
            append_failure: None,
        })
    }

    /// Returns the session's id.
    pub fn session_id(&self) -> &SessionId {
        &self.session
    }

    /// Closes the log. When it holds nothing of the user's (only what
    /// opening a session writes, see [`crate::reader::has_content`]), the
    /// file and its flight records (`<id>.flight.jsonl` beside it) are
    /// removed first. The file is read while the lock is still held, so
    /// nothing another writer appended can be missed, and a log with any
    /// message is never removed. Returns whether it was removed.
    pub fn close_removing_if_unused(self) -> Result<bool, StoreError> {
        self.close_inner()
    }

    /// Returns the recovery file once an append was refused because the
    /// log was replaced or removed (see [`StoreError::LogReplaced`]): what
    /// this writer could not write at the path is there.
    pub fn recovery_file(&self) -> Option<&Path> {
        self.recovery.as_deref()
    }

    fn close_inner(self) -> Result<bool, StoreError> {
        // A file another program put at the path is not this session's
        // to remove, whatever it holds.
        if self.recovery.is_some()
            || self.replaced().is_some()
            || crate::reader::has_content(&self.path)
        {
            return Ok(false);
        }
        std::fs::remove_file(&self.path)
            .map_err(|err| StoreError::io("remove", &self.path, err))?;
        if let Some(dir) = self.path.parent() {
            let flight = crate::flight::flight_path(dir, &self.session);
            match std::fs::remove_file(&flight) {
                Ok(()) => {}
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => return Err(StoreError::io("remove", flight, err)),
            }
        }
        // Dropping the file handle releases the lock.
        drop(self);
        Ok(true)
    }

    /// Returns the session file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Returns the current leaf, `None` before the first entry: never a
    /// `leaf` entry unless a chain of them loops or reaches a missing entry.
    pub fn leaf(&self) -> Option<&EntryId> {
        self.leaf.as_ref()
    }

    /// Appends an entry with a fresh id (`ck_` for capsules), the current
    /// time and the current leaf as parent, and returns it once durable.
    pub fn append(&mut self, body: EntryBody) -> Result<Entry, StoreError> {
        let entry = self.new_entry(body);
        self.append_entry(&entry)?;
        Ok(entry)
    }

    /// Builds the next entry: a fresh id, the current time and the current
    /// leaf as parent.
    fn new_entry(&mut self, body: EntryBody) -> Entry {
        let kind = if matches!(body, EntryBody::Capsule(_)) {
            IdKind::Capsule
        } else {
            IdKind::Entry
        };
        Entry {
            id: EntryId::from_uuid(kind, self.minter.uuid_v7()),
            parent_id: self.leaf.clone(),
            timestamp: self.minter.timestamp(),
            body,
        }
    }

    /// Appends a message with its token count in `counter`'s encoding
    /// (SPEC §3.2), images costing `image_tokens` each.
    pub fn append_message(
        &mut self,
        message: Message,
        counter: &dyn TokenCounter,
        image_tokens: TokenCount,
    ) -> Result<Entry, StoreError> {
        let counted = count_message(counter, &message, image_tokens);
        let tokens = StoredTokens {
            encoding: counter.encoding(),
            n: counted.n,
            estimated: counted.estimated,
        };
        self.append(EntryBody::Message(MessageEntry {
            message,
            tokens: Some(tokens),
        }))
    }

    /// Moves the current leaf to `target` by appending a `leaf` entry; the
    /// entries after it stay in the file. A `target` that is itself a
    /// `leaf` entry is never on a path: the entry written targets where its
    /// chain of targets leads (the first entry that is not a `leaf` entry),
    /// and `target` as given when that chain loops or reaches a missing
    /// entry. Finding the target reads the file backwards up to it.
    pub fn rewind(&mut self, target: EntryId) -> Result<Entry, StoreError> {
        let entry = self.new_entry(EntryBody::Leaf { target });
        let position = self.position_after(&entry)?;
        let entry = Entry {
            body: EntryBody::Leaf {
                target: position.clone(),
            },
            ..entry
        };
        self.write_entry(&entry, position)?;
        Ok(entry)
    }

    /// Appends a complete entry as given (id, parent and time included), for
    /// importers; the current leaf follows the usual rule, a `leaf` entry
    /// targeting another one included (see [`SessionWriter::rewind`]).
    pub fn append_entry(&mut self, entry: &Entry) -> Result<(), StoreError> {
        let position = self.position_after(entry)?;
        self.write_entry(entry, position)
    }

    /// Appends complete entries as [`SessionWriter::append_entry`] does,
    /// in order, encoding them on up to four threads: entry `i` is encoded
    /// by thread `i % n` (this one is thread 0) and written here, in order,
    /// so the lines waiting to be written are at most sixteen per thread. The first entry that cannot be encoded
    /// or written ends the call with its error, after the entries before it.
    pub fn append_entries(&mut self, entries: &[Entry]) -> Result<(), StoreError> {
        let threads = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .min(ENCODE_THREADS);
        if threads < 2 || entries.len() < PARALLEL_ENCODE_MIN {
            return entries
                .iter()
                .try_for_each(|entry| self.append_entry(entry));
        }
        std::thread::scope(|scope| {
            let receivers: Vec<_> = (1..threads)
                .map(|first| {
                    let (send, receive) = std::sync::mpsc::sync_channel(ENCODED_AHEAD);
                    scope.spawn(move || {
                        for entry in entries.iter().skip(first).step_by(threads) {
                            // The writer stopped (an error): so does this.
                            if send.send(encode_for_log(entry)).is_err() {
                                return;
                            }
                        }
                    });
                    receive
                })
                .collect();
            for (idx, entry) in entries.iter().enumerate() {
                let position = self.position_after(entry)?;
                let line = match idx % threads {
                    0 => encode_for_log(entry),
                    // A worker gone early (it panicked, which the scope
                    // reports when it ends): encode here.
                    worker => receivers[worker - 1]
                        .recv()
                        .unwrap_or_else(|_| encode_for_log(entry)),
                }?;
                self.write_line(&line)?;
                self.leaf = Some(position);
            }
            Ok(())
        })
    }

    /// Writes `entry` and makes `position` the current leaf.
    fn write_entry(&mut self, entry: &Entry, position: EntryId) -> Result<(), StoreError> {
        let line = encode_for_log(entry)?;
        self.write_line(&line)?;
        self.leaf = Some(position);
        Ok(())
    }

    /// Returns the current leaf once `entry` (not yet written) is appended:
    /// its own id, or for a `leaf` entry where its target settles (SPEC
    /// §3.1, as the full reader finds it). Only a `leaf` entry reads the
    /// file: backwards up to its target, and whole when the target is not
    /// found that way.
    fn position_after(&self, entry: &Entry) -> Result<EntryId, StoreError> {
        let EntryBody::Leaf { target } = &entry.body else {
            return Ok(entry.id.clone());
        };
        if *target == entry.id {
            // It targets itself: a loop, the position stays on it.
            return Ok(target.clone());
        }
        let read_error = |err| StoreError::io("read", &self.path, err);
        let len = self.file.metadata().map_err(read_error)?.len();
        let mut lines = BackwardLines::new(&self.file, 0, len, BLOCK_SIZE);
        if let Some(position) = settle_backwards(&mut lines, target.clone()).map_err(read_error)? {
            return Ok(position);
        }
        Ok(crate::reader::read_log(&self.path)?.position_at(target))
    }

    /// Returns how the path no longer names the file this writer opened
    /// (`replaced` or `removed`), `None` while it does. One `stat`.
    fn replaced(&self) -> Option<&'static str> {
        match std::fs::metadata(&self.path) {
            Ok(metadata) => {
                use std::os::unix::fs::MetadataExt;
                ((metadata.dev(), metadata.ino()) != self.identity).then_some("replaced")
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                let folder_gone = self
                    .path
                    .parent()
                    .filter(|dir| !dir.as_os_str().is_empty())
                    .is_some_and(|dir| !dir.is_dir());
                Some(if folder_gone {
                    "moved away with its folder"
                } else {
                    "removed"
                })
            }
            // The path cannot be looked at (permissions changed): the next
            // write says what is wrong, if anything.
            Err(_) => None,
        }
    }

    /// Refuses to append `line` to a file that is no longer at the path:
    /// the lines this writer wrote that the file now at the path lacks,
    /// then `line`, go to a recovery file beside the log, which the error
    /// names.
    fn refuse(&mut self, line: &str, how: &'static str) -> StoreError {
        let mut lines = match &self.recovery {
            Some(_) => Vec::new(),
            None => self.lines_missing_at_path(),
        };
        lines.extend_from_slice(line.as_bytes());
        lines.push(b'\n');
        let recovery = self.write_recovery(&lines);
        StoreError::LogReplaced {
            path: self.path.clone(),
            how,
            session: self.session.as_str().to_owned(),
            recovery: recovery.as_ref().ok().cloned(),
            recovery_error: recovery.err(),
        }
    }

    /// Returns the complete lines this writer wrote (read back through its
    /// own handle) whose entry id the file now at the path does not hold.
    fn lines_missing_at_path(&self) -> Vec<u8> {
        #[derive(serde::Deserialize)]
        struct IdOnly {
            id: Option<String>,
        }
        let written = if self.kept_whole {
            // A truncated file no longer holds them: the copy does.
            self.kept.clone()
        } else {
            let Ok(metadata) = self.file.metadata() else {
                return Vec::new();
            };
            let end = metadata.len().min(self.end);
            let len = end.saturating_sub(self.written_from);
            let Ok(len) = usize::try_from(len) else {
                return Vec::new();
            };
            let mut written = vec![0u8; len];
            if read_exact_at(&self.file, &mut written, self.written_from).is_err() {
                return Vec::new();
            }
            written
        };
        // The file now at the path is read one bounded line at a time, and
        // not at all when it is huge: its lines are then all missing.
        let at_path: std::collections::HashSet<EntryId> = match std::fs::metadata(&self.path) {
            Ok(metadata) if metadata.is_file() && metadata.len() <= MAX_RECHECKED => {
                crate::reader::entry_ids(&self.path)
                    .unwrap_or_default()
                    .into_iter()
                    .collect()
            }
            _ => std::collections::HashSet::new(),
        };
        let mut missing = Vec::new();
        for line in written.split_inclusive(|&byte| byte == b'\n') {
            if !line.ends_with(b"\n") {
                continue;
            }
            let on_disk = serde_json::from_slice::<IdOnly>(line)
                .ok()
                .and_then(|only| only.id)
                .and_then(|id| EntryId::parse(&id).ok())
                .is_some_and(|id| at_path.contains(&id));
            if !on_disk && line.iter().any(|byte| !byte.is_ascii_whitespace()) {
                missing.extend_from_slice(line);
            }
        }
        missing
    }

    /// Appends `lines` to this writer's recovery file, creating it (never
    /// over an existing file) the first time, and syncs it.
    fn write_recovery(&mut self, lines: &[u8]) -> Result<PathBuf, std::io::Error> {
        let mut file = match &self.recovery {
            Some(path) => crate::private::open(OpenOptions::new().append(true), path)?,
            None => {
                let stamp: String = self
                    .minter
                    .timestamp()
                    .chars()
                    .filter(char::is_ascii_alphanumeric)
                    .collect();
                let mut last_error = None;
                for dir in self.recovery_dirs() {
                    if Some(&dir) == self.fallback_dir.as_ref() {
                        // The workspace's `.soba/` may not exist yet.
                        let _ = std::fs::create_dir(&dir);
                    }
                    match self.create_recovery(&dir, &stamp, lines) {
                        Ok(path) => {
                            self.recovery = Some(path.clone());
                            // The new name durable too; a failure here
                            // loses nothing written.
                            let _ = sync_parent_dir(&path);
                            return Ok(path);
                        }
                        Err(err) => last_error = Some(err),
                    }
                }
                return Err(last_error.unwrap_or_else(|| {
                    std::io::Error::new(std::io::ErrorKind::NotFound, "no folder to write it in")
                }));
            }
        };
        file.write_all(lines)?;
        file.sync_all()?;
        Ok(self
            .recovery
            .clone()
            .expect("the recovery file was opened above"))
    }

    /// The folders a new recovery file is tried in, in order: the log's,
    /// the one above it (the sessions folder, when the log's was renamed
    /// away), and the fallback.
    fn recovery_dirs(&self) -> Vec<PathBuf> {
        let dir = self
            .path
            .parent()
            .filter(|dir| !dir.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let mut dirs = vec![dir.to_path_buf()];
        if let Some(above) = dir.parent().filter(|above| !above.as_os_str().is_empty()) {
            dirs.push(above.to_path_buf());
        }
        dirs.extend(self.fallback_dir.clone());
        dirs.dedup();
        dirs
    }

    /// Creates a new recovery file in `dir` (never over an existing file),
    /// writes `lines` and syncs it; removed again when the write fails, so
    /// a full disk leaves no empty file.
    fn create_recovery(&self, dir: &Path, stamp: &str, lines: &[u8]) -> std::io::Result<PathBuf> {
        let mut attempt = 1;
        loop {
            let suffix = if attempt == 1 {
                String::new()
            } else {
                format!("-{attempt}")
            };
            let path = dir.join(format!(
                "{}{RECOVERED_INFIX}{stamp}{suffix}.jsonl",
                self.session
            ));
            match crate::private::open(OpenOptions::new().append(true).create_new(true), &path) {
                Ok(mut file) => {
                    let written = file.write_all(lines).and_then(|()| file.sync_all());
                    if let Err(err) = written {
                        let _ = std::fs::remove_file(&path);
                        return Err(err);
                    }
                    return Ok(path);
                }
                Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists && attempt < 100 => {
                    attempt += 1;
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// Writes `line` and its newline in one `write`, then syncs; refused
    /// (see [`StoreError::LogReplaced`]) when the path no longer names the
    /// file this writer opened.
    fn write_line(&mut self, line: &str) -> Result<(), StoreError> {
        if self.recovery.is_some() {
            if self.append_failure.is_some() {
                return Err(self.keep_failed(line));
            }
            let how = self.replaced().unwrap_or("replaced");
            return Err(self.refuse(line, how));
        }
        if let Some(how) = self.replaced() {
            return Err(self.refuse(line, how));
        }
        // The file is still at the path; is it where this writer left it?
        let len = self
            .file
            .metadata()
            .map_err(|err| StoreError::io("stat", &self.path, err))?
            .len();
        if len < self.end {
            return Err(self.refuse(line, "truncated"));
        }
        if len > self.end {
            // Another program appended: what it wrote stays, and this
            // record starts on a line of its own (ARCHITECTURE.md, "Outside
            // bytes").
            let mut last = [0u8; 1];
            read_exact_at(&self.file, &mut last, len - 1)
                .map_err(|err| StoreError::io("read", &self.path, err))?;
            if last[0] != b'\n' {
                self.torn_tail = true;
            }
        }
        self.line.clear();
        self.line.reserve(line.len() + 2);
        if self.torn_tail {
            self.line.push(b'\n');
        }
        self.line.extend_from_slice(line.as_bytes());
        self.line.push(b'\n');
        if let Err(err) = self.file.write_all(&self.line) {
            // Part of the line may be on disk: end it before the next one.
            self.torn_tail = true;
            self.end = self
                .file
                .metadata()
                .map_or(self.end, |metadata| metadata.len());
            self.append_failure = Some(err);
            return Err(self.keep_failed(line));
        }
        self.torn_tail = false;
        self.end = len + self.line.len() as u64;
        if self.kept_whole && self.kept.len() + line.len() < KEPT_MAX {
            self.kept.extend_from_slice(line.as_bytes());
            self.kept.push(b'\n');
        } else {
            self.kept_whole = false;
            self.kept = Vec::new();
        }
        if self.durability == Durability::Fsync {
            self.file
                .sync_data()
                .map_err(|err| StoreError::io("fsync", &self.path, err))?;
        }
        Ok(())
    }

    /// Keeps `line`, which could not be appended ([`Self::append_failure`]),
    /// in the recovery file, and returns the error naming both.
    fn keep_failed(&mut self, line: &str) -> StoreError {
        let mut lines = line.as_bytes().to_vec();
        lines.push(b'\n');
        let recovery = self.write_recovery(&lines);
        let cause = self
            .append_failure
            .as_ref()
            .map(|err| match err.raw_os_error() {
                Some(code) => std::io::Error::from_raw_os_error(code),
                None => std::io::Error::new(err.kind(), err.to_string()),
            })
            .unwrap_or_else(|| std::io::Error::other("the append failed"));
        StoreError::AppendFailed {
            path: self.path.clone(),
            session: self.session.as_str().to_owned(),
            cause,
            recovery: recovery.as_ref().ok().cloned(),
            recovery_error: recovery.err(),
        }
    }
}

impl Drop for SessionWriter {
    /// Releases the lock explicitly: a child process forked meanwhile (a
    /// tool, a test harness) shares the open file until it execs, and would
    /// otherwise keep the session locked for that moment.
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

/// The most threads [`SessionWriter::append_entries`] encodes on.
const ENCODE_THREADS: usize = 4;
/// Lines each encoding thread may have ready before the writer takes them.
const ENCODED_AHEAD: usize = 16;
/// Fewer entries than this are encoded on the calling thread alone.
const PARALLEL_ENCODE_MIN: usize = 256;

/// Encodes `entry` as its log line; entries of unknown type and damaged
/// ones are refused.
fn encode_for_log(entry: &Entry) -> Result<String, StoreError> {
    if let EntryBody::Unknown { type_name } | EntryBody::Damaged { type_name, .. } = &entry.body {
        return Err(StoreError::Encode {
            id: entry.id.as_str().to_owned(),
            reason: format!(
                "entries of unknown type or damaged ones ({type_name:?}) are only kept, never written"
            ),
        });
    }
    wire::encode_entry(entry)
}

/// Returns the workspace's `.soba/` folder for a session whose header
/// records `cwd`, when that is an absolute path: the last place a recovery
/// file is tried.
fn fallback_dir(cwd: &str) -> Option<PathBuf> {
    let cwd = Path::new(cwd);
    cwd.is_absolute().then(|| cwd.join(".soba"))
}

/// Returns the device and inode of an open file.
fn identity_of(file: &File) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let metadata = file.metadata()?;
    Ok((metadata.dev(), metadata.ino()))
}

/// How long a command waits for another process's lock on a session to
/// be released before it says who holds it: two short commands started
/// together (two `capsule load`s) then take turns instead of one failing,
/// and the holder is still running when it is named (the campaign's race
/// class saw the error name no pid when the holder had just let go).
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

fn lock(file: &File, session: &str, path: &Path) -> Result<(), StoreError> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(TryLockError::WouldBlock) => {
                return Err(StoreError::Locked {
                    session: session.to_owned(),
                    path: path.to_path_buf(),
                    holder: lock_holder(file),
                });
            }
            Err(TryLockError::Error(err)) => return Err(StoreError::io("lock", path, err)),
        }
    }
}

/// Returns who holds the `flock` lock on `file`, as `pid N (command)`,
/// from the kernel's table of locks (`/proc/locks`, Linux): a `flock` lock
/// records the process that took it, and the table names it with the
/// file's device and inode, so nothing extra is written beside the log and
/// nothing goes stale when a holder dies. `None` where the table is missing
/// (another system) or has no line for the file.
fn lock_holder(file: &File) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let metadata = file.metadata().ok()?;
    let table = std::fs::read_to_string("/proc/locks").ok()?;
    let pid = holder_in_table(&table, metadata.dev(), metadata.ino())?;
    let command = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|name| {
            // The name is the other program's: printable ASCII only.
            name.trim_end_matches('\n')
                .chars()
                .map(|c| {
                    if c.is_ascii_graphic() || c == ' ' {
                        c
                    } else {
                        '?'
                    }
                })
                .collect::<String>()
        })
        .filter(|name| !name.is_empty());
    Some(match command {
        Some(command) => format!("pid {pid}, {command}"),
        None => format!("pid {pid}"),
    })
}

/// Finds the process holding a `FLOCK` lock on the file with device `dev`
/// and inode `ino` in a `/proc/locks` table (`1: FLOCK  ADVISORY  WRITE
/// 2011 fe:00:5309287 0 EOF`; waiting requests, marked `->`, are passed over).
fn holder_in_table(table: &str, dev: u64, ino: u64) -> Option<u32> {
    // Linux's dev_t encoding, as glibc's major() and minor() decode it.
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    table.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(1) != Some(&"FLOCK") {
            return None;
        }
        let pid: u32 = fields.get(4)?.parse().ok()?;
        let mut file_id = fields.get(5)?.split(':');
        let line_major = u64::from_str_radix(file_id.next()?, 16).ok()?;
        let line_minor = u64::from_str_radix(file_id.next()?, 16).ok()?;
        let line_ino: u64 = file_id.next()?.parse().ok()?;
        (line_major == major && line_minor == minor && line_ino == ino).then_some(pid)
    })
}

/// Writes a complete new session file at `path` — the header line, then
/// `entries` as given — so that it appears whole or not at all, for
/// importers that write a session in one go: the lines go to a hidden
/// temporary file in the same folder (`.<name>.partial`), which is synced
/// and then renamed to `path`; on any failure (a full disk, an entry that
/// cannot be encoded) the temporary file is removed and nothing is left
/// behind. An existing file at `path` is never replaced
/// ([`StoreError::AlreadyExists`]).
pub fn write_new_session(
    path: &Path,
    header: &SessionHeader,
    entries: &[Entry],
) -> Result<(), StoreError> {
    write_whole(path, |partial| {
        // One fsync at the end instead of one per entry: the file is not
        // visible before the rename, so there is nothing to acknowledge.
        let options = WriterOptions {
            durability: Durability::Flush,
            minter: Box::new(SystemMinter),
        };
        let mut writer = SessionWriter::create(partial, header, options)?;
        writer.append_entries(entries)?;
        writer
            .file
            .sync_all()
            .map_err(|err| StoreError::io("fsync", partial, err))
    })
}

/// Removes the temporary files [`write_new_session`] leaves in `dir` when
/// its process is killed (`.<name>.jsonl.partial`; on any error it removes
/// its own), and returns their paths. A file is removed only when no
/// process holds its lock (a writer locks it from creation to rename) and
/// it has not changed for [`STALE_AFTER`]; anything else, and anything
/// that cannot be read, is left alone.
pub fn remove_stale_partials(dir: &Path) -> Vec<PathBuf> {
    let Ok(read) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in read.flatten() {
        let name = entry.file_name();
        let is_partial = name
            .to_str()
            .is_some_and(|name| name.starts_with('.') && name.ends_with(".jsonl.partial"));
        if !is_partial || !entry.file_type().is_ok_and(|kind| kind.is_file()) {
            continue;
        }
        let path = entry.path();
        let Ok(file) = OpenOptions::new().read(true).open(&path) else {
            continue;
        };
        let settled = file
            .metadata()
            .and_then(|meta| meta.modified())
            .is_ok_and(|at| at.elapsed().is_ok_and(|age| age >= STALE_AFTER));
        if settled && file.try_lock().is_ok() && std::fs::remove_file(&path).is_ok() {
            removed.push(path);
        }
    }
    removed.sort();
    removed
}

/// How long a partial session file must have been left unchanged before
/// [`remove_stale_partials`] takes it for an interrupted write (a writer
/// creates the file a moment before it locks it).
pub const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

/// Runs `write` on a temporary sibling of `path`, then renames it into
/// place and syncs the folder; removes the temporary file on any failure.
fn write_whole(
    path: &Path,
    write: impl FnOnce(&Path) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let Some(name) = path.file_name() else {
        return Err(StoreError::io(
            "create",
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the path has no file name",
            ),
        ));
    };
    if path.exists() {
        return Err(StoreError::AlreadyExists {
            path: path.to_path_buf(),
        });
    }
    let mut partial_name = std::ffi::OsString::from(".");
    partial_name.push(name);
    partial_name.push(".partial");
    let partial = dir.join(partial_name);
    let result = write(&partial).and_then(|()| {
        if path.exists() {
            return Err(StoreError::AlreadyExists {
                path: path.to_path_buf(),
            });
        }
        std::fs::rename(&partial, path).map_err(|err| StoreError::io("rename", &partial, err))?;
        sync_parent_dir(path)
    });
    if result.is_err() {
        // Only our own temporary file: `path` is either untouched or (when
        // the folder sync failed) complete.
        let _ = std::fs::remove_file(&partial);
    }
    result
}

#[cfg(test)]
mod whole_file_tests {
    use super::*;

    #[test]
    fn only_partial_files_nobody_writes_are_swept() {
        let temp = tempfile::tempdir().expect("tempdir");
        let dir = temp.path();
        let old = std::time::SystemTime::now() - 2 * STALE_AFTER;
        let write = |name: &str, modified: Option<std::time::SystemTime>| {
            let path = dir.join(name);
            std::fs::write(&path, b"{\"type\":\"session\"}\n{\"half").expect("write");
            if let Some(at) = modified {
                File::options()
                    .write(true)
                    .open(&path)
                    .and_then(|file| file.set_modified(at))
                    .expect("set the time");
            }
            path
        };
        let stale = write(".a.jsonl.partial", Some(old));
        let locked = write(".b.jsonl.partial", Some(old));
        let fresh = write(".c.jsonl.partial", None);
        let session = write("d.jsonl", Some(old));
        let other = write(".e.partial", Some(old));
        // Another import still writing `b`.
        let writer = File::options().write(true).open(&locked).expect("open");
        writer.lock().expect("lock");
        assert_eq!(remove_stale_partials(dir), std::slice::from_ref(&stale));
        for kept in [&locked, &fresh, &session, &other] {
            assert!(kept.exists(), "{} kept", kept.display());
        }
        assert!(!stale.exists());
        // Once its writer is gone, it is swept too.
        drop(writer);
        assert_eq!(remove_stale_partials(dir), [locked]);
        assert!(remove_stale_partials(&dir.join("missing")).is_empty());
    }

    /// Returns the names in `dir`, sorted.
    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("the folder")
            .map(|entry| {
                entry
                    .expect("an entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_writer_failing_midway_leaves_nothing_behind() {
        let temp = tempfile::tempdir().expect("a temp dir");
        let path = temp.path().join("s.jsonl");
        let err = write_whole(&path, |partial| {
            std::fs::write(partial, b"{\"type\":\"session\"}\n{\"half").expect("some bytes");
            Err(StoreError::io(
                "append to",
                partial,
                std::io::Error::from(std::io::ErrorKind::StorageFull),
            ))
        })
        .expect_err("the write failed");
        assert!(
            matches!(
                err,
                StoreError::Io {
                    action: "append to",
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(names(temp.path()), Vec::<String>::new());
    }

    #[test]
    fn a_complete_write_is_renamed_into_place() {
        let temp = tempfile::tempdir().expect("a temp dir");
        let path = temp.path().join("s.jsonl");
        let mut seen = None;
        write_whole(&path, |partial| {
            seen = Some(partial.to_path_buf());
            assert!(!path.exists(), "not visible before the rename");
            std::fs::write(partial, b"whole\n").map_err(|err| StoreError::io("write", partial, err))
        })
        .expect("written");
        assert_eq!(seen, Some(temp.path().join(".s.jsonl.partial")));
        assert_eq!(std::fs::read(&path).expect("the file"), b"whole\n");
        assert_eq!(names(temp.path()), ["s.jsonl"]);
    }

    #[test]
    fn an_existing_file_is_never_replaced() {
        let temp = tempfile::tempdir().expect("a temp dir");
        let path = temp.path().join("s.jsonl");
        std::fs::write(&path, b"mine").expect("a file");
        let err = write_whole(&path, |_| panic!("nothing is written")).expect_err("exists");
        assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err:?}");
        // Created meanwhile (after the first check): still not replaced.
        std::fs::remove_file(&path).expect("removed");
        let err = write_whole(&path, |partial| {
            std::fs::write(&path, b"theirs").expect("a racing file");
            std::fs::write(partial, b"ours").map_err(|err| StoreError::io("write", partial, err))
        })
        .expect_err("exists");
        assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err:?}");
        assert_eq!(std::fs::read(&path).expect("the file"), b"theirs");
        assert_eq!(names(temp.path()), ["s.jsonl"]);
    }

    #[test]
    fn an_entry_that_cannot_be_written_leaves_no_session_file() {
        let temp = tempfile::tempdir().expect("a temp dir");
        let path = temp.path().join("sessions").join("s.jsonl");
        let mut minter = SequentialMinter::default();
        let header = SessionHeader::new(&mut minter, "/ws");
        let unknown = Entry {
            id: EntryId::from_uuid(IdKind::Entry, minter.uuid_v7()),
            parent_id: None,
            timestamp: minter.timestamp(),
            body: EntryBody::Unknown {
                type_name: "future".to_owned(),
            },
        };
        let err = write_new_session(&path, &header, &[unknown]).expect_err("refused");
        assert!(matches!(err, StoreError::Encode { .. }), "{err:?}");
        assert_eq!(names(&temp.path().join("sessions")), Vec::<String>::new());
        write_new_session(&path, &header, &[]).expect("a header-only session");
        let text = std::fs::read_to_string(&path).expect("the session");
        assert_eq!(text.lines().count(), 1);
        assert_eq!(names(&temp.path().join("sessions")), ["s.jsonl"]);
    }

    /// `n` chained user messages, with a `leaf` entry back to the tenth at
    /// `n / 2`.
    fn many_entries(minter: &mut SequentialMinter, n: usize) -> Vec<Entry> {
        let mut entries: Vec<Entry> = Vec::new();
        for idx in 0..n {
            let body = if idx == n / 2 {
                EntryBody::Leaf {
                    target: entries[10].id.clone(),
                }
            } else {
                EntryBody::Message(MessageEntry {
                    message: Message::user(format!("message {idx} ").repeat(idx % 7 + 1)),
                    tokens: None,
                })
            };
            entries.push(Entry {
                id: EntryId::from_uuid(IdKind::Entry, minter.uuid_v7()),
                parent_id: entries.last().map(|entry: &Entry| entry.id.clone()),
                timestamp: minter.timestamp(),
                body,
            });
        }
        entries
    }

    #[test]
    fn entries_encoded_on_several_threads_are_written_as_one_thread_writes_them() {
        let temp = tempfile::tempdir().expect("a temp dir");
        let mut minter = SequentialMinter::default();
        let header = SessionHeader::new(&mut minter, "/ws");
        let entries = many_entries(&mut minter, 3 * PARALLEL_ENCODE_MIN + 5);
        let parallel = temp.path().join("parallel.jsonl");
        write_new_session(&parallel, &header, &entries).expect("written");
        let one_by_one = temp.path().join("one.jsonl");
        let options = WriterOptions {
            durability: Durability::Flush,
            minter: Box::new(SequentialMinter::default()),
        };
        let mut writer = SessionWriter::create(&one_by_one, &header, options).expect("created");
        for entry in &entries {
            writer.append_entry(entry).expect("appended");
        }
        drop(writer);
        let written = std::fs::read_to_string(&parallel).expect("the session");
        assert_eq!(written.lines().count(), entries.len() + 1);
        assert_eq!(
            written,
            std::fs::read_to_string(&one_by_one).expect("the other")
        );
    }

    #[test]
    fn an_unwritable_entry_among_many_fails_the_write_with_its_own_id() {
        let temp = tempfile::tempdir().expect("a temp dir");
        let path = temp.path().join("s.jsonl");
        let mut minter = SequentialMinter::default();
        let header = SessionHeader::new(&mut minter, "/ws");
        let mut entries = many_entries(&mut minter, 2 * PARALLEL_ENCODE_MIN);
        // Two bad entries, on two threads' shares: the first one is named.
        for idx in [301, 402] {
            entries[idx].body = EntryBody::Unknown {
                type_name: format!("future {idx}"),
            };
        }
        let err = write_new_session(&path, &header, &entries).expect_err("refused");
        match err {
            StoreError::Encode { id, reason } => {
                assert_eq!(id, entries[301].id.as_str());
                assert!(reason.contains("future 301"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(names(temp.path()), Vec::<String>::new());
    }
}

/// Makes a new file's directory entry durable.
fn sync_parent_dir(path: &Path) -> Result<(), StoreError> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let handle =
        File::open(dir).map_err(|err| StoreError::io("open the sessions directory", dir, err))?;
    handle
        .sync_all()
        .map_err(|err| StoreError::io("fsync the sessions directory", dir, err))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_holder_is_found_by_device_and_inode() {
        let table = "1: FLOCK  ADVISORY  WRITE 2011 fe:00:5309287 0 EOF\n\
                     1: -> FLOCK  ADVISORY  WRITE 2099 08:01:77 0 EOF\n\
                     2: POSIX  ADVISORY  WRITE 3000 08:01:77 0 EOF\n\
                     3: FLOCK  ADVISORY  WRITE 4242 08:01:77 0 EOF\n";
        // 08:01 is device 0x801.
        assert_eq!(holder_in_table(table, 0x801, 77), Some(4242));
        assert_eq!(holder_in_table(table, 0xfe00, 5309287), Some(2011));
        assert_eq!(holder_in_table(table, 0x801, 78), None);
    }

    #[test]
    fn session_ids_are_safe_file_names() {
        assert!(SessionId::parse("0190f3a2-b4c5-7000-8000-000000000001").is_ok());
        assert!(SessionId::parse("../etc").is_err());
        assert!(SessionId::parse("").is_err());
        assert!(SessionId::parse(&"a".repeat(129)).is_err());
        let id = SessionId::from_uuid(0x0190_f3a2_b4c5_77f3_a9d1_0000_0000_0001);
        assert_eq!(id.as_str(), "0190f3a2-b4c5-77f3-a9d1-000000000001");
    }

    #[test]
    fn sequential_minter_is_deterministic_v7() {
        let mut minter = SequentialMinter::default();
        assert_eq!(minter.timestamp(), "2025-01-01T00:00:00Z");
        assert_eq!(minter.timestamp(), "2025-01-01T00:00:01Z");
        let first = uuid::Uuid::from_u128(minter.uuid_v7());
        let second = uuid::Uuid::from_u128(minter.uuid_v7());
        assert_eq!(first.get_version_num(), 7);
        assert_ne!(first, second);
        let a = EntryId::from_uuid(IdKind::Entry, first.as_u128());
        let b = EntryId::from_uuid(IdKind::Entry, second.as_u128());
        assert_ne!(a.short_with(4), b.short_with(4));
        let mut again = SequentialMinter::default();
        again.timestamp();
        assert_eq!(again.uuid_v7(), first.as_u128());
    }

    #[test]
    fn system_minter_writes_rfc3339_utc_millis() {
        let stamp = SystemMinter.timestamp();
        assert!(stamp.ends_with('Z'), "{stamp}");
        assert_eq!(stamp.len(), "2025-01-01T00:00:00.000Z".len(), "{stamp}");
        assert!(stamp.parse::<jiff::Timestamp>().is_ok());
        assert_eq!(
            uuid::Uuid::from_u128(SystemMinter.uuid_v7()).get_version_num(),
            7
        );
    }

    #[test]
    fn durability_names() {
        assert_eq!(Durability::parse("fsync"), Some(Durability::Fsync));
        assert_eq!(
            Durability::parse(Durability::Flush.as_str()),
            Some(Durability::Flush)
        );
        assert_eq!(Durability::parse("sync"), None);
    }
}
