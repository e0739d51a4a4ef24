//! The one mechanism that orders tree-shaped transcripts (pi v3
//! `id`/`parentId`, Claude Code `uuid`/`parentUuid`): the parent chain from
//! the last entry, bridged across lines that did not parse so a damaged
//! line never cuts off what came before it.
//!
//! A line that is not valid JSON still usually shows its own id and parent
//! in its raw text; [`raw_node`] reads them from the top level of the text
//! (keys nested in the message are ignored). When a parent cannot be found
//! even so, and the file is linear (every parent that resolves is the entry
//! just before it in the file), the chain continues in file order.

use std::collections::{HashMap, HashSet};

use super::builder::Diagnostics;
use super::scan::{Top, TopLevel};

/// The parent a node names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Parent {
    /// `null` or absent: a root.
    Root,
    /// This id.
    Id(String),
    /// Unreadable (a damaged line, or a value of the wrong type).
    Unknown,
}

/// One line of a tree-shaped transcript.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    /// The caller's position of the line (0-based file line).
    pub line_idx: usize,
    /// The line's own id, when readable.
    pub id: Option<String>,
    /// The parent it names.
    pub parent: Parent,
    /// Whether the line did not parse (its id and parent were read from
    /// the raw text).
    pub damaged: bool,
}

/// The key names of a format's tree.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TreeKeys {
    /// The own-id key (`id`, `uuid`).
    pub id: &'static str,
    /// The parent key (`parentId`, `parentUuid`).
    pub parent: &'static str,
    /// A parent key used when `parent` is null (Claude Code's
    /// `logicalParentUuid` across a compaction).
    pub logical_parent: Option<&'static str>,
}

/// Returns the node of a line that parsed, from its scanned top-level
/// values (which include the `keys`).
pub(crate) fn parsed_node(line_idx: usize, top: &TopLevel, keys: TreeKeys) -> Node {
    let id = top.str(keys.id).map(str::to_owned);
    // A missing key is damage (every entry of a tree names its parent,
    // `null` at the root), not a root.
    let parent_of = |key: &str| match top.get(key) {
        Some(Top::Null) => Parent::Root,
        None => Parent::Unknown,
        Some(Top::Str(id)) => Parent::Id(id.clone()),
        Some(_) => Parent::Unknown,
    };
    let mut parent = parent_of(keys.parent);
    if parent == Parent::Root
        && let Some(logical) = keys.logical_parent
        && top.str(logical).is_some()
    {
        parent = parent_of(logical);
    }
    Node {
        line_idx,
        id,
        parent,
        damaged: false,
    }
}

/// Returns the node of a line that did not parse, its id and parent read
/// from the top level of its raw text; `None` when no id can be read: no
/// entry can name it as parent and nothing of it is converted, so it has
/// no place in the tree (and a file of millions of damaged lines costs no
/// memory per line).
pub(crate) fn raw_node(line_idx: usize, raw: &str, keys: TreeKeys) -> Option<Node> {
    let mut wanted = vec![keys.id, keys.parent];
    wanted.extend(keys.logical_parent);
    let found = top_level_values(raw, &wanted);
    let RawValue::Str(id) = &found[0] else {
        return None;
    };
    let parent_of = |value: &RawValue| match value {
        RawValue::Null => Parent::Root,
        RawValue::Str(id) => Parent::Id(id.clone()),
        RawValue::Missing | RawValue::True | RawValue::Other => Parent::Unknown,
    };
    let mut parent = parent_of(&found[1]);
    if parent == Parent::Root && found.len() > 2 && matches!(found[2], RawValue::Str(_)) {
        parent = parent_of(&found[2]);
    }
    Some(Node {
        line_idx,
        id: Some(id.clone()),
        parent,
        damaged: true,
    })
}

/// Returns whether the raw text of a damaged line sets the top-level
/// `key` to `true`.
pub(crate) fn raw_flag(raw: &str, key: &str) -> bool {
    top_level_values(raw, &[key])[0] == RawValue::True
}

/// A top-level value read from raw text.
#[derive(Debug, Clone, PartialEq, Eq)]
enum RawValue {
    Missing,
    Null,
    Str(String),
    True,
    Other,
}

/// Reads the first top-level occurrence of each key of `keys` from the raw
/// text of a JSON object that may be truncated or damaged: strings and
/// nesting are tracked, so keys inside nested objects are not taken.
fn top_level_values(raw: &str, keys: &[&str]) -> Vec<RawValue> {
    let bytes = raw.as_bytes();
    let mut found = vec![RawValue::Missing; keys.len()];
    let mut depth = 0usize;
    let mut pos = 0usize;
    while pos < bytes.len() {
        match bytes[pos] {
            b'{' | b'[' => {
                depth += 1;
                pos += 1;
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                pos += 1;
            }
            b'"' => {
                let Some((text, end)) = string_at(raw, pos) else {
                    break;
                };
                pos = end;
                if depth != 1 {
                    continue;
                }
                let after_key = skip_spaces(bytes, pos);
                if bytes.get(after_key) != Some(&b':') {
                    continue;
                }
                let value_at = skip_spaces(bytes, after_key + 1);
                let Some(slot) = keys
                    .iter()
                    .position(|key| *key == text)
                    .filter(|&slot| found[slot] == RawValue::Missing)
                else {
                    continue;
                };
                found[slot] = match bytes.get(value_at) {
                    Some(b'"') => match string_at(raw, value_at) {
                        Some((value, end)) => {
                            pos = end;
                            RawValue::Str(value)
                        }
                        None => RawValue::Other,
                    },
                    Some(b'n') if raw[value_at..].starts_with("null") => RawValue::Null,
                    Some(b't') if raw[value_at..].starts_with("true") => RawValue::True,
                    _ => RawValue::Other,
                };
            }
            _ => pos += 1,
        }
    }
    found
}

/// Reads the JSON string starting at `start` (a `"`); returns its decoded
/// text and the position after it, `None` when it does not end.
fn string_at(raw: &str, start: usize) -> Option<(String, usize)> {
    let bytes = raw.as_bytes();
    let mut pos = start + 1;
    while pos < bytes.len() {
        match bytes[pos] {
            b'\\' => pos += 2,
            b'"' => {
                let literal = &raw[start..=pos];
                let text = serde_json::from_str::<String>(literal)
                    .unwrap_or_else(|_| literal[1..literal.len() - 1].to_owned());
                return Some((text, pos + 1));
            }
            _ => pos += 1,
        }
    }
    None
}

fn skip_spaces(bytes: &[u8], mut pos: usize) -> usize {
    while bytes.get(pos).is_some_and(u8::is_ascii_whitespace) {
        pos += 1;
    }
    pos
}

/// Returns the positions (into `nodes`, in file order) of the branch
/// ending at the last node with an id: its parent chain, bridged across
/// damaged lines by the ids read from their raw text, else (in a linear
/// file) by file order. Every node when no node has an id. `leaf`
/// overrides the last node with an id; `what` names the parent key in
/// diagnostics.
pub(crate) fn branch(
    nodes: &[Node],
    leaf: Option<usize>,
    what: &str,
    diagnostics: &mut Diagnostics,
) -> Vec<usize> {
    let Some(leaf) = leaf
        .filter(|&leaf| leaf < nodes.len())
        .or_else(|| default_leaf(nodes, what, diagnostics))
    else {
        return (0..nodes.len()).collect();
    };
    let by_id: HashMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .filter_map(|(pos, node)| node.id.as_deref().map(|id| (id, pos)))
        .collect();
    let resolve = |node: &Node| match &node.parent {
        Parent::Id(id) => by_id.get(id.as_str()).copied(),
        _ => None,
    };
    // Linear: every parent that resolves is the node just before it, and
    // only the first node is a root.
    let linear = nodes
        .iter()
        .enumerate()
        .all(|(pos, node)| match (&node.parent, resolve(node)) {
            (_, Some(parent)) => parent + 1 == pos,
            (Parent::Root, None) => pos == 0 || node.damaged,
            _ => true,
        });
    let mut on_path = HashSet::from([leaf]);
    let mut current = leaf;
    loop {
        let node = &nodes[current];
        let line_no = node.line_idx + 1;
        let next = match (&node.parent, resolve(node)) {
            (Parent::Root, _) => break,
            (_, Some(parent)) => {
                if node.damaged {
                    diagnostics.push(format!(
                        "line {line_no}: its id and {what} were read from the damaged text; the chain goes on through it"
                    ));
                }
                parent
            }
            (parent, None) => {
                let named = match parent {
                    Parent::Id(id) => format!("{what} {id:?} not found"),
                    _ => format!("{what} unreadable"),
                };
                if linear && current > 0 {
                    diagnostics.push(format!(
                        "line {line_no}: {named}; the file is linear, so the chain goes on in file order"
                    ));
                    current - 1
                } else {
                    diagnostics.push(format!("line {line_no}: {named}; the branch starts there"));
                    break;
                }
            }
        };
        if !on_path.insert(next) {
            diagnostics.push(format!(
                "line {line_no}: {what} cycle; the branch stops there"
            ));
            break;
        }
        current = next;
    }
    let mut path: Vec<usize> = on_path.into_iter().collect();
    path.sort_unstable();
    // Entries are converted in file order; one written before its parent
    // is said, not silently moved.
    let before_parent: Vec<usize> = path
        .iter()
        .filter(|&&pos| resolve(&nodes[pos]).is_some_and(|parent| parent > pos))
        .map(|&pos| nodes[pos].line_idx + 1)
        .collect();
    if let Some(first) = before_parent.first() {
        diagnostics.push(format!(
            "line {first}: this entry comes before its parent in the file ({} such on the branch); entries are imported in file order, not reordered",
            before_parent.len()
        ));
    }
    path
}

/// How a node off the branch joins it ([`attached`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Join {
    /// It stays off (an abandoned branch).
    No,
    /// It joins; its own children are not looked at.
    Leaf,
    /// It joins, and its children are looked at in turn.
    Branch,
}

/// Returns the positions (into `nodes`, ascending) of the nodes off
/// `branch` that hang from it: a child of a branch node, or of a node
/// that joined with [`Join::Branch`], joins when `joins(child, parent)`
/// says so. Claude Code's parallel tool calls need it: each content block
/// and each tool result is a line of its own whose parent is the line
/// before it or its own call, so one response's calls and results are
/// sibling branches and the parent chain from the last line passes
/// through one of them only. Linear in the nodes.
pub(crate) fn attached(
    nodes: &[Node],
    branch: &[usize],
    joins: impl Fn(usize, usize) -> Join,
) -> Vec<usize> {
    let by_id: HashMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .filter_map(|(pos, node)| node.id.as_deref().map(|id| (id, pos)))
        .collect();
    // Children by parent position: first child, then each child's next
    // sibling (two vectors, no list per node).
    let mut first_child = vec![usize::MAX; nodes.len()];
    let mut next_sibling = vec![usize::MAX; nodes.len()];
    for (pos, node) in nodes.iter().enumerate().rev() {
        if let Parent::Id(id) = &node.parent
            && let Some(&parent) = by_id.get(id.as_str())
            && parent != pos
        {
            next_sibling[pos] = first_child[parent];
            first_child[parent] = pos;
        }
    }
    let mut in_tree = vec![false; nodes.len()];
    for &pos in branch {
        in_tree[pos] = true;
    }
    let mut stack: Vec<usize> = branch.to_vec();
    let mut out = Vec::new();
    while let Some(parent) = stack.pop() {
        let mut child = first_child[parent];
        while child != usize::MAX {
            if !in_tree[child] {
                match joins(child, parent) {
                    Join::No => {}
                    Join::Leaf => {
                        in_tree[child] = true;
                        out.push(child);
                    }
                    Join::Branch => {
                        in_tree[child] = true;
                        out.push(child);
                        stack.push(child);
                    }
                }
            }
            child = next_sibling[child];
        }
    }
    out.sort_unstable();
    out
}

/// The branch's last node by default: the last node with an id, except a
/// damaged one whose parent cannot be read (a line cut off as it was
/// written), which says nothing about where the branch runs; then the
/// node before it. `None` when no node has an id.
fn default_leaf(nodes: &[Node], what: &str, diagnostics: &mut Diagnostics) -> Option<usize> {
    let last = nodes.iter().rposition(|node| node.id.is_some())?;
    let unplaced = |node: &Node| node.damaged && node.parent == Parent::Unknown;
    if !unplaced(&nodes[last]) {
        return Some(last);
    }
    let Some(before) = nodes[..last]
        .iter()
        .rposition(|node| node.id.is_some() && !unplaced(node))
    else {
        return Some(last);
    };
    diagnostics.push(format!(
        "line {}: damaged and its {what} unreadable; the branch is followed from the entry on line {}",
        nodes[last].line_idx + 1,
        nodes[before].line_idx + 1
    ));
    Some(before)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PI: TreeKeys = TreeKeys {
        id: "id",
        parent: "parentId",
        logical_parent: None,
    };

    #[test]
    fn raw_text_gives_top_level_ids_only() {
        let node = raw_node(
            3,
            r#"{"type":"message","message":{"content":[{"id":"nested"}]},"id":"a\"b","parentId":"p","x":"#,
            PI,
        )
        .expect("an id");
        assert_eq!(node.id.as_deref(), Some("a\"b"));
        assert_eq!(node.parent, Parent::Id("p".into()));
        let cut = raw_node(0, r#"{"type":"message","id":"a","parentId":"p"#, PI).expect("an id");
        assert_eq!(
            (cut.id.as_deref(), cut.parent),
            (Some("a"), Parent::Unknown)
        );
        let null = raw_node(0, r#"{"id":"a", "parentId" : null,"#, PI).expect("an id");
        assert_eq!(null.parent, Parent::Root);
        assert!(raw_node(0, "garbage", PI).is_none());
        assert!(raw_node(0, r#"{"parentId":"p","#, PI).is_none());
    }

    fn node(line: usize, id: Option<&str>, parent: Parent, damaged: bool) -> Node {
        Node {
            line_idx: line,
            id: id.map(str::to_owned),
            parent,
            damaged,
        }
    }

    #[test]
    fn a_branch_cut_off_in_its_last_line_is_followed_from_the_line_before() {
        // a ← b ← c, then d on another branch from b, then a last line cut
        // off after its id: the branch is the one `d` ends, not nothing.
        let id = |parent: &str| Parent::Id(parent.to_owned());
        let nodes = [
            node(1, Some("a"), Parent::Root, false),
            node(2, Some("b"), id("a"), false),
            node(3, Some("c"), id("b"), false),
            node(4, Some("d"), id("b"), false),
            node(5, Some("e"), Parent::Unknown, true),
        ];
        let mut diagnostics = Diagnostics::default();
        assert_eq!(
            branch(&nodes, None, "parentId", &mut diagnostics),
            [0, 1, 3]
        );
        assert_eq!(
            diagnostics.into_parts().0,
            [
                "line 6: damaged and its parentId unreadable; the branch is followed from the entry on line 5"
            ]
        );
    }

    #[test]
    fn an_entry_before_its_parent_in_the_file_is_said() {
        let id = |parent: &str| Parent::Id(parent.to_owned());
        let nodes = [
            node(0, Some("b"), id("a"), false),
            node(1, Some("a"), Parent::Root, false),
            node(2, Some("c"), id("b"), false),
        ];
        let mut diagnostics = Diagnostics::default();
        assert_eq!(
            branch(&nodes, None, "parentId", &mut diagnostics),
            [0, 1, 2]
        );
        assert_eq!(
            diagnostics.into_parts().0,
            [
                "line 1: this entry comes before its parent in the file (1 such on the branch); entries are imported in file order, not reordered"
            ]
        );
    }

    #[test]
    fn a_linear_file_bridges_an_unreadable_line_by_file_order() {
        let nodes = [
            node(1, Some("a"), Parent::Root, false),
            node(2, Some("b"), Parent::Id("a".into()), false),
            node(3, None, Parent::Unknown, true),
            node(4, Some("d"), Parent::Id("c".into()), false),
        ];
        let mut diagnostics = crate::import::builder::Diagnostics::default();
        assert_eq!(
            branch(&nodes, None, "parentId", &mut diagnostics),
            [0, 1, 2, 3]
        );
        assert_eq!(
            *diagnostics,
            [
                "line 5: parentId \"c\" not found; the file is linear, so the chain goes on in file order",
                "line 4: parentId unreadable; the file is linear, so the chain goes on in file order"
            ]
        );
    }

    #[test]
    fn siblings_join_the_branch_as_the_caller_says() {
        // A response's calls a ← b ← c (b and c sibling lines of a's
        // response), results ra (of a), rb (of b), rc (of c); the chain from
        // the last line runs through ra only. A rewound prompt x hangs from
        // a too, and a line y under the joined result rb.
        let id = |parent: &str| Parent::Id(parent.to_owned());
        let nodes = [
            node(0, Some("u"), Parent::Root, false),
            node(1, Some("a"), id("u"), false),
            node(2, Some("b"), id("a"), false),
            node(3, Some("c"), id("b"), false),
            node(4, Some("rb"), id("b"), false),
            node(5, Some("rc"), id("c"), false),
            node(6, Some("y"), id("rb"), false),
            node(7, Some("x"), id("a"), false),
            node(8, Some("ra"), id("a"), false),
            node(9, Some("next"), id("ra"), false),
        ];
        let mut diagnostics = Diagnostics::default();
        let path = branch(&nodes, None, "parentUuid", &mut diagnostics);
        assert_eq!(path, [0, 1, 8, 9]);
        let kind = |pos: usize| nodes[pos].id.as_deref().unwrap_or_default().to_owned();
        let joined = attached(&nodes, &path, |child, parent| {
            match (kind(child).as_str(), kind(parent).as_str()) {
                ("b" | "c", _) => Join::Branch,
                ("rb" | "rc", "b" | "c") => Join::Leaf,
                _ => Join::No,
            }
        });
        assert_eq!(joined, [2, 3, 4, 5]);
    }

    #[test]
    fn a_branched_file_is_not_bridged_by_order() {
        let nodes = [
            node(1, Some("a"), Parent::Root, false),
            node(2, Some("b"), Parent::Id("a".into()), false),
            node(3, Some("c"), Parent::Id("a".into()), false),
            node(4, None, Parent::Unknown, true),
            node(5, Some("e"), Parent::Id("d".into()), false),
        ];
        let mut diagnostics = crate::import::builder::Diagnostics::default();
        assert_eq!(branch(&nodes, None, "parentId", &mut diagnostics), [4]);
        assert_eq!(
            *diagnostics,
            ["line 6: parentId \"d\" not found; the branch starts there"]
        );
    }
}
