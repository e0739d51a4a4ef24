//! Tab completion in the input box: slash command names (`/com` →
//! `/compact `) and `@path` mentions of workspace files, both pure
//! functions over the typed text and, for paths, the workspace's file list
//! (built by [`super::mention::file_index`]).

use std::collections::BTreeSet;

use super::command::COMMANDS;

/// How many candidates the hint line names before "+N more".
const HINT_CANDIDATES: usize = 8;

/// What one Tab press does to the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The byte range of the typed word that is replaced.
    pub replace: std::ops::Range<usize>,
    /// What replaces it (equal to the word when nothing can be added).
    pub with: String,
    /// What to show in the hint line: the candidates, or why there are none.
    pub hint: Option<String>,
}

/// Returns the longest common prefix of `words`, on character boundaries.
fn common_prefix<'a>(words: impl IntoIterator<Item = &'a str>) -> String {
    let mut words = words.into_iter();
    let Some(first) = words.next() else {
        return String::new();
    };
    let mut len = first.len();
    for word in words {
        len = first
            .char_indices()
            .zip(word.chars())
            .take_while(|((_, a), b)| a == b)
            .last()
            .map_or(0, |((idx, ch), _)| idx + ch.len_utf8())
            .min(len);
    }
    first[..len].to_owned()
}

/// Names the candidates for the hint line, at most [`HINT_CANDIDATES`].
fn hint_of(candidates: &[String]) -> String {
    let mut hint = candidates
        .iter()
        .take(HINT_CANDIDATES)
        .cloned()
        .collect::<Vec<_>>()
        .join("  ");
    if candidates.len() > HINT_CANDIDATES {
        hint.push_str(&format!("  +{} more", candidates.len() - HINT_CANDIDATES));
    }
    hint
}

/// Returns the start (byte index) of the word ending at `cursor_byte`.
fn word_start(text: &str, cursor_byte: usize) -> usize {
    text[..cursor_byte]
        .char_indices()
        .rev()
        .find(|(_, ch)| ch.is_whitespace())
        .map_or(0, |(idx, ch)| idx + ch.len_utf8())
}

/// Completes the word before the cursor (`cursor_byte`, a byte index on a
/// character boundary): a command name when the whole text before the
/// cursor is `/word`, a workspace path when the word starts with `@`.
/// `files` are workspace-relative paths with `/` separators. Returns
/// `None` when Tab has nothing to complete there.
pub fn complete(text: &str, cursor_byte: usize, files: &[String]) -> Option<Completion> {
    let cursor_byte = cursor_byte.min(text.len());
    if !text.is_char_boundary(cursor_byte) {
        return None;
    }
    let start = word_start(text, cursor_byte);
    let word = &text[start..cursor_byte];
    if start == 0 && word.starts_with('/') && !word[1..].contains('/') {
        return Some(complete_command(word));
    }
    let typed = word.strip_prefix('@')?;
    Some(Completion {
        replace: start..cursor_byte,
        ..complete_path(typed, files)
    })
}

fn complete_command(word: &str) -> Completion {
    let typed = &word[1..];
    let names: Vec<String> = COMMANDS
        .iter()
        .map(|(name, _, _)| *name)
        .filter(|name| name.starts_with(typed))
        .map(|name| format!("/{name}"))
        .collect();
    let replace = 0..word.len();
    match names.as_slice() {
        [] => Completion {
            replace,
            with: word.to_owned(),
            hint: Some(format!("no command starts with {word}; /help lists them")),
        },
        [one] => Completion {
            replace,
            with: format!("{one} "),
            hint: None,
        },
        many => Completion {
            replace,
            with: common_prefix(many.iter().map(String::as_str)),
            hint: Some(hint_of(many)),
        },
    }
}

/// Returns whether a typed mention stays inside the workspace lexically:
/// relative, without `..`.
pub fn is_confined(typed: &str) -> bool {
    !typed.starts_with('/')
        && !typed.starts_with('~')
        && !typed.contains('\\')
        && !typed.split('/').any(|part| part == "..")
}

fn complete_path(typed: &str, files: &[String]) -> Completion {
    let unchanged = |hint: String| Completion {
        replace: 0..0,
        with: format!("@{typed}"),
        hint: Some(hint),
    };
    if !is_confined(typed) {
        return unchanged(
            "@ mentions name files inside the workspace (no .., no absolute paths)".into(),
        );
    }
    let typed_path = typed.strip_prefix("./").unwrap_or(typed);
    // The next path segment of every file under the typed prefix: a
    // directory (with its `/`) or the file itself.
    let candidates: BTreeSet<&str> = files
        .iter()
        .filter_map(|file| {
            let rest = file.strip_prefix(typed_path)?;
            Some(match rest.find('/') {
                Some(idx) => &file[..typed_path.len() + idx + 1],
                None => file.as_str(),
            })
        })
        .collect();
    let candidates: Vec<String> = candidates.into_iter().map(str::to_owned).collect();
    match candidates.as_slice() {
        [] => unchanged(format!("no file in the workspace starts with {typed_path}")),
        [one] => Completion {
            replace: 0..0,
            with: if one.ends_with('/') {
                format!("@{one}")
            } else {
                format!("@{one} ")
            },
            hint: None,
        },
        many => Completion {
            replace: 0..0,
            with: format!("@{}", common_prefix(many.iter().map(String::as_str))),
            hint: Some(hint_of(many)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, files: &[&str], expected: Option<(&str, Option<&str>)>) {
        let files: Vec<String> = files.iter().map(|file| (*file).to_owned()).collect();
        let got = complete(text, text.len(), &files).map(|completion| {
            let mut out = text.to_owned();
            out.replace_range(completion.replace.clone(), &completion.with);
            (out, completion.hint)
        });
        let expected = expected.map(|(text, hint)| (text.to_owned(), hint.map(str::to_owned)));
        assert_eq!(got, expected, "{text:?}");
    }

    #[test]
    fn commands_complete_to_one_name_or_the_common_prefix() {
        check("/com", &[], Some(("/compact ", None)));
        check("/b", &[], Some(("/budget ", None)));
        check(
            "/c",
            &[],
            Some(("/c", Some("/compact  /capsule  /checkpoint  /clear"))),
        );
        check("/ca", &[], Some(("/capsule ", None)));
        check(
            "/zz",
            &[],
            Some(("/zz", Some("no command starts with /zz; /help lists them"))),
        );
        // Only the first word of the line is a command name.
        check("/compact --sa", &[], None);
        check("plain text", &[], None);
        // A path is not a command.
        check("/usr/bin", &[], None);
    }

    #[test]
    fn mentions_complete_paths_segment_by_segment() {
        let files = ["src/main.rs", "src/map.rs", "src/tui/mod.rs", "README.md"];
        check(
            "look at @src/ma",
            &files,
            Some(("look at @src/ma", Some("src/main.rs  src/map.rs"))),
        );
        check(
            "look at @src/mai",
            &files,
            Some(("look at @src/main.rs ", None)),
        );
        check("@src/t", &files, Some(("@src/tui/", None)));
        check("@R", &files, Some(("@README.md ", None)));
        check("@", &files, Some(("@", Some("README.md  src/"))));
        check(
            "@x",
            &files,
            Some(("@x", Some("no file in the workspace starts with x"))),
        );
        check("@./src/mai", &files, Some(("@src/main.rs ", None)));
    }

    #[test]
    fn mentions_outside_the_workspace_are_refused() {
        for typed in ["@../etc", "@/etc/pa", "@src/../../x", "@~/.ssh"] {
            check(
                typed,
                &["src/main.rs"],
                Some((
                    typed,
                    Some("@ mentions name files inside the workspace (no .., no absolute paths)"),
                )),
            );
        }
    }

    #[test]
    fn common_prefix_respects_characters() {
        assert_eq!(common_prefix(["héllo", "hémisphère"]), "hé");
        assert_eq!(common_prefix(["abc"]), "abc");
        assert_eq!(common_prefix(["abc", "xyz"]), "");
    }
}
