//! Finding where a key is in the source text.
//!
//! Errors found while parsing come with a byte span (turned into a line
//! here) and a key path; checks made after parsing come with a key path
//! only (`cluster[1].shards`), whose line is found here, so every
//! configuration error reads `file:line: key: ...`.

use std::ops::Range;

/// 1-based line number of byte `offset` in `text`.
pub fn line_at(text: &str, offset: usize) -> usize {
    let offset = offset.min(text.len());
    text.as_bytes()[..offset]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// One step of a key path.
enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

fn segments(path: &str) -> Vec<Segment<'_>> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let (name, rest) = part.split_once('[').unwrap_or((part, ""));
        out.push(Segment::Key(name));
        for index in rest.split('[') {
            if let Ok(i) = index.trim_end_matches(']').parse() {
                out.push(Segment::Index(i));
            }
        }
    }
    out
}

/// 1-based line of the key at `path` (`cluster[1].shards`), or of the
/// nearest enclosing table that exists when the key itself is absent.
pub fn line_of_key(text: &str, path: &str) -> usize {
    let Ok(doc) = toml_edit::Document::parse(text) else {
        return 1;
    };
    let mut best: Option<Range<usize>> = None;
    let mut item: Option<&toml_edit::Item> = None;
    let mut table: Option<&toml_edit::Table> = Some(doc.as_table());
    for segment in segments(path) {
        match segment {
            Segment::Key(name) => {
                let found = match (table, item) {
                    (Some(t), _) => t.get_key_value(name),
                    (None, Some(i)) => i.as_table_like().and_then(|t| t.get_key_value(name)),
                    _ => None,
                };
                let Some((key, value)) = found else { break };
                best = key.span().or(value.span()).or(best);
                item = Some(value);
                table = value.as_table();
            }
            Segment::Index(i) => {
                let Some(current) = item else { break };
                if let Some(tables) = current.as_array_of_tables() {
                    let Some(t) = tables.get(i) else { break };
                    best = t.span().or(best);
                    table = Some(t);
                    item = None;
                } else if let Some(array) = current.as_array() {
                    let Some(v) = array.get(i) else { break };
                    best = v.span().or(best);
                    table = None;
                    item = None;
                } else {
                    break;
                }
            }
        }
    }
    best.map_or(1, |span| line_at(text, span.start))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "[instance]\nname = \"t\"\n\n[[cluster]]\nname = \"a\"\nshards = \"0-3\"\n\n[[cluster]]\nname = \"b\"\nminions = [\"x\", \"y\"]\nshards = \"4-7\"\n";

    #[test]
    fn finds_keys_inside_arrays_of_tables() {
        assert_eq!(line_of_key(TEXT, "instance.name"), 2);
        assert_eq!(line_of_key(TEXT, "cluster[0].shards"), 6);
        assert_eq!(line_of_key(TEXT, "cluster[1].shards"), 11);
        assert_eq!(line_of_key(TEXT, "cluster[1].minions[1]"), 10);
    }

    #[test]
    fn falls_back_to_the_enclosing_table() {
        assert_eq!(line_of_key(TEXT, "cluster[1].master"), 8);
    }
}
