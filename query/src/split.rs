//! Input text cut into statements at top-level `;`, each with its own
//! text as written (comments kept), so that one statement that does not
//! parse never takes its neighbours with it.

use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::tokenizer::{Location, Token, Tokenizer};

/// One statement's text, or the text the tokenizer could not read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    pub text: String,
    /// The tokenizer's error, when it could not read this text (an
    /// unterminated string or comment): the rest of the input.
    pub error: Option<String>,
}

/// The statements of `input`, in order. Pieces holding only whitespace
/// and comments are left out.
pub fn statements(input: &str) -> Vec<Piece> {
    let offsets = LineOffsets::new(input);
    let mut tokens = Vec::new();
    // On an error the buffer holds the tokens read before it.
    let failed = Tokenizer::new(&PostgreSqlDialect {}, input)
        .tokenize_with_location_into_buf(&mut tokens)
        .err();
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut meaningful = false;
    for token in &tokens {
        match &token.token {
            Token::SemiColon => {
                let end = offsets.byte(token.span.start).unwrap_or(input.len());
                if meaningful {
                    push(&mut pieces, &input[start..end]);
                }
                start = (end + 1).min(input.len());
                meaningful = false;
            }
            Token::Whitespace(_) | Token::EOF => {}
            _ => meaningful = true,
        }
    }
    let rest = input[start..].trim();
    match failed {
        // Everything after the last complete statement, as one piece the
        // tokenizer could not read.
        Some(e) if !rest.is_empty() => pieces.push(Piece {
            text: rest.to_string(),
            error: Some(e.to_string()),
        }),
        _ if meaningful => push(&mut pieces, rest),
        _ => {}
    }
    pieces
}

fn push(pieces: &mut Vec<Piece>, text: &str) {
    pieces.push(Piece {
        text: text.trim().to_string(),
        error: None,
    });
}

/// Byte offsets of (line, column) locations, columns counted in chars.
struct LineOffsets<'a> {
    input: &'a str,
    starts: Vec<usize>,
}

impl<'a> LineOffsets<'a> {
    fn new(input: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(input.match_indices('\n').map(|(i, _)| i + 1));
        LineOffsets { input, starts }
    }

    fn byte(&self, at: Location) -> Option<usize> {
        let line_start = *self
            .starts
            .get(usize::try_from(at.line).ok()?.checked_sub(1)?)?;
        let column = usize::try_from(at.column).ok()?.checked_sub(1)?;
        let line = &self.input[line_start..];
        Some(
            line_start
                + line
                    .char_indices()
                    .nth(column)
                    .map_or(line.len(), |(i, _)| i),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(input: &str) -> Vec<String> {
        statements(input).into_iter().map(|p| p.text).collect()
    }

    #[test]
    fn cuts_at_top_level_semicolons_only() {
        assert_eq!(
            texts("SELECT 'a;b' FROM t; -- one; two\nSELECT $$x;y$$ ;\n/* c; */ SELECT 3"),
            vec![
                "SELECT 'a;b' FROM t",
                "-- one; two\nSELECT $$x;y$$",
                "/* c; */ SELECT 3"
            ]
        );
    }

    #[test]
    fn comment_only_and_empty_pieces_are_left_out() {
        assert!(texts("").is_empty());
        assert!(texts(" ;; -- nothing\n /* at all */ ;").is_empty());
    }

    #[test]
    fn columns_count_characters_not_bytes() {
        assert_eq!(
            texts("SELECT 'é'; SELECT 'ü'"),
            vec!["SELECT 'é'", "SELECT 'ü'"]
        );
    }

    #[test]
    fn an_unterminated_string_keeps_the_statements_before_it() {
        let pieces = statements("SELECT 1; SELECT 'oops; SELECT 2");
        assert_eq!(pieces.len(), 2);
        assert_eq!(pieces[0].text, "SELECT 1");
        assert_eq!(pieces[0].error, None);
        assert_eq!(pieces[1].text, "SELECT 'oops; SELECT 2");
        assert!(pieces[1].error.is_some());
    }
}
