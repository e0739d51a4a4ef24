//! Shell text as the fact extractor reads it: a script split into
//! commands, a command into words (quotes, redirections and prefixes
//! removed), and the paths a patch or a command names, relative to the
//! workspace.

/// Returns the targets of `apply_patch` headers (`*** Add File:`,
/// `*** Update File:`, `*** Delete File:`, `*** Move to:`), as written.
pub fn patch_paths(patch: &str) -> Vec<String> {
    const HEADERS: [&str; 4] = [
        "*** Add File:",
        "*** Update File:",
        "*** Delete File:",
        "*** Move to:",
    ];
    let mut paths = Vec::new();
    for line in patch.lines() {
        let line = line.trim();
        for header in HEADERS {
            if let Some(rest) = line.strip_prefix(header) {
                let path = rest.trim();
                if !path.is_empty() {
                    paths.push(path.to_owned());
                }
            }
        }
    }
    paths
}

/// Returns `path` relative to the workspace root `cwd`: the root prefix and
/// leading `./` stripped; other paths are kept as written.
pub fn workspace_relative(path: &str, cwd: Option<&str>) -> String {
    let path = path.trim();
    let mut rel = path;
    if let Some(root) = cwd
        .map(|c| c.trim_end_matches('/'))
        .filter(|c| !c.is_empty())
    {
        if path == root {
            return ".".to_owned();
        }
        if let Some(rest) = path
            .strip_prefix(root)
            .and_then(|rest| rest.strip_prefix('/'))
        {
            rel = rest;
        }
    }
    while let Some(rest) = rel.strip_prefix("./") {
        rel = rest;
    }
    if rel.is_empty() {
        path.to_owned()
    } else {
        rel.to_owned()
    }
}

/// Joins a relative path onto a working directory.
pub(super) fn join(dir: Option<&str>, path: &str) -> String {
    match dir {
        Some(dir) if !path.starts_with('/') && !path.starts_with('~') => {
            format!(
                "{}/{}",
                dir.trim_end_matches('/'),
                path.trim_start_matches("./")
            )
        }
        _ => path.to_owned(),
    }
}

pub(super) fn basename(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// Returns whether an argument looks like a file path rather than a glob,
/// a variable or a device.
pub(super) fn is_plain_path(word: &str) -> bool {
    !word.is_empty()
        && !word.starts_with('-')
        && !word.starts_with('$')
        && !word.contains(['*', '?', '{', '`'])
        && !word.starts_with("/dev/")
}

/// Splits a shell script into simple commands at newlines, `;`, `&&`, `||`,
/// `&` and `|`, outside quotes, dropping comments and here-document bodies.
pub fn split_commands(script: &str) -> Vec<String> {
    let chars: Vec<char> = script.chars().collect();
    let mut segments = Vec::new();
    let mut current = String::new();
    let mut heredocs: Vec<String> = Vec::new();
    let (mut in_single, mut in_double) = (false, false);
    let mut idx = 0;
    let flush = |current: &mut String, segments: &mut Vec<String>| {
        let trimmed = current.trim();
        if !trimmed.is_empty() {
            segments.push(trimmed.to_owned());
        }
        current.clear();
    };
    while idx < chars.len() {
        let ch = chars[idx];
        if in_single {
            current.push(ch);
            in_single = ch != '\'';
            idx += 1;
            continue;
        }
        if in_double {
            current.push(ch);
            if ch == '\\' && idx + 1 < chars.len() {
                current.push(chars[idx + 1]);
                idx += 2;
                continue;
            }
            in_double = ch != '"';
            idx += 1;
            continue;
        }
        match ch {
            '\'' => {
                in_single = true;
                current.push(ch);
            }
            '"' => {
                in_double = true;
                current.push(ch);
            }
            '\\' if idx + 1 < chars.len() => {
                if chars[idx + 1] != '\n' {
                    current.push(ch);
                    current.push(chars[idx + 1]);
                }
                idx += 1;
            }
            '#' if current.is_empty() || current.ends_with(char::is_whitespace) => {
                while idx + 1 < chars.len() && chars[idx + 1] != '\n' {
                    idx += 1;
                }
            }
            '\n' => {
                flush(&mut current, &mut segments);
                // Skip here-document bodies up to their terminators.
                for terminator in heredocs.drain(..) {
                    loop {
                        let start = idx + 1;
                        if start >= chars.len() {
                            idx = chars.len();
                            break;
                        }
                        let end = chars[start..]
                            .iter()
                            .position(|&c| c == '\n')
                            .map_or(chars.len(), |p| start + p);
                        let line: String = chars[start..end].iter().collect();
                        idx = end;
                        if line.trim() == terminator {
                            break;
                        }
                    }
                }
            }
            // `2>&1`, `<&3` and `&>` redirect; they do not separate.
            '&' if current.ends_with(['>', '<']) || chars.get(idx + 1) == Some(&'>') => {
                current.push(ch);
            }
            ';' | '&' | '|' => {
                flush(&mut current, &mut segments);
                if idx + 1 < chars.len() && chars[idx + 1] == ch {
                    idx += 1;
                }
            }
            '<' if idx + 1 < chars.len()
                && chars[idx + 1] == '<'
                && chars.get(idx + 2) != Some(&'<') =>
            {
                idx += 2;
                if chars.get(idx) == Some(&'-') {
                    idx += 1;
                }
                while chars.get(idx).is_some_and(|c| *c == ' ' || *c == '\t') {
                    idx += 1;
                }
                let mut word = String::new();
                match chars.get(idx) {
                    Some(&quote @ ('\'' | '"')) => {
                        idx += 1;
                        while let Some(&c) = chars.get(idx) {
                            if c == quote {
                                break;
                            }
                            word.push(c);
                            idx += 1;
                        }
                    }
                    _ => {
                        while let Some(&c) = chars.get(idx) {
                            if c.is_whitespace() || ";|&<>()".contains(c) {
                                idx -= 1;
                                break;
                            }
                            word.push(c);
                            idx += 1;
                        }
                    }
                }
                if !word.is_empty() {
                    heredocs.push(word);
                }
            }
            _ => current.push(ch),
        }
        idx += 1;
    }
    flush(&mut current, &mut segments);
    segments
}

/// Splits one simple command into words, removing quotes.
pub fn shell_words(command: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut has_word = false;
    let mut chars = command.chars().peekable();
    while let Some(ch) = chars.next() {
        match ch {
            '\'' => {
                has_word = true;
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    current.push(c);
                }
            }
            '"' => {
                has_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => {
                            if let Some(&next) = chars.peek()
                                && matches!(next, '"' | '\\' | '$' | '`')
                            {
                                current.push(next);
                                chars.next();
                                continue;
                            }
                            current.push(c);
                        }
                        _ => current.push(c),
                    }
                }
            }
            '\\' => {
                has_word = true;
                if let Some(next) = chars.next() {
                    current.push(next);
                }
            }
            c if c.is_whitespace() => {
                if has_word {
                    words.push(std::mem::take(&mut current));
                    has_word = false;
                }
            }
            c => {
                has_word = true;
                current.push(c);
            }
        }
    }
    if has_word {
        words.push(current);
    }
    words
}

/// Removes redirections (`> f`, `2>/dev/null`, `< in`) from a word list.
pub(super) fn strip_redirections(words: Vec<String>) -> Vec<String> {
    let mut out = Vec::with_capacity(words.len());
    let mut skip_next = false;
    for word in words {
        if skip_next {
            skip_next = false;
            continue;
        }
        let bare = word.trim_start_matches(|c: char| c.is_ascii_digit() || c == '&');
        if bare.starts_with('>') || bare.starts_with('<') {
            let operator_only = bare.trim_start_matches(['>', '<', '&', '|']).is_empty();
            skip_next = operator_only;
            continue;
        }
        out.push(word);
    }
    out
}

/// Drops leading environment assignments and wrappers (`sudo`, `time`,
/// `env`, `timeout 60`, `nohup`, `command`, `exec`).
pub(super) fn strip_prefixes(words: &[String]) -> &[String] {
    let mut rest = words;
    loop {
        match rest.first().map(String::as_str) {
            Some(word) if is_assignment(word) => rest = &rest[1..],
            Some("sudo" | "time" | "env" | "nohup" | "command" | "exec" | "nice") => {
                rest = &rest[1..]
            }
            Some("timeout") => {
                rest = &rest[1..];
                while rest.first().is_some_and(|w| w.starts_with('-')) {
                    rest = &rest[1..];
                }
                if !rest.is_empty() {
                    rest = &rest[1..];
                }
            }
            _ => return rest,
        }
    }
}

pub(super) fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        }
        None => false,
    }
}
