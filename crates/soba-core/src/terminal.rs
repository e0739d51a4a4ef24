//! Terminal-safe text: the one sanitizer every outside-derived string goes
//! through before it reaches a terminal (titles, paths, model ids, tool
//! output, diagnostics, error messages), in the CLI and the TUI alike.
//!
//! A character is *unsafe* when a terminal would act on it instead of
//! showing it, or when it is invisible and changes what the reader sees:
//!
//! - C0 controls (U+0000–U+001F) and DEL (U+007F): ESC starts escape
//!   sequences (retitling, clearing, OSC 52 clipboard writes), BEL rings,
//!   `\r` overwrites the line. In [`sanitize`] (multi-line text) `\n` and
//!   `\t` stay and a `\r\n` pair becomes `\n`; [`sanitize_line`] escapes
//!   those too.
//! - C1 controls (U+0080–U+009F), among them the 8-bit CSI U+009B and NEL.
//! - Bidirectional controls (U+061C, U+200E, U+200F, U+202A–U+202E,
//!   U+2066–U+2069), which reorder what follows them.
//! - The other invisible format characters (Unicode category `Cf`, e.g.
//!   U+200B zero-width space, U+2060 word joiner, U+FEFF, U+00AD, the
//!   invisible operators and the tag characters U+E0000–U+E007F used to
//!   smuggle hidden text) and the line/paragraph separators U+2028/U+2029.
//!
//! Two exceptions keep ordinary text intact: the zero-width joiner and
//! non-joiner (U+200D, U+200C) are part of emoji sequences and of Persian
//! and Indic spelling, and tag characters directly after U+1F3F4 (🏴) spell
//! the subdivision flags. They neither move the cursor nor reorder text.
//!
//! Each unsafe character is shown as a visible escape: `\x1b` below
//! U+0080, `\u{9b}` above, and `\n`, `\r`, `\t` by name in
//! [`sanitize_line`], so the reader sees that something was there. The
//! escape is for display only: a literal backslash is not escaped, so the
//! output is not meant to be parsed back. [`sanitize_json`] is the variant
//! for JSON documents: the same characters as `\uXXXX`, which parses back
//! to the same value.

use std::borrow::Cow;
use std::fmt::{self, Write as _};

/// U+1F3F4 WAVING BLACK FLAG, the base of the tag-sequence flags.
const BLACK_FLAG: char = '\u{1F3F4}';

/// Returns `text` with every unsafe character shown as a visible escape,
/// keeping `\n` and `\t` (multi-line text such as transcripts and tool
/// output). Borrows when nothing needed escaping.
pub fn sanitize(text: &str) -> Cow<'_, str> {
    escape(text, Mode::MultiLine)
}

/// Returns `text` as one safe line: like [`sanitize`], and `\n`, `\r` and
/// `\t` are escaped too (titles, paths, ids, previews).
pub fn sanitize_line(text: &str) -> Cow<'_, str> {
    escape(text, Mode::Line)
}

/// Returns a JSON document with every unsafe character that serde leaves
/// raw (DEL, C1, bidi and format characters) written as a `\uXXXX` escape.
/// Such characters can only stand inside JSON strings, where the escape
/// decodes to the same character, so the document's value is unchanged.
pub fn sanitize_json(json: &str) -> Cow<'_, str> {
    let mut scan = Scanner::default();
    let Some(start) = json
        .char_indices()
        .find(|&(_, ch)| scan.is_unsafe(ch) && !matches!(ch, '\n' | '\t' | '\r'))
        .map(|(idx, _)| idx)
    else {
        return Cow::Borrowed(json);
    };
    let mut out = String::with_capacity(json.len() + 16);
    out.push_str(&json[..start]);
    let mut scan = Scanner::after(&json[..start]);
    for ch in json[start..].chars() {
        if scan.is_unsafe(ch) && !matches!(ch, '\n' | '\t' | '\r') {
            let mut units = [0u16; 2];
            for unit in ch.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else {
            out.push(ch);
        }
    }
    Cow::Owned(out)
}

/// Returns whether `text` reaches a terminal unchanged by [`sanitize`].
pub fn is_safe(text: &str) -> bool {
    matches!(sanitize(text), Cow::Borrowed(_))
}

/// A [`Display`](fmt::Display) wrapper that writes its text through
/// [`sanitize_line`]: `format!("{}", Line(&title))`.
#[derive(Debug, Clone, Copy)]
pub struct Line<'a>(pub &'a str);

impl fmt::Display for Line<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&sanitize_line(self.0))
    }
}

/// Which characters a context can show as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `\n` and `\t` stay.
    MultiLine,
    /// Everything that is not one visible line is escaped.
    Line,
}

fn escape(text: &str, mode: Mode) -> Cow<'_, str> {
    let mut scan = Scanner::default();
    let keeps = |ch: char| mode == Mode::MultiLine && matches!(ch, '\n' | '\t');
    let Some(start) = text
        .char_indices()
        .find(|&(_, ch)| scan.is_unsafe(ch) && !keeps(ch))
        .map(|(idx, _)| idx)
    else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 16);
    out.push_str(&text[..start]);
    let mut scan = Scanner::after(&text[..start]);
    let mut chars = text[start..].chars().peekable();
    while let Some(ch) = chars.next() {
        let unsafe_here = scan.is_unsafe(ch);
        match (mode, ch) {
            (Mode::MultiLine, '\n' | '\t') => out.push(ch),
            // A CRLF line end is a line end, not an overwrite.
            (Mode::MultiLine, '\r') if chars.peek() == Some(&'\n') => {}
            (_, '\n') => out.push_str("\\n"),
            (_, '\r') => out.push_str("\\r"),
            (_, '\t') => out.push_str("\\t"),
            _ if unsafe_here => push_escape(&mut out, ch),
            _ => out.push(ch),
        }
    }
    Cow::Owned(out)
}

fn push_escape(out: &mut String, ch: char) {
    let code = u32::from(ch);
    if code < 0x80 {
        let _ = write!(out, "\\x{code:02x}");
    } else {
        let _ = write!(out, "\\u{{{code:x}}}");
    }
}

/// Decides character by character, remembering whether a flag's tag
/// sequence is open.
#[derive(Debug, Default)]
struct Scanner {
    /// The previous character was U+1F3F4 or a tag inside its sequence.
    in_flag: bool,
}

impl Scanner {
    /// A scanner positioned after `text`.
    fn after(text: &str) -> Self {
        let mut scan = Scanner::default();
        for ch in text.chars() {
            scan.is_unsafe(ch);
        }
        scan
    }

    /// Returns whether `ch` must not reach a terminal raw.
    fn is_unsafe(&mut self, ch: char) -> bool {
        let code = u32::from(ch);
        let in_flag = std::mem::replace(&mut self.in_flag, ch == BLACK_FLAG);
        match code {
            0x00..=0x1f | 0x7f..=0x9f => true,
            0x20..=0x7e => false,
            // Tags spell a flag only in a run after the black flag; the
            // cancel tag U+E007F ends the run.
            0xe0020..=0xe007e if in_flag => {
                self.in_flag = true;
                false
            }
            0xe007f if in_flag => false,
            0xe0000..=0xe007f => true,
            _ => is_invisible_format(code),
        }
    }
}

/// Unicode's format characters (category `Cf`, Unicode 15.1) without the
/// joiners and the tags, plus the line and paragraph separators.
fn is_invisible_format(code: u32) -> bool {
    matches!(
        code,
        0x00ad
            | 0x0600..=0x0605
            | 0x061c
            | 0x06dd
            | 0x070f
            | 0x0890..=0x0891
            | 0x08e2
            | 0x180e
            | 0x200b
            | 0x200e..=0x200f
            | 0x2028..=0x202e
            | 0x2060..=0x2064
            | 0x2066..=0x206f
            | 0xfeff
            | 0xfff9..=0xfffb
            | 0x110bd
            | 0x110cd
            | 0x13430..=0x1343f
            | 0x1bca0..=0x1bca3
            | 0x1d173..=0x1d17a
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, multi_line: &str, one_line: &str) {
        assert_eq!(sanitize(input), multi_line, "sanitize({input:?})");
        assert_eq!(sanitize_line(input), one_line, "sanitize_line({input:?})");
        // Sanitized text is a fixed point: nothing unsafe is left.
        assert!(is_safe(&sanitize(input)));
        assert_eq!(sanitize_line(&sanitize_line(input)), sanitize_line(input));
    }

    #[test]
    fn terminal_sequences_are_shown_escaped() {
        check(
            "\x1b]52;c;aGVsbG8=\x07",
            "\\x1b]52;c;aGVsbG8=\\x07",
            "\\x1b]52;c;aGVsbG8=\\x07",
        );
        check("\x1b[2J", "\\x1b[2J", "\\x1b[2J");
        check(
            "\x1b]0;title\x07",
            "\\x1b]0;title\\x07",
            "\\x1b]0;title\\x07",
        );
    }

    #[test]
    fn every_c0_control_and_del_is_escaped() {
        for code in (0u8..0x20).chain([0x7f]) {
            let ch = char::from(code);
            let escaped = match ch {
                '\n' => "\\n".to_owned(),
                '\r' => "\\r".to_owned(),
                '\t' => "\\t".to_owned(),
                _ => format!("\\x{code:02x}"),
            };
            assert_eq!(sanitize_line(&format!("a{ch}b")), format!("a{escaped}b"));
            let multi = match ch {
                '\n' | '\t' => format!("a{ch}b"),
                _ => format!("a{escaped}b"),
            };
            assert_eq!(sanitize(&format!("a{ch}b")), multi);
        }
    }

    #[test]
    fn every_c1_control_is_escaped() {
        for code in 0x80u32..=0x9f {
            let ch = char::from_u32(code).expect("C1 is in range");
            assert_eq!(sanitize(&format!("a{ch}b")), format!("a\\u{{{code:x}}}b"));
        }
        check("ls \u{9b}31m", "ls \\u{9b}31m", "ls \\u{9b}31m");
        check("a\u{85}b", "a\\u{85}b", "a\\u{85}b");
    }

    #[test]
    fn bidi_controls_are_escaped() {
        let bidi = [
            0x061c, 0x200e, 0x200f, 0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2066, 0x2067, 0x2068,
            0x2069,
        ];
        for code in bidi {
            let ch = char::from_u32(code).expect("bidi code points are chars");
            assert_eq!(sanitize(&format!("a{ch}b")), format!("a\\u{{{code:x}}}b"));
        }
        check(
            "invoice_\u{202e}fdp.exe",
            "invoice_\\u{202e}fdp.exe",
            "invoice_\\u{202e}fdp.exe",
        );
    }

    #[test]
    fn invisible_format_characters_are_escaped() {
        for code in [
            0x00ad, 0x200b, 0x2028, 0x2029, 0x2060, 0x2063, 0xfeff, 0xfff9, 0xe0001, 0xe0041,
        ] {
            let ch = char::from_u32(code).expect("format code points are chars");
            assert_eq!(sanitize(&format!("a{ch}b")), format!("a\\u{{{code:x}}}b"));
        }
    }

    #[test]
    fn newlines_and_tabs_depend_on_the_context() {
        check("a\nb\tc", "a\nb\tc", "a\\nb\\tc");
        check("a\r\nb", "a\nb", "a\\r\\nb");
        check("100%\rdone", "100%\\rdone", "100%\\rdone");
        check("end\r", "end\\r", "end\\r");
    }

    #[test]
    fn ordinary_unicode_is_untouched() {
        for text in [
            "plain ascii ~!@#$%^&*()_+{}|:\"<>?`-=[]\\;',./",
            "日本語のテキスト, 中文, 한국어",
            "café naïve façade Ångström ß",
            "emoji 🎉🚀 👍🏽 ❤️",
            "family 👨\u{200d}👩\u{200d}👧 and ZWNJ می\u{200c}خواهم",
            "flag 🏴\u{e0067}\u{e0062}\u{e0073}\u{e0063}\u{e0074}\u{e007f} of Scotland",
            "עברית العربية",
            "combining e\u{301} and variation \u{fe0f}",
            "",
        ] {
            assert!(matches!(sanitize(text), Cow::Borrowed(_)), "{text:?}");
            assert!(matches!(sanitize_line(text), Cow::Borrowed(_)), "{text:?}");
        }
    }

    #[test]
    fn tag_characters_without_a_flag_are_escaped() {
        check(
            "a\u{e0041}\u{e0042}",
            "a\\u{e0041}\\u{e0042}",
            "a\\u{e0041}\\u{e0042}",
        );
        // A cancel tag outside the printable range never spells a flag.
        check("🏴\u{e0001}", "🏴\\u{e0001}", "🏴\\u{e0001}");
    }

    #[test]
    fn the_line_wrapper_displays_sanitized() {
        assert_eq!(format!("[{}]", Line("a\x1b[2Jb\n")), "[a\\x1b[2Jb\\n]");
    }

    #[test]
    fn json_keeps_its_value() {
        let value = serde_json::json!({
            "title": "a\u{7f}\u{9b}\u{202e}\u{200b}b\u{1d173}",
            "ok": "日本 🎉",
        });
        let text = serde_json::to_string_pretty(&value).expect("json values serialize");
        let safe = sanitize_json(&text);
        assert!(is_safe(&safe), "{safe}");
        assert!(safe.contains("a\\u007f\\u009b\\u202e\\u200bb\\ud834\\udd73"));
        assert!(safe.contains("日本 🎉"));
        let back: serde_json::Value = serde_json::from_str(&safe).expect("still json");
        assert_eq!(back, value);
        assert!(matches!(
            sanitize_json("{\"a\": \"b\"}\n"),
            Cow::Borrowed(_)
        ));
    }
}
