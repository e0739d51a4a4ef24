//! The CLI's terminal output: every text byte a subcommand prints goes
//! through [`soba_core::terminal::sanitize`] here, so no escape sequence,
//! C1 control or bidi override from a session log, an imported file, a
//! capsule, a config file or the environment reaches the terminal raw.
//!
//! [`stdout`] and [`stderr`] return [`Sanitized`] writers, and the
//! [`outln!`] and [`errln!`] macros print whole
//! lines through them. `std::io::stdout`, `std::io::stderr`, `println!` and
//! `eprintln!` are denied in this crate by its `clippy.toml`; the few raw
//! uses (the TUI's own terminal, `soba run`'s progress line) are allowed
//! where they stand, with the reason. Single-line fields (titles, paths,
//! model ids) are formatted with [`soba_core::terminal::Line`] so that a
//! newline in them cannot forge a line of output; JSON documents go through
//! [`soba_core::terminal::sanitize_json`] first, which keeps their value
//! and leaves nothing for the writer to change.

use std::fmt;
use std::io::{self, Write};

use soba_core::terminal;

/// Returns stdout, sanitizing (locked for the writer's lifetime).
pub fn stdout() -> Sanitized<io::StdoutLock<'static>> {
    #[allow(clippy::disallowed_methods, reason = "the one sanitized stdout")]
    let raw = io::stdout();
    Sanitized::new(raw.lock())
}

/// Returns stderr, sanitizing (locked for the writer's lifetime).
pub fn stderr() -> Sanitized<io::StderrLock<'static>> {
    #[allow(clippy::disallowed_methods, reason = "the one sanitized stderr")]
    let raw = io::stderr();
    Sanitized::new(raw.lock())
}

/// Returns the raw stderr, for output that carries the CLI's own control
/// sequences (`soba run`'s in-place progress line); every outside value in
/// it must already be sanitized.
pub fn raw_stderr() -> io::Stderr {
    #[allow(clippy::disallowed_methods, reason = "callers sanitize the values")]
    io::stderr()
}

/// Whether stderr is a terminal.
pub fn stderr_is_terminal() -> bool {
    use std::io::IsTerminal;
    raw_stderr().is_terminal()
}

/// Prints one line to stderr, sanitized; errors writing it are ignored, as
/// `eprintln!` would panic instead.
pub fn eprint_line(args: fmt::Arguments<'_>) {
    let mut err = stderr();
    let _ = err.write_fmt(args);
    let _ = err.write_all(b"\n");
    let _ = err.flush();
}

/// Prints one line to stdout, sanitized.
pub fn print_line(args: fmt::Arguments<'_>) -> io::Result<()> {
    let mut out = stdout();
    out.write_fmt(args)?;
    out.write_all(b"\n")?;
    out.flush()
}

/// Returns `path` as one safe line of text, for messages.
pub fn path(path: &std::path::Path) -> String {
    terminal::sanitize_line(&path.display().to_string()).into_owned()
}

/// Prints the configuration's warnings to stderr.
pub fn print_warnings(ctx: &soba_workspace::Context) {
    for warning in &ctx.loaded.warnings {
        eprint_line(format_args!("warning: {warning}"));
    }
}

/// Prints a line to stderr through the sanitizer, like `eprintln!`.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::eprint_line(format_args!($($arg)*))
    };
}
pub(crate) use errln;

/// Prints a line to stdout through the sanitizer; evaluates to the
/// `io::Result`.
macro_rules! outln {
    () => {
        $crate::output::print_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::print_line(format_args!($($arg)*))
    };
}
pub(crate) use outln;

/// A writer that passes text through [`terminal::sanitize`] (newlines and
/// tabs kept). Bytes that are not UTF-8 are shown as `\xNN`; a character
/// split across two writes is held until its end arrives.
#[derive(Debug)]
pub struct Sanitized<W: Write> {
    inner: W,
    /// The start of a UTF-8 sequence whose end has not been written yet.
    pending: Vec<u8>,
}

impl<W: Write> Sanitized<W> {
    /// Wraps `inner`.
    pub fn new(inner: W) -> Self {
        Sanitized {
            inner,
            pending: Vec::new(),
        }
    }

    fn write_pending(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending);
        self.inner.write_all(escape_bytes(&pending).as_bytes())
    }
}

impl<W: Write> Write for Sanitized<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut bytes = std::mem::take(&mut self.pending);
        bytes.extend_from_slice(buf);
        let mut text = String::with_capacity(bytes.len());
        let mut chunks = bytes.utf8_chunks().peekable();
        while let Some(chunk) = chunks.next() {
            text.push_str(&terminal::sanitize(chunk.valid()));
            let invalid = chunk.invalid();
            if invalid.is_empty() {
                continue;
            }
            // The last chunk's invalid bytes may be a sequence cut short.
            if chunks.peek().is_none() && could_continue(invalid) {
                self.pending = invalid.to_vec();
            } else {
                text.push_str(&escape_bytes(invalid));
            }
        }
        self.inner.write_all(text.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<W: Write> Drop for Sanitized<W> {
    fn drop(&mut self) {
        let _ = self.write_pending();
        let _ = self.inner.flush();
    }
}

/// Whether `bytes` is the start of a UTF-8 sequence longer than itself.
fn could_continue(bytes: &[u8]) -> bool {
    let needed = match bytes[0] {
        0xc2..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf4 => 4,
        _ => return false,
    };
    bytes.len() < needed && bytes[1..].iter().all(|b| (0x80..=0xbf).contains(b))
}

fn escape_bytes(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("\\x{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(pieces: &[&[u8]]) -> String {
        let mut buf = Vec::new();
        let mut out = Sanitized::new(&mut buf);
        for piece in pieces {
            out.write_all(piece).expect("vec writes succeed");
        }
        drop(out);
        String::from_utf8(buf).expect("sanitized is utf-8")
    }

    #[test]
    fn escapes_are_shown_and_lines_kept() {
        assert_eq!(
            written(&[b"a\x1b]0;t\x07\n", "b\u{202e}c\u{9b}\tz\n".as_bytes()]),
            "a\\x1b]0;t\\x07\nb\\u{202e}c\\u{9b}\tz\n"
        );
    }

    #[test]
    fn a_character_split_across_writes_is_kept_whole() {
        let text = "é€🎉\u{202e}";
        let bytes = text.as_bytes();
        for cut in 1..bytes.len() {
            assert_eq!(
                written(&[&bytes[..cut], &bytes[cut..]]),
                "é€🎉\\u{202e}",
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn bytes_that_are_not_utf8_are_shown() {
        assert_eq!(written(&[b"a\x9bb\xff"]), "a\\x9bb\\xff");
        // A sequence cut short at the very end is written out on drop.
        assert_eq!(written(&[b"a\xe2\x82"]), "a\\xe2\\x82");
    }

    #[test]
    fn json_keeps_its_value_and_is_safe() {
        let value = serde_json::json!({"cwd": "/tmp/\u{1b}]52;c;x\u{7}\u{202e}\u{9b}"});
        let pretty = serde_json::to_string_pretty(&value).expect("json values serialize");
        let text = written(&[terminal::sanitize_json(&pretty).as_bytes()]);
        assert!(terminal::is_safe(&text), "{text}");
        let back: serde_json::Value = serde_json::from_str(&text).expect("still json");
        assert_eq!(back, value);
    }
}
