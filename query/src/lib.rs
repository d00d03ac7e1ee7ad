//! The app's SQL, read with sqlparser (PostgreSQL dialect): which
//! statements the cell API can answer, and how.
//!
//! Every rule comes from `[layout]` and `[[index]]`: the parent table and
//! its UUID (the row key), the `row` and `child` columns and the SQL
//! columns their fields hold, and the indexes' shard fields and fields.
//! No table or column name is known to the code.
//!
//! - [`split`]: input cut into statements at top-level `;`;
//! - [`model`]: the layout as the rules read it;
//! - [`expr`]: scopes, column references, conditions;
//! - [`read`]: SELECT, as row-key reads or an index query;
//! - [`write`]: INSERT and UPDATE, as `put_cell`s;
//! - [`plan`]: the translation, and the calls it prints;
//! - [`analysis`]: a statement's class, plan or reason;
//! - [`named`]: statements prepared in SQL, and the names `EXECUTE` runs;
//! - [`audit`]: many statements, their report and its summary;
//! - [`run`]: a translated read executed both ways (`query run`, and the
//!   proxy's samples).

pub mod analysis;
pub mod audit;
pub mod expr;
pub mod literal;
pub mod model;
pub mod named;
pub mod plan;
pub mod read;
pub mod run;
pub mod split;
pub mod write;

pub use analysis::{analyze, analyze_statement, analyze_text, Analysis, Class};
pub use model::Model;
pub use plan::Plan;
pub use write::REFUSED_BY_POSTGRES;

/// The parser, for callers that build on its syntax tree.
pub use sqlparser;
