//! `tsquery` in its one canonical form: PostgreSQL's own text, what
//! `tsqueryin` makes of any spelling and `tsqueryout` prints. Each operand
//! quoted (`'` and `\` doubled inside) with its modifiers after `:` (`*`
//! for a prefix, then the weights `A` to `D`), operators between spaces
//! (` & `, ` | `, ` <-> `, ` <N> `), `!` before its operand, and
//! parentheses (`( … )`) only where the operators' priorities need them:
//! `'fat' & ( 'rat' | 'cat' ) <-> !'mat':*A`.
//!
//! Input is read as `tsqueryin` reads it (`gettoken_query_standard` over
//! the tsvector parser's words, `makepol`'s priorities: `!` above `<->`
//! above `&` above `|`, `!` right-associative, the others to the left),
//! with its limits: a phrase distance from 0 to 16384, an operand shorter
//! than 2047 bytes, at most 32 operators waiting at one level of
//! parentheses. An empty query (nothing but spaces) is the empty
//! `tsquery`, `""`. As for `tsvector`, a character outside ASCII that
//! Unicode calls a space is refused outside quotes: the database's
//! locale decides whether it separates words. Parentheses nested deeper
//! than [`MAX_DEPTH`] are refused here, where PostgreSQL's limit is its
//! stack.

/// `MAXSTRLEN`: an operand must be shorter than this many bytes.
const MAX_OPERAND: usize = (1 << 11) - 1;
/// `MAXSTRPOS`: operands (each with a NUL) must start below this offset.
const MAX_OPERANDS_BYTES: usize = (1 << 20) - 1;
/// `MAXENTRYPOS`: the greatest phrase distance.
const MAX_DISTANCE: i64 = 1 << 14;
/// `STACKDEPTH`: operators waiting at one level.
const STACK_DEPTH: usize = 32;
/// The deepest nesting of parentheses read here.
pub const MAX_DEPTH: usize = 256;

/// An operator: `!`, `&`, `|`, or a phrase operator with its distance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Not,
    And,
    Or,
    Phrase(u16),
}

impl Op {
    /// `tsearch_op_priority`.
    fn priority(self) -> u8 {
        match self {
            Op::Not => 4,
            Op::Phrase(_) => 3,
            Op::And => 2,
            Op::Or => 1,
        }
    }
}

/// A query's tree.
#[derive(Debug)]
enum Node {
    Operand {
        lexeme: String,
        /// Bits: `A` 8, `B` 4, `C` 2, `D` 1.
        weight: u8,
        prefix: bool,
    },
    Not(Box<Node>),
    Binary(Op, Box<Node>, Box<Node>),
}

/// The canonical text of the `tsquery` written `text`, or why PostgreSQL
/// would refuse it.
pub fn canonical_tsquery(text: &str) -> Result<String, String> {
    if text.contains('\0') {
        return Err("a tsquery cannot contain the NUL character (\\u0000)".into());
    }
    let mut parser = Parser {
        chars: text.chars().collect(),
        at: 0,
        state: State::FirstOperand,
        depth: 0,
        operand_bytes: 0,
        shown: crate::conversion::shown(text),
    };
    let mut out = String::new();
    if let Some(tree) = parser.level()? {
        print(&tree, 0, false, &mut out);
    }
    Ok(out)
}

/// What the tokenizer waits for (`WAITFIRSTOPERAND`, `WAITOPERAND`,
/// `WAITOPERATOR`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    FirstOperand,
    Operand,
    Operator,
}

/// What `gettoken_query_standard` returns.
enum Token {
    Operand(Node),
    Operator(Op),
    Open,
    Close,
    End,
}

struct Parser {
    chars: Vec<char>,
    at: usize,
    state: State,
    /// Open parentheses (`state->count`).
    depth: usize,
    /// Bytes of the operands so far, each with its NUL.
    operand_bytes: usize,
    shown: String,
}

impl Parser {
    fn syntax(&self) -> String {
        format!("syntax error in tsquery: {}", self.shown)
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    /// `makepol`: one level, to its closing parenthesis or the end; the
    /// operators waiting there applied by their priorities.
    fn level(&mut self) -> Result<Option<Node>, String> {
        let mut out: Vec<Node> = Vec::new();
        let mut waiting: Vec<Op> = Vec::new();
        loop {
            match self.token()? {
                Token::Operand(node) => out.push(node),
                Token::Operator(op) => {
                    clean(&mut out, &mut waiting, op);
                    if waiting.len() >= STACK_DEPTH {
                        return Err("tsquery stack too small".into());
                    }
                    waiting.push(op);
                }
                Token::Open => {
                    if self.depth > MAX_DEPTH {
                        return Err(format!(
                            "{}: parentheses nested deeper than {MAX_DEPTH}",
                            self.shown
                        ));
                    }
                    if let Some(node) = self.level()? {
                        out.push(node);
                    }
                }
                Token::Close | Token::End => {
                    clean(&mut out, &mut waiting, Op::Or);
                    return match (out.pop(), out.is_empty()) {
                        (node, true) => Ok(node),
                        _ => Err(self.syntax()),
                    };
                }
            }
        }
    }

    /// `gettoken_query_standard`.
    fn token(&mut self) -> Result<Token, String> {
        loop {
            let c = self.peek();
            match self.state {
                State::FirstOperand | State::Operand => match c {
                    Some('!') => {
                        self.at += 1;
                        self.state = State::Operand;
                        return Ok(Token::Operator(Op::Not));
                    }
                    Some('(') => {
                        self.at += 1;
                        self.state = State::Operand;
                        self.depth += 1;
                        return Ok(Token::Open);
                    }
                    Some(':') => return Err(self.syntax()),
                    Some(c) if crate::tsvector::is_space(c, &self.shown)? => {}
                    _ => match self.word()? {
                        Some(lexeme) => {
                            let (weight, prefix) = self.modifiers();
                            self.state = State::Operator;
                            return Ok(Token::Operand(Node::Operand {
                                lexeme,
                                weight,
                                prefix,
                            }));
                        }
                        None if self.state == State::FirstOperand => return Ok(Token::End),
                        None => return Err(format!("no operand in tsquery: {}", self.shown)),
                    },
                },
                State::Operator => match c {
                    Some('&') => {
                        self.at += 1;
                        self.state = State::Operand;
                        return Ok(Token::Operator(Op::And));
                    }
                    Some('|') => {
                        self.at += 1;
                        self.state = State::Operand;
                        return Ok(Token::Operator(Op::Or));
                    }
                    Some('<') => match self.phrase()? {
                        Some(distance) => return Ok(Token::Operator(Op::Phrase(distance))),
                        None => return Err(self.syntax()),
                    },
                    Some(')') => {
                        self.at += 1;
                        if self.depth == 0 {
                            return Err(self.syntax());
                        }
                        self.depth -= 1;
                        return Ok(Token::Close);
                    }
                    None if self.depth > 0 => return Err(self.syntax()),
                    None => return Ok(Token::End),
                    Some(c) if crate::tsvector::is_space(c, &self.shown)? => {}
                    Some(_) => return Err(self.syntax()),
                },
            }
            self.at += 1;
        }
    }

    /// `gettoken_tsvector` reading an operand (operators end a word, `:`
    /// too): `None` at the end of the input before one starts.
    fn word(&mut self) -> Result<Option<String>, String> {
        #[derive(Clone, Copy, PartialEq, Eq)]
        enum W {
            WaitWord,
            EndWord,
            NextChar,
            EndQuoted,
            QuoteOrEnd,
        }
        let operator = |c: char| matches!(c, '!' | '&' | '|' | '(' | ')' | '<');
        let mut state = W::WaitWord;
        let mut escaped_from = W::EndWord;
        let mut lexeme = String::new();
        loop {
            let c = self.peek();
            match state {
                W::WaitWord => match c {
                    None => return Ok(None),
                    Some('\'') => state = W::EndQuoted,
                    Some('\\') => {
                        state = W::NextChar;
                        escaped_from = W::EndWord;
                    }
                    Some(c) if operator(c) => return Err(self.syntax()),
                    Some(c) if crate::tsvector::is_space(c, &self.shown)? => {}
                    Some(c) => {
                        lexeme.push(c);
                        state = W::EndWord;
                    }
                },
                W::NextChar => match c {
                    None => return Err(format!("there is no escaped character: {}", self.shown)),
                    Some(c) => {
                        lexeme.push(c);
                        state = escaped_from;
                    }
                },
                W::EndWord => match c {
                    Some('\\') => {
                        state = W::NextChar;
                        escaped_from = W::EndWord;
                    }
                    None | Some(':') => break,
                    Some(c) if operator(c) || crate::tsvector::is_space(c, &self.shown)? => break,
                    Some(c) => lexeme.push(c),
                },
                W::EndQuoted => match c {
                    Some('\'') => state = W::QuoteOrEnd,
                    Some('\\') => {
                        state = W::NextChar;
                        escaped_from = W::EndQuoted;
                    }
                    None => return Err(self.syntax()),
                    Some(c) => lexeme.push(c),
                },
                W::QuoteOrEnd => match c {
                    Some('\'') => {
                        lexeme.push('\'');
                        state = W::EndQuoted;
                    }
                    // This character again, as the start of what follows.
                    _ => break,
                },
            }
            self.at += 1;
        }
        if lexeme.is_empty() {
            return Err(self.syntax());
        }
        if lexeme.len() >= MAX_OPERAND {
            return Err(format!("word is too long in tsquery: {}", self.shown));
        }
        if self.operand_bytes >= MAX_OPERANDS_BYTES {
            return Err(format!("value is too big in tsquery: {}", self.shown));
        }
        self.operand_bytes += lexeme.len() + 1;
        Ok(Some(lexeme))
    }

    /// `get_modifiers`: after `:`, any of `*` and the weight letters.
    fn modifiers(&mut self) -> (u8, bool) {
        let (mut weight, mut prefix) = (0, false);
        if self.peek() != Some(':') {
            return (weight, prefix);
        }
        self.at += 1;
        while let Some(c) = self.peek() {
            match c {
                'a' | 'A' => weight |= 8,
                'b' | 'B' => weight |= 4,
                'c' | 'C' => weight |= 2,
                'd' | 'D' => weight |= 1,
                '*' => prefix = true,
                _ => break,
            }
            self.at += 1;
        }
        (weight, prefix)
    }

    /// `parse_phrase_operator` at a `<`: `<->` (distance 1) or `<N>`,
    /// and something after it; `None` when it is none.
    fn phrase(&mut self) -> Result<Option<u16>, String> {
        let rest = &self.chars[self.at..];
        let distance = match rest.get(1) {
            Some('-') => {
                if rest.get(2) != Some(&'>') {
                    return Ok(None);
                }
                (1, 3)
            }
            Some(c) if c.is_ascii_digit() => {
                let digits: String = rest[1..]
                    .iter()
                    .take_while(|c| c.is_ascii_digit())
                    .collect();
                // `strtol`: too many digits is out of range too.
                let n = digits.parse::<i64>().unwrap_or(i64::MAX);
                if n > MAX_DISTANCE {
                    return Err(format!(
                        "distance in phrase operator must be an integer value between zero and {MAX_DISTANCE} inclusive"
                    ));
                }
                let close = 1 + digits.chars().count();
                if rest.get(close) != Some(&'>') {
                    return Ok(None);
                }
                (n, close + 1)
            }
            _ => return Ok(None),
        };
        // The operator is taken only with something after it.
        if rest.get(distance.1).is_none() {
            return Ok(None);
        }
        self.at += distance.1;
        self.state = State::Operand;
        Ok(Some(distance.0 as u16))
    }
}

/// `cleanOpStack`: applies the waiting operators `op` does not bind
/// tighter than (`!` waits on `!`: it is right-associative).
fn clean(out: &mut Vec<Node>, waiting: &mut Vec<Op>, op: Op) {
    while let Some(&top) = waiting.last() {
        let stop = if op == Op::Not {
            op.priority() >= top.priority()
        } else {
            op.priority() > top.priority()
        };
        if stop {
            break;
        }
        waiting.pop();
        // The tokens alternate operands and operators, so both are there.
        let right = out.pop();
        let node = match (top, right) {
            (Op::Not, Some(operand)) => Node::Not(Box::new(operand)),
            (op, Some(right)) => match out.pop() {
                Some(left) => Node::Binary(op, Box::new(left), Box::new(right)),
                None => right,
            },
            (_, None) => continue,
        };
        out.push(node);
    }
}

/// `infix`: `tsqueryout`'s printing of `node` under an operator of
/// `parent` priority (`right_of_phrase`: as a phrase's right operand).
fn print(node: &Node, parent: u8, right_of_phrase: bool, out: &mut String) {
    match node {
        Node::Operand {
            lexeme,
            weight,
            prefix,
        } => {
            crate::tsvector::push_lexeme(out, lexeme);
            if *weight != 0 || *prefix {
                out.push(':');
                if *prefix {
                    out.push('*');
                }
                for (bit, letter) in [(8, 'A'), (4, 'B'), (2, 'C'), (1, 'D')] {
                    if weight & bit != 0 {
                        out.push(letter);
                    }
                }
            }
        }
        Node::Not(operand) => {
            let priority = Op::Not.priority();
            let parens = priority < parent;
            if parens {
                out.push_str("( ");
            }
            out.push('!');
            print(operand, priority, false, out);
            if parens {
                out.push_str(" )");
            }
        }
        Node::Binary(op, left, right) => {
            let priority = op.priority();
            let parens = priority < parent || (matches!(op, Op::Phrase(_)) && right_of_phrase);
            if parens {
                out.push_str("( ");
            }
            print(left, priority, false, out);
            match op {
                Op::Or => out.push_str(" | "),
                Op::And => out.push_str(" & "),
                Op::Phrase(1) => out.push_str(" <-> "),
                Op::Phrase(n) => out.push_str(&format!(" <{n}> ")),
                Op::Not => {}
            }
            print(right, priority, matches!(op, Op::Phrase(_)), out);
            if parens {
                out.push_str(" )");
            }
        }
    }
}

/// The text of a `tsquery` in its binary form (`tsquerysend`: the count
/// of items, then each in prefix order, an operator before its right
/// then its left operand: a type byte, then an operand's weight bits,
/// prefix flag and NUL-ended text, or an operator's code and a phrase's
/// distance), as `tsqueryout` prints it; `None` for anything
/// `tsqueryrecv` refuses (the empty query too: its `findoprnd` finds no
/// operand) or no text spells (an empty operand, a phrase distance
/// outside 0 to 16384).
pub fn from_send(bytes: &[u8]) -> Option<String> {
    let (count, mut rest) = bytes.split_first_chunk::<4>()?;
    let count = usize::try_from(i32::from_be_bytes(*count)).ok()?;
    let mut items = Vec::new();
    for _ in 0..count {
        let (&kind, after) = rest.split_first()?;
        rest = after;
        items.push(match kind {
            1 => {
                let (&weight, after) = rest.split_first()?;
                let (&prefix, after) = after.split_first()?;
                let end = after.iter().position(|&b| b == 0)?;
                let lexeme = std::str::from_utf8(&after[..end]).ok()?;
                rest = &after[end + 1..];
                if weight > 0xF || lexeme.is_empty() || lexeme.len() >= MAX_OPERAND {
                    return None;
                }
                Item::Operand(Node::Operand {
                    lexeme: lexeme.to_string(),
                    weight,
                    prefix: prefix != 0,
                })
            }
            2 => {
                let (&code, after) = rest.split_first()?;
                rest = after;
                Item::Operator(match code {
                    1 => Op::Not,
                    2 => Op::And,
                    3 => Op::Or,
                    4 => {
                        let (distance, after) = rest.split_first_chunk::<2>()?;
                        rest = after;
                        let distance = i16::from_be_bytes(*distance);
                        Op::Phrase(
                            u16::try_from(distance)
                                .ok()
                                .filter(|d| i64::from(*d) <= MAX_DISTANCE)?,
                        )
                    }
                    _ => return None,
                })
            }
            _ => return None,
        });
    }
    if !rest.is_empty() {
        return None;
    }
    let mut out = String::new();
    let mut items = items.into_iter();
    let tree = tree_of(&mut items, 0)?;
    if items.next().is_some() {
        return None;
    }
    print(&tree, 0, false, &mut out);
    Some(out)
}

/// One item of `tsquerysend`'s form.
enum Item {
    Operand(Node),
    Operator(Op),
}

/// `findoprnd_recurse`: the subtree starting at the next item.
fn tree_of(items: &mut impl Iterator<Item = Item>, depth: usize) -> Option<Node> {
    if depth > MAX_DEPTH * 8 {
        return None;
    }
    Some(match items.next()? {
        Item::Operand(node) => node,
        Item::Operator(Op::Not) => Node::Not(Box::new(tree_of(items, depth + 1)?)),
        Item::Operator(op) => {
            let right = tree_of(items, depth + 1)?;
            let left = tree_of(items, depth + 1)?;
            Node::Binary(op, Box::new(left), Box::new(right))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_become_postgresqls_text() {
        for (spelling, text) in [
            ("fat & rat", "'fat' & 'rat'"),
            ("fat & (rat | cat)", "'fat' & ( 'rat' | 'cat' )"),
            ("(fat & rat) | cat", "'fat' & 'rat' | 'cat'"),
            ("a & (b & c)", "'a' & 'b' & 'c'"),
            ("a <-> (b <-> c)", "'a' <-> ( 'b' <-> 'c' )"),
            ("(a <-> b) <2> c", "'a' <-> 'b' <2> 'c'"),
            ("!a & !!b", "!'a' & !!'b'"),
            ("!(a | b)", "!( 'a' | 'b' )"),
            ("a:*AB <0> b:dc", "'a':*AB <0> 'b':CD"),
            (
                "'it''s' | x\\'y | 'back\\\\slash'",
                "'it''s' | 'x''y' | 'back\\\\slash'",
            ),
            ("  ", ""),
            ("", ""),
            ("a|b&c<->d", "'a' | 'b' & 'c' <-> 'd'"),
            ("((a))", "'a'"),
        ] {
            assert_eq!(
                canonical_tsquery(spelling).as_deref(),
                Ok(text),
                "{spelling}"
            );
            assert_eq!(canonical_tsquery(text).as_deref(), Ok(text), "{text}");
        }
    }

    #[test]
    fn the_binary_form_reads_as_its_text() {
        // `tsquerysend('a:*B & !(b | c) <2> d')`: the AND, its right
        // operand (the phrase: its right `d`, its left the NOT), then `a`.
        let mut sent = 8i32.to_be_bytes().to_vec();
        sent.extend([2, 2]); // &
        sent.extend([2, 4, 0, 2]); // <2>
        sent.extend([1, 0, 0, b'd', 0]);
        sent.extend([2, 1]); // !
        sent.extend([2, 3]); // |
        sent.extend([1, 0, 0, b'c', 0]);
        sent.extend([1, 0, 0, b'b', 0]);
        sent.extend([1, 4, 1, b'a', 0]);
        assert_eq!(
            from_send(&sent).as_deref(),
            Some("'a':*B & !( 'b' | 'c' ) <2> 'd'")
        );
        assert_eq!(
            from_send(&0i32.to_be_bytes()),
            None,
            "as tsqueryrecv refuses it"
        );
        // What `tsqueryrecv` refuses or no text spells: an operator
        // without operands, an empty operand, weight bits past D..A, a
        // negative distance, bytes left over, items left over.
        let one = |item: &[u8]| {
            let mut b = 1i32.to_be_bytes().to_vec();
            b.extend(item);
            b
        };
        let mut two = 2i32.to_be_bytes().to_vec();
        two.extend([1, 0, 0, b'a', 0, 1, 0, 0, b'b', 0]);
        for bad in [
            one(&[2, 2]),
            one(&[1, 0, 0, 0]),
            one(&[1, 16, 0, b'a', 0]),
            [
                3i32.to_be_bytes().as_slice(),
                &[2, 4, 0xff, 0xff, 1, 0, 0, b'a', 0, 1, 0, 0, b'b', 0],
            ]
            .concat(),
            [one(&[1, 0, 0, b'a', 0]), vec![0]].concat(),
            two,
        ] {
            assert_eq!(from_send(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn what_tsqueryin_refuses_is_refused() {
        for bad in [
            "a &",
            "& a",
            "a b",
            "(a",
            "a)",
            "()",
            "!",
            "a <->",
            "a <16385> b",
            "a:x",
            "''",
            "a & 'b",
            ":a",
            "a <- b",
            "a\\",
        ] {
            assert!(canonical_tsquery(bad).is_err(), "{bad}");
        }
        assert!(canonical_tsquery(&format!("{}a", "!".repeat(32))).is_ok());
        assert!(canonical_tsquery(&format!("{}a", "!".repeat(33))).is_err());
    }
}
