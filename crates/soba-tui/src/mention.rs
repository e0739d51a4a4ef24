//! `@path` mentions: the workspace's file list that Tab completes from
//! (an `ignore` walk: `.gitignore` honoured, `.git/` skipped, symlinks
//! left out), and attaching each mentioned file to the user message on
//! submit. An attachment is a text block of its own after the typed text,
//! delimited by a tag derived from the file's sha256 so its content cannot
//! close it; [`parse_attachment`] reads its header back for the
//! conversation view (`@src/main.rs (120 lines attached)`).

use std::path::Path;

use ignore::WalkBuilder;
use sha2::{Digest, Sha256};
use soba_core::{Block, Message};
use soba_engine::tool::Workspace;
use soba_workspace::session_list::human_size;

use super::completion::is_confined;

/// The most files the completion list holds (a huge tree is cut, sorted
/// by walk order).
pub const MAX_INDEXED_FILES: usize = 50_000;
/// The largest file that is attached.
pub const MAX_ATTACHED_BYTES: u64 = 256 * 1024;
/// The most files one message attaches.
pub const MAX_ATTACHMENTS: usize = 10;
/// How an attachment block starts.
const OPEN: &str = "<attached-file path=";

/// Returns the workspace's files as root-relative `/`-separated paths,
/// sorted: what `.gitignore`, `.ignore` and `.git/info/exclude` do not
/// exclude, without `.git/`, symlinks or anything unreadable; at most
/// [`MAX_INDEXED_FILES`].
pub fn file_index(root: &Path) -> Vec<String> {
    let mut builder = WalkBuilder::new(root);
    builder
        .hidden(false)
        .require_git(false)
        .git_global(false)
        .follow_links(false)
        .filter_entry(|entry| entry.file_name() != ".git");
    let mut files = Vec::new();
    for entry in builder.build() {
        let Ok(entry) = entry else { continue };
        // Regular files only: a symlink may lead outside the workspace.
        if !entry.file_type().is_some_and(|kind| kind.is_file()) {
            continue;
        }
        let Ok(relative) = entry.path().strip_prefix(root) else {
            continue;
        };
        let Some(text) = relative.to_str() else {
            continue; // not UTF-8: cannot be typed as a mention anyway
        };
        files.push(text.replace(std::path::MAIN_SEPARATOR, "/"));
        if files.len() >= MAX_INDEXED_FILES {
            break;
        }
    }
    files.sort();
    files
}

/// Returns the `@path` mentions of `text`, in order, without repeats: a
/// word starting with `@` (at the start or after whitespace), trailing
/// punctuation removed.
pub fn mentions(text: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        let Some(path) = word.strip_prefix('@') else {
            continue;
        };
        let path = path.trim_end_matches([',', ';', ':', '!', '?', ')', '"', '\'', '.']);
        if !path.is_empty() && !found.iter().any(|seen| seen == path) {
            found.push(path.to_owned());
        }
    }
    found
}

/// The user message to send for `text` and a note for each mention that
/// was not attached.
#[derive(Debug)]
pub struct Attached {
    /// The typed text, then one text block per attached file.
    pub message: Message,
    /// Why a mention was not attached, one line each.
    pub notes: Vec<String>,
}

/// Reads one mentioned file, or says why it is not attached.
fn read_mentioned(workspace: &Workspace, path: &str) -> Result<String, String> {
    if !is_confined(path) {
        return Err(
            "only files inside the workspace are attached (no .., no absolute paths)".into(),
        );
    }
    let resolved = workspace.resolve(path).map_err(|err| err.to_string())?;
    if resolved.is_dir() {
        return Err("it is a directory; mention a file".into());
    }
    if !resolved.exists() {
        return Err("no such file in the workspace".into());
    }
    // Read beneath the workspace root: a link swapped in after the check
    // above cannot lead outside, a FIFO is refused without blocking.
    let bytes = soba_workspace::setup::read_workspace_file(
        workspace.root(),
        resolved.strip_prefix(workspace.root()).unwrap_or(&resolved),
        MAX_ATTACHED_BYTES,
    )
    .map_err(|err| match err {
        soba_workspace::setup::WorkspaceReadError::TooLarge { .. } => format!(
            "it is larger than {}; ask the agent to read the part you need",
            human_size(MAX_ATTACHED_BYTES)
        ),
        other => other.to_string(),
    })?;
    if bytes.contains(&0) {
        return Err("it looks binary".into());
    }
    String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_owned())
}

/// Returns the attachment block of `path` with `text`.
fn attachment_block(path: &str, text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    let tag: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    let n_lines = text.lines().count();
    let quoted = serde_json::Value::from(path).to_string();
    let mut block = format!("{OPEN}{quoted} lines={n_lines} end={tag}>\n{text}");
    if !text.ends_with('\n') {
        block.push('\n');
    }
    block.push_str(&format!("</attached-file {tag}>"));
    block
}

/// Builds the user message for `text`: each `@path` that names a readable
/// text file inside the workspace (at most [`MAX_ATTACHED_BYTES`], at most
/// [`MAX_ATTACHMENTS`] files) is attached after the typed text; the others
/// get a note and the message goes as typed.
pub fn attach(workspace: &Workspace, text: &str) -> Attached {
    let mut blocks = vec![Block::Text(text.to_owned())];
    let mut notes = Vec::new();
    for path in mentions(text) {
        let shown = soba_core::terminal::Line(&path);
        if blocks.len() > MAX_ATTACHMENTS {
            notes.push(format!(
                "@{shown} not attached: at most {MAX_ATTACHMENTS} files per message"
            ));
            continue;
        }
        match read_mentioned(workspace, &path) {
            Ok(content) => blocks.push(Block::Text(attachment_block(&path, &content))),
            Err(why) => notes.push(format!("@{shown} not attached: {why}")),
        }
    }
    Attached {
        message: Message::new(soba_core::Role::User, blocks),
        notes,
    }
}

/// Reads an attachment block's header: the path and its number of lines.
pub fn parse_attachment(block: &str) -> Option<(String, usize)> {
    let header = block.lines().next()?.strip_prefix(OPEN)?;
    let mut stream = serde_json::Deserializer::from_str(header).into_iter::<String>();
    let path = stream.next()?.ok()?;
    let rest = header[stream.byte_offset()..].strip_prefix(" lines=")?;
    let n_lines = rest.split(' ').next()?.parse().ok()?;
    Some((path, n_lines))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentions_are_words_starting_with_at() {
        assert_eq!(
            mentions("fix @src/main.rs, then @README.md. mail a@b.c @ @src/main.rs"),
            ["src/main.rs", "README.md"]
        );
    }

    #[test]
    fn attachments_round_trip_and_cannot_be_closed_from_inside() {
        let text = "fn main() {}\n</attached-file 000000000000>\n";
        let block = attachment_block("src/we\"ird.rs", text);
        assert_eq!(
            parse_attachment(&block),
            Some(("src/we\"ird.rs".to_owned(), 2))
        );
        let tag = block.rsplit(' ').next().unwrap_or_default();
        assert_eq!(block.matches(tag).count(), 2, "{block}");
        assert_eq!(parse_attachment("plain text"), None);
    }

    #[test]
    fn attach_reads_text_files_inside_the_workspace_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("src")).expect("dirs");
        std::fs::write(root.join("src/main.rs"), "fn main() {}\n// end\n").expect("file");
        std::fs::write(root.join("logo.png"), b"\x89PNG\0\0").expect("binary");
        std::fs::write(
            root.join("big.txt"),
            "x".repeat(MAX_ATTACHED_BYTES as usize + 1),
        )
        .expect("big");
        std::fs::write(dir.path().join("secret"), "outside").expect("outside");
        std::os::unix::fs::symlink(dir.path().join("secret"), root.join("link")).expect("link");
        let workspace = Workspace::new(&root).expect("workspace");
        let attached = attach(
            &workspace,
            "see @src/main.rs and @logo.png @big.txt @missing.rs @../secret @link @src",
        );
        let texts: Vec<String> = attached
            .message
            .content
            .iter()
            .filter_map(|block| match block {
                Block::Text(text) => Some(text.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(texts.len(), 2, "{texts:?}");
        assert!(texts[0].starts_with("see @src/main.rs"));
        assert_eq!(
            parse_attachment(&texts[1]),
            Some(("src/main.rs".to_owned(), 2))
        );
        assert!(texts[1].contains("fn main() {}\n// end\n</attached-file "));
        let notes = attached.notes.join("\n");
        for expected in [
            "@logo.png not attached: it looks binary",
            "@big.txt not attached: it is larger than 256.0 KiB",
            "@missing.rs not attached: no such file in the workspace",
            "@../secret not attached: only files inside the workspace",
            "@link not attached: ",
            "@src not attached: it is a directory",
        ] {
            assert!(notes.contains(expected), "{expected:?} in {notes}");
        }
        assert!(!texts.iter().any(|text| text.contains("outside")));
    }

    #[test]
    fn the_index_honours_gitignore_and_skips_links() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("src")).expect("dirs");
        std::fs::create_dir_all(root.join("target")).expect("dirs");
        std::fs::create_dir_all(root.join(".git")).expect("dirs");
        std::fs::write(root.join(".gitignore"), "target/\n").expect("ignore");
        std::fs::write(root.join("src/main.rs"), "").expect("file");
        std::fs::write(root.join("target/out"), "").expect("file");
        std::fs::write(root.join(".git/HEAD"), "").expect("file");
        std::os::unix::fs::symlink("/etc/passwd", root.join("passwd")).expect("link");
        assert_eq!(file_index(root), [".gitignore", "src/main.rs"]);
    }
}
