//! `tsvector` in its one canonical form: PostgreSQL's own text, which is
//! what `tsvectorin` makes of any spelling and `tsvectorout` prints. The
//! lexemes sorted by their bytes and each kept once, every one quoted
//! (`'` and `\` doubled inside), its positions ascending and each kept
//! once with the heaviest weight written for it, a weight other than `D`
//! after its position: `'a':1A,3 'fat' 'rat':2B`.
//!
//! Input is read as `tsvectorin` reads it: words separated by spaces,
//! quoted or not, `\` escaping the next character, positions after `:`
//! separated by `,`, each with an optional weight letter (`*` is `A`).
//! Its limits hold too: a position is clamped to 16383 and 0 is refused,
//! a lexeme keeps at most 256 positions (none after 16383), a lexeme of
//! 2047 bytes or more and a value of more than a megabyte are refused.
//!
//! One thing PostgreSQL decides by the database's locale, not by the
//! text: whether a character outside ASCII that Unicode calls a space
//! (a no-break space, an ideographic space) separates two words. Such a
//! character outside quotes is refused, naming it, rather than read one
//! way here and the other way there; quoted, it is part of its lexeme.

/// `MAXSTRLEN`: a lexeme must be shorter than this many bytes.
const MAX_LEXEME: usize = (1 << 11) - 1;
/// `MAXSTRPOS`: the most bytes of lexemes and positions a value holds.
const MAX_BYTES: usize = (1 << 20) - 1;
/// `MAXENTRYPOS`: positions are below it.
const MAX_POSITION: u16 = 1 << 14;
/// `MAXNUMPOS`: the most positions a lexeme keeps.
const MAX_POSITIONS: usize = 256;

/// A lexeme's position and weight (`A` 3, `B` 2, `C` 1, `D` 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Position {
    at: u16,
    weight: u8,
}

/// One word of the input, as the parser returns it.
struct Word {
    lexeme: Vec<u8>,
    positions: Vec<Position>,
}

/// The canonical text of the `tsvector` written `text`, or why
/// PostgreSQL would refuse it.
pub fn canonical_tsvector(text: &str) -> Result<String, String> {
    if text.contains('\0') {
        return Err("a tsvector cannot contain the NUL character (\\u0000)".into());
    }
    let words = parse(text)?;
    let mut raw = 0usize;
    for word in &words {
        if word.lexeme.len() >= MAX_LEXEME {
            return Err(format!(
                "word is too long ({} bytes, max {} bytes)",
                word.lexeme.len(),
                MAX_LEXEME - 1
            ));
        }
        if raw > MAX_BYTES {
            return Err(format!(
                "string is too long for tsvector ({raw} bytes, max {MAX_BYTES} bytes)"
            ));
        }
        raw += word.lexeme.len();
    }
    let entries = unique(words)?;
    // The bytes the stored value needs, as `uniqueentry` counts them:
    // each lexeme, then (two-byte aligned) a count and its positions.
    let mut size = 0usize;
    for (lexeme, positions) in &entries {
        size += lexeme.len();
        if !positions.is_empty() {
            size += size % 2;
            size += 2 * positions.len() + 2;
        }
    }
    if size > MAX_BYTES {
        return Err(format!(
            "string is too long for tsvector ({size} bytes, max {MAX_BYTES} bytes)"
        ));
    }
    Ok(print(&entries))
}

/// Lexemes and their positions.
type Entries = Vec<(Vec<u8>, Vec<Position>)>;

/// The lexemes sorted by their bytes, each once with every position
/// written for it (`uniqueentry`), the positions through [`positions`].
fn unique(mut words: Vec<Word>) -> Result<Entries, String> {
    // Stable, as PostgreSQL's order of equal lexemes does not matter:
    // their positions are merged and sorted.
    words.sort_by(|a, b| a.lexeme.cmp(&b.lexeme));
    let mut entries: Entries = Vec::with_capacity(words.len());
    for word in words {
        match entries.last_mut() {
            Some((lexeme, positions)) if *lexeme == word.lexeme => positions.extend(word.positions),
            _ => entries.push((word.lexeme, word.positions)),
        }
    }
    for (_, list) in &mut entries {
        *list = positions(std::mem::take(list))?;
    }
    Ok(entries)
}

/// Positions ascending, each once with its heaviest weight, at most
/// [`MAX_POSITIONS`] and none after the last position (`uniquePos`).
///
/// Where PostgreSQL stops (the 256th position, or 16383), it does not
/// merge the weights of that position's other entries, and which of them
/// it keeps depends on its sort's order of equal entries: such a value,
/// one position written again there with another weight, is refused.
fn positions(mut list: Vec<Position>) -> Result<Vec<Position>, String> {
    if list.len() <= 1 {
        return Ok(list);
    }
    list.sort_by_key(|p| p.at);
    let mut kept: Vec<Position> = Vec::with_capacity(list.len().min(MAX_POSITIONS));
    for (i, &p) in list.iter().enumerate() {
        match kept.last_mut() {
            Some(last) if last.at == p.at => last.weight = last.weight.max(p.weight),
            _ => {
                kept.push(p);
                if kept.len() > 1 && (kept.len() >= MAX_POSITIONS || p.at == MAX_POSITION - 1) {
                    let again = list[i + 1..].iter().take_while(|q| q.at == p.at);
                    if again.into_iter().any(|q| q.weight != p.weight) {
                        return Err(format!(
                            "position {} is written again with another weight where the lexeme's \
                             positions end (the 256th, or 16383): PostgreSQL keeps either weight",
                            p.at
                        ));
                    }
                    break;
                }
            }
        }
    }
    Ok(kept)
}

/// `tsvectorout`: each lexeme quoted, `'` and `\` doubled, then its
/// positions with their weights; one space between lexemes.
fn print(entries: &[(Vec<u8>, Vec<Position>)]) -> String {
    let mut out = String::new();
    for (i, (lexeme, positions)) in entries.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        // Whole characters of the input: the bytes are UTF-8.
        push_lexeme(
            &mut out,
            std::str::from_utf8(lexeme).expect("lexemes are cut at characters"),
        );
        for (j, p) in positions.iter().enumerate() {
            out.push(if j == 0 { ':' } else { ',' });
            out.push_str(&p.at.to_string());
            match p.weight {
                3 => out.push('A'),
                2 => out.push('B'),
                1 => out.push('C'),
                _ => {}
            }
        }
    }
    out
}

/// `lexeme` as `tsvectorout` prints it: quoted, `'` and `\` doubled.
pub fn push_lexeme(out: &mut String, lexeme: &str) {
    out.push('\'');
    for c in lexeme.chars() {
        if c == '\'' || c == '\\' {
            out.push(c);
        }
        out.push(c);
    }
    out.push('\'');
}

/// The parser's states (`gettoken_tsvector`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    WaitWord,
    EndWord,
    NextChar,
    EndQuoted,
    QuoteOrEnd,
    WaitPositions,
    InPosition,
    PositionDelimiter,
}

/// The words of `text`, read as `gettoken_tsvector` reads them.
fn parse(text: &str) -> Result<Vec<Word>, String> {
    let shown = crate::conversion::shown(text);
    let syntax = || format!("syntax error in tsvector: {shown}");
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut words = Vec::new();
    let mut at = 0usize;
    loop {
        let mut state = State::WaitWord;
        let mut escaped_from = State::WaitWord;
        let mut lexeme = String::new();
        let mut positions: Vec<Position> = Vec::new();
        // One word: `Some(next index)` when it ends, `None` at the end of
        // the input before any word.
        let end = loop {
            let c = chars.get(at).map(|&(_, c)| c);
            match state {
                State::WaitWord => match c {
                    None => break None,
                    Some('\'') => state = State::EndQuoted,
                    Some('\\') => {
                        state = State::NextChar;
                        escaped_from = State::EndWord;
                    }
                    Some(c) if is_space(c, &shown)? => {}
                    Some(c) => {
                        lexeme.push(c);
                        state = State::EndWord;
                    }
                },
                State::NextChar => match c {
                    None => return Err(format!("there is no escaped character: {shown}")),
                    Some(c) => {
                        lexeme.push(c);
                        state = escaped_from;
                    }
                },
                State::EndWord => match c {
                    Some('\\') => {
                        state = State::NextChar;
                        escaped_from = State::EndWord;
                    }
                    None => break Some(at),
                    Some(c) if is_space(c, &shown)? => break Some(at),
                    Some(':') => state = State::InPosition,
                    Some(c) => lexeme.push(c),
                },
                State::EndQuoted => match c {
                    Some('\'') => state = State::QuoteOrEnd,
                    Some('\\') => {
                        state = State::NextChar;
                        escaped_from = State::EndQuoted;
                    }
                    None => return Err(syntax()),
                    Some(c) => lexeme.push(c),
                },
                State::QuoteOrEnd => match c {
                    Some('\'') => {
                        lexeme.push('\'');
                        state = State::EndQuoted;
                    }
                    _ => {
                        if lexeme.is_empty() {
                            return Err(syntax());
                        }
                        // This character again, as the start of what follows.
                        state = State::WaitPositions;
                        continue;
                    }
                },
                State::WaitPositions => match c {
                    Some(':') => state = State::InPosition,
                    _ => break Some(at),
                },
                State::InPosition => match c {
                    Some(c) if c.is_ascii_digit() => {
                        let digits: String = chars[at..]
                            .iter()
                            .map(|&(_, c)| c)
                            .take_while(char::is_ascii_digit)
                            .collect();
                        let position = position_of(&digits);
                        if position == 0 {
                            return Err(format!("wrong position info in tsvector: {shown}"));
                        }
                        positions.push(Position {
                            at: position,
                            weight: 0,
                        });
                        state = State::PositionDelimiter;
                    }
                    _ => return Err(syntax()),
                },
                State::PositionDelimiter => {
                    let last = positions.last_mut().expect("a position was read");
                    let weight = match c {
                        Some(',') => {
                            state = State::InPosition;
                            None
                        }
                        Some('a' | 'A' | '*') => Some(3),
                        Some('b' | 'B') => Some(2),
                        Some('c' | 'C') => Some(1),
                        Some('d' | 'D') => Some(0),
                        None => break Some(at),
                        Some(c) if is_space(c, &shown)? => break Some(at),
                        // A position's further digits (read with its
                        // first), and digits after a weight, pass.
                        Some(c) if c.is_ascii_digit() => None,
                        Some(_) => return Err(syntax()),
                    };
                    if let Some(weight) = weight {
                        if last.weight != 0 {
                            return Err(syntax());
                        }
                        last.weight = weight;
                    }
                }
            }
            at += 1;
        };
        let Some(next) = end else {
            return Ok(words);
        };
        if lexeme.is_empty() {
            return Err(syntax());
        }
        words.push(Word {
            lexeme: lexeme.into_bytes(),
            positions,
        });
        at = next;
    }
}

/// Whether `c` separates words outside quotes, as `t_isspace` says: the
/// ASCII spaces do; a Unicode space beyond ASCII is refused, since the
/// database's locale decides it.
pub(crate) fn is_space(c: char, shown: &str) -> Result<bool, String> {
    if c.is_ascii() {
        return Ok(matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c'));
    }
    if c.is_whitespace() || matches!(c, '\u{180e}' | '\u{200b}' | '\u{feff}') {
        return Err(format!(
            "{shown} holds the space character U+{:04X} outside quotes: whether it separates \
             two lexemes depends on the database's locale; quote the lexeme ('…') to keep it",
            c as u32
        ));
    }
    Ok(false)
}

/// A position as `LIMITPOS(atoi(digits))` makes it: `atoi` as glibc's
/// `strtol` (saturating at `LONG_MAX`) cut to an `int`, then clamped to
/// 16383, or cut to its fourteen bits when the `int` is negative.
fn position_of(digits: &str) -> u16 {
    let mut value: i64 = 0;
    for d in digits.bytes() {
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(i64::from(d - b'0')))
            .unwrap_or(i64::MAX);
    }
    let int = value as i32;
    if int >= i32::from(MAX_POSITION) {
        MAX_POSITION - 1
    } else {
        (int as u16) & (MAX_POSITION - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_become_postgresqls_text() {
        for (written, canonical) in [
            ("", ""),
            ("   ", ""),
            ("a fat cat sat on a mat", "'a' 'cat' 'fat' 'mat' 'on' 'sat'"),
            ("rat:2b a:3,1a fat", "'a':1A,3 'fat' 'rat':2B"),
            ("a:1 a:1c a:1b", "'a':1B"),
            ("'it''s' 'back\\\\slash'", "'back\\\\slash' 'it''s'"),
            ("x:1*,2d", "'x':1A,2"),
            ("x:1A2", "'x':1A"),
            ("x:0012", "'x':12"),
            ("x:20000", "'x':16383"),
            ("x:99999999999999999999", "'x':16383"),
            ("'a b':1", "'a b':1"),
            ("ab ab", "'ab'"),
            ("b a", "'a' 'b'"),
            ("ab a", "'a' 'ab'"),
            ("é e", "'e' 'é'"),
            ("x:16383,5", "'x':5,16383"),
        ] {
            assert_eq!(
                canonical_tsvector(written).as_deref(),
                Ok(canonical),
                "{written}"
            );
        }
        let many: Vec<String> = (1..=300).map(|i| i.to_string()).collect();
        let kept = canonical_tsvector(&format!("w:{}", many.join(","))).unwrap();
        assert_eq!(kept.matches(',').count(), 255, "{kept}");
        // Printed text is read back as itself.
        for text in ["'a':1A,3 'fat' 'rat':2B", "'it''s' 'x\\\\y'"] {
            assert_eq!(canonical_tsvector(text).as_deref(), Ok(text));
        }
    }

    #[test]
    fn what_postgresql_refuses_is_refused() {
        for (written, why) in [
            ("''", "syntax error"),
            ("a:", "syntax error"),
            ("a:x", "syntax error"),
            ("a:0", "wrong position info"),
            ("a:4294967296", "wrong position info"),
            ("a:1AB", "syntax error"),
            ("a:1;", "syntax error"),
            ("'open", "syntax error"),
            ("trailing\\", "no escaped character"),
            ("a\u{a0}b", "U+00A0"),
            ("nul\0", "NUL"),
        ] {
            let err = canonical_tsvector(written).unwrap_err();
            assert!(err.contains(why), "{written:?}: {err}");
        }
        assert_eq!(
            canonical_tsvector("'a\u{a0}b'").as_deref(),
            Ok("'a\u{a0}b'")
        );
        let long = "w".repeat(2047);
        assert!(canonical_tsvector(&long)
            .unwrap_err()
            .contains("word is too long"));
        assert!(canonical_tsvector(&"w".repeat(2046)).is_ok());
    }
}
