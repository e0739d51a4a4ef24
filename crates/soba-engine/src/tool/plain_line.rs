//! What a session's "always" grant for `bash` may cover: a shell line made
//! only of plain commands, read the way bash would read it.
//!
//! A grant names the first words of a command (`git status`). It covers a
//! later line only when every command of that line is plain: words of
//! ordinary characters, single-quoted text, double-quoted text with
//! nothing bash would expand, joined by `;`, `&&`, `||`, `|`, `&` or a
//! newline, with no redirection but to `/dev/null` or another descriptor
//! (`2>&1`). Anything else — an expansion (`$…`), a backslash escape, a
//! backtick, a subshell or group, a redirection into a file, a here
//! document, a control character — makes the line not plain, and the
//! user is asked. One reader decides both what "always" grants and what a
//! grant covers, so the two cannot drift apart.

use std::fmt;

/// Why a shell line is not plain: the prompt names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotPlain {
    /// `$` starts a parameter, command or arithmetic expansion.
    Expansion,
    /// `\` escapes the next character, which may be an operator.
    Escape,
    /// `` ` `` runs a command.
    Backtick,
    /// `(`, `)`, `{` or `}`: a subshell, group or substitution.
    Group,
    /// `>`, `>>` or `<` with a file, or a here document.
    Redirection,
    /// A quote that never closes.
    UnclosedQuote,
    /// A control character bash may read differently from the prompt.
    ControlCharacter,
    /// A command's first words are empty or hold blanks (`sed '' f`):
    /// no grant can name them.
    BlankWord,
    /// `#` starts a comment, which hides the rest of its line from a
    /// grant but not its quotes from the reader.
    Comment,
}

impl fmt::Display for NotPlain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NotPlain::Expansion => "a `$` expansion",
            NotPlain::Escape => "a backslash escape",
            NotPlain::Backtick => "a backtick command",
            NotPlain::Group => "a subshell or group",
            NotPlain::Redirection => "a redirection to a file",
            NotPlain::UnclosedQuote => "an unclosed quote",
            NotPlain::ControlCharacter => "a control character",
            NotPlain::Comment => "a `#` comment",
            NotPlain::BlankWord => "an empty or quoted-blank first word",
        })
    }
}

/// Returns the commands of `line`, each as its words with the harmless
/// redirections dropped, or why the line is not plain.
pub(crate) fn commands(line: &str) -> Result<Vec<Vec<String>>, NotPlain> {
    let mut reader = Reader {
        chars: line.chars().collect(),
        at: 0,
        commands: Vec::new(),
        words: Vec::new(),
        word: None,
        quoted: false,
    };
    reader.read()?;
    Ok(reader.commands)
}

struct Reader {
    chars: Vec<char>,
    at: usize,
    commands: Vec<Vec<String>>,
    words: Vec<String>,
    /// The word being read; `Some("")` after an empty quote (`''`).
    word: Option<String>,
    /// Whether part of the word was quoted (`'2'>x` is a word, then a
    /// redirection of standard output).
    quoted: bool,
}

impl Reader {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn read(&mut self) -> Result<(), NotPlain> {
        while let Some(ch) = self.peek() {
            self.at += 1;
            match ch {
                ' ' | '\t' => self.end_word(),
                '\n' | ';' => self.end_command(),
                '|' => {
                    // `||`, and `|&` (a pipe that carries stderr too).
                    if matches!(self.peek(), Some('|' | '&')) {
                        self.at += 1;
                    }
                    self.end_command();
                }
                '&' if self.peek() == Some('>') => {
                    self.at += 1;
                    self.end_word();
                    self.redirection('>')?;
                }
                '&' => {
                    if self.peek() == Some('&') {
                        self.at += 1;
                    }
                    self.end_command();
                }
                // Bash reads `#` at the start of a word as a comment.
                '#' if self.word.is_none() => return Err(NotPlain::Comment),
                '>' | '<' => {
                    // An unquoted word of digits right before is the
                    // descriptor.
                    if !self.quoted
                        && self.word.as_deref().is_some_and(|word| {
                            !word.is_empty() && word.bytes().all(|b| b.is_ascii_digit())
                        })
                    {
                        self.word = None;
                    }
                    self.end_word();
                    self.redirection(ch)?;
                }
                '\'' => {
                    let text = self.quoted('\'')?;
                    self.quoted = true;
                    self.word.get_or_insert_default().push_str(&text);
                }
                '"' => {
                    let text = self.quoted('"')?;
                    if let Some(bad) = text.chars().find(|ch| matches!(ch, '$' | '`' | '\\')) {
                        return Err(special(bad));
                    }
                    self.quoted = true;
                    self.word.get_or_insert_default().push_str(&text);
                }
                ch if is_special(ch) => return Err(special(ch)),
                ch => self.word.get_or_insert_default().push(ch),
            }
        }
        self.end_command();
        Ok(())
    }

    /// Reads the rest of a redirection whose operator began with `first`
    /// (`>` also stands for `&>`): only `/dev/null` and descriptor
    /// duplications (`>&2`, `2>&1`, `<&-`) are harmless.
    fn redirection(&mut self, first: char) -> Result<(), NotPlain> {
        let duplicate = match self.peek() {
            Some('&') => {
                self.at += 1;
                true
            }
            // `>>` appends and `>|` clobbers: files either way.
            Some('>' | '|') if first == '>' => {
                self.at += 1;
                false
            }
            // `<<` (here documents) and `<>` read and write.
            Some('<' | '>') => return Err(NotPlain::Redirection),
            _ => false,
        };
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.at += 1;
        }
        let start = self.at;
        while self
            .peek()
            .is_some_and(|ch| !is_special(ch) && !" \t\n;|&<>'\"".contains(ch))
        {
            self.at += 1;
        }
        let target: String = self.chars[start..self.at].iter().collect();
        // The target must be a whole word: a quote right after it would
        // continue it (`>&2'/../x'` writes to a file).
        if matches!(self.peek(), Some('\'' | '"')) {
            return Err(NotPlain::Redirection);
        }
        let harmless = if duplicate {
            !target.is_empty() && (target == "-" || target.bytes().all(|b| b.is_ascii_digit()))
        } else {
            target == "/dev/null"
        };
        if harmless {
            Ok(())
        } else {
            Err(NotPlain::Redirection)
        }
    }

    /// Reads quoted text up to the closing `quote`.
    fn quoted(&mut self, quote: char) -> Result<String, NotPlain> {
        let start = self.at;
        while let Some(ch) = self.peek() {
            self.at += 1;
            if ch == quote {
                return Ok(self.chars[start..self.at - 1].iter().collect());
            }
        }
        Err(NotPlain::UnclosedQuote)
    }

    fn end_word(&mut self) {
        self.quoted = false;
        if let Some(word) = self.word.take() {
            self.words.push(word);
        }
    }

    fn end_command(&mut self) {
        self.end_word();
        if !self.words.is_empty() {
            self.commands.push(std::mem::take(&mut self.words));
        }
    }
}

/// Returns whether bash gives `ch` a meaning a grant cannot follow.
fn is_special(ch: char) -> bool {
    matches!(ch, '$' | '`' | '\\' | '(' | ')' | '{' | '}')
        || (ch.is_control() && !matches!(ch, '\t' | '\n'))
}

fn special(ch: char) -> NotPlain {
    match ch {
        '$' => NotPlain::Expansion,
        '`' => NotPlain::Backtick,
        '\\' => NotPlain::Escape,
        '(' | ')' | '{' | '}' => NotPlain::Group,
        _ => NotPlain::ControlCharacter,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<Vec<String>> {
        commands(line).unwrap_or_else(|why| panic!("{line:?} is not plain: {why}"))
    }

    #[test]
    fn plain_lines_split_into_commands_without_harmless_redirections() {
        assert_eq!(words("cargo test -p x"), [["cargo", "test", "-p", "x"]]);
        assert_eq!(
            words("cargo test 2>&1 | tail -5"),
            [vec!["cargo", "test"], vec!["tail", "-5"]]
        );
        assert_eq!(
            words("make &>/dev/null & sleep 1"),
            [vec!["make"], vec!["sleep", "1"]]
        );
        assert_eq!(
            words("cd a && make; make install\nls || true |& cat"),
            [
                vec!["cd", "a"],
                vec!["make"],
                vec!["make", "install"],
                vec!["ls"],
                vec!["true"],
                vec!["cat"]
            ]
        );
        assert_eq!(
            words("git commit -m 'fix: a; b' 2> /dev/null"),
            [["git", "commit", "-m", "fix: a; b"]]
        );
        assert_eq!(words("echo \"a b\" '' x<&-"), [["echo", "a b", "", "x"]]);
        assert_eq!(
            words("grep -n fn src/*.rs"),
            [["grep", "-n", "fn", "src/*.rs"]]
        );
        assert!(words("  ;; ").is_empty());
        // `#` inside a word is a character; a quoted `2` is a word (the
        // program `2`), not the descriptor of the redirection after it.
        assert_eq!(words("echo a#b"), [["echo", "a#b"]]);
        assert_eq!(words("'2'>/dev/null git status"), [["2", "git", "status"]]);
    }

    #[test]
    fn what_bash_would_expand_or_write_is_not_plain() {
        let cases = [
            // The attacks of session 22 (WALK/attack notes): an escaped
            // `<` made `&` look like a redirection; an arithmetic
            // expansion ran a command with no `$(` in sight.
            ("git status \\<& touch /tmp/pwn", NotPlain::Escape),
            ("git status \\>&touch /tmp/pwn", NotPlain::Escape),
            (
                "git status ${x:=a[\\$\\(touch p\\)]} ${PATH:x}",
                NotPlain::Expansion,
            ),
            ("git status --short > /tmp/clobbered", NotPlain::Redirection),
            ("git status >> ~/.bashrc", NotPlain::Redirection),
            ("git status >| f", NotPlain::Redirection),
            ("cat <<EOF", NotPlain::Redirection),
            ("cat <> f", NotPlain::Redirection),
            ("cat < secret", NotPlain::Redirection),
            ("make &> log", NotPlain::Redirection),
            ("echo 2>&1x", NotPlain::Redirection),
            ("echo $'\\n rm x'", NotPlain::Expansion),
            ("echo \"$HOME\"", NotPlain::Expansion),
            ("echo \"`id`\"", NotPlain::Backtick),
            ("echo `id`", NotPlain::Backtick),
            ("cargo test $(rm x)", NotPlain::Expansion),
            ("diff <(ls a) b", NotPlain::Redirection),
            ("cat >(tee x)", NotPlain::Redirection),
            ("(rm x)", NotPlain::Group),
            ("{ rm x; }", NotPlain::Group),
            ("echo 'open", NotPlain::UnclosedQuote),
            ("git status\r rm x", NotPlain::ControlCharacter),
            ("git status\u{1b}[2K", NotPlain::ControlCharacter),
            // The attacks of session 23: a comment hid a quote's end from
            // bash but not from the reader; a quote right after a
            // harmless-looking target made it a file.
            ("git status #'\ntouch /tmp/pwn\n#'", NotPlain::Comment),
            ("git status;#\"\ntouch p\n#\"", NotPlain::Comment),
            ("git status >&1'x'", NotPlain::Redirection),
            ("git status >&2'/../../pwn'", NotPlain::Redirection),
            ("git status &>/dev/null'x'", NotPlain::Redirection),
        ];
        for (line, why) in cases {
            assert_eq!(commands(line), Err(why), "{line:?}");
        }
    }
}
