//! Whether an index read answers as PostgreSQL would: the index's byte
//! order and declared types against the column's collation and type (see
//! [`compared_otherwise`]). A read that would not is forwarded.

use legacy::LegacyStore;

use super::serve::Catalog;
use super::RunError;

/// Why an index read would find or order other rows than PostgreSQL,
/// if it would. An index compares and orders its strings byte by byte;
/// PostgreSQL by the column's type and collation. They agree for numbers,
/// UUIDs, dates and times, bytea, and text in a `C` collation, and its
/// `=` agrees for any deterministic collation. Not for text in
/// `en_US.UTF-8` (`'B' < 'a'` in bytes, not there: a `LIMIT` after an
/// `ORDER BY name` takes other rows), an enum (ordered as declared), a
/// `citext` or a case-insensitive collation (`=` ignores case), an
/// interval (`1 day` = `24 hours`), JSON, or a geometric value (a
/// `point` has no `=`, a `box`'s compares areas).
pub(super) async fn compared_otherwise(
    legacy: &LegacyStore,
    catalog: &Catalog,
    model: &crate::Model,
    read: &crate::plan::IndexRead,
) -> Result<Option<String>, RunError> {
    use config::IndexFieldType as T;
    use legacy::conversion::Conversion as C;
    let layout = legacy.layout();
    let Some(index) = layout.index(&read.index) else {
        return Ok(None);
    };
    let declared = model.indexes.iter().find(|i| i.name == read.index);
    let column = &layout.columns[index.column];
    let mut uses: Vec<(&str, bool)> = vec![(read.shard_field.as_str(), false)];
    for filter in &read.filters {
        let ordered = !matches!(
            filter.op,
            schemaless::FilterOp::Eq | schemaless::FilterOp::In
        );
        uses.push((filter.field.as_str(), ordered));
    }
    uses.extend(read.order_by.as_deref().map(|f| (f, true)));
    for (name, ordered) in uses {
        let Some(f) = column.field(name) else {
            continue;
        };
        // The index keeps the value as its declared type: a number kept
        // as a string orders as text (`10 < 9`), and a value that does
        // not fit its type is null in the entry, matching nothing.
        let kept_as = declared.map_or(T::String, |i| i.type_of(name));
        let fits = match (kept_as, f.conversion) {
            (T::Int, C::Int2 | C::Int4 | C::Int8) => true,
            (T::Float, C::Float4 | C::Float8) => true,
            (
                T::Decimal,
                C::Numeric | C::UnconstrainedNumeric | C::Money | C::Int2 | C::Int4 | C::Int8,
            ) => true,
            (T::Bool, C::Bool) => true,
            (T::String, c) => !matches!(
                c,
                C::Int2
                    | C::Int4
                    | C::Int8
                    | C::Float4
                    | C::Float8
                    | C::Numeric
                    | C::UnconstrainedNumeric
                    | C::Money
                    | C::Bool
                    | C::Json
                    | C::Jsonb
                    | C::TextArray
                    | C::Int2Array
                    | C::Int4Array
                    | C::Int8Array
                    | C::ArrayOf(_)
            ),
            _ => false,
        };
        if !fits {
            return Ok(Some(format!(
                "the index keeps {name} as {kept_as:?}, which does not compare its values as \
                 PostgreSQL does (declare its type in the index's types); PostgreSQL answers it"
            )));
        }
        let a = catalog
            .attribute(legacy, column.table_sql(), &f.sql)
            .await?;
        let why = match f.conversion {
            C::Interval | C::Json | C::Jsonb => Some("compares its values otherwise"),
            C::Geometric(_) => Some("compares geometric values otherwise (or not at all)"),
            C::Xml => Some("has no equality or order for xml"),
            C::Record => Some("compares composite values field by field"),
            C::Tsquery if ordered => Some("orders queries by their stored form"),
            C::Enum if ordered => Some("orders an enum as its labels are declared"),
            C::Inet | C::Cidr if ordered => Some("orders addresses as addresses"),
            C::Timetz if ordered => Some("orders times with offsets by their instant in UTC"),
            C::Text | C::Char | C::Enum if !a.exact => {
                Some("compares its text without case (citext, or a nondeterministic collation)")
            }
            C::Text | C::Char if ordered && !a.bytewise => {
                Some("orders its text by a collation, not byte by byte")
            }
            _ => None,
        };
        if let Some(why) = why {
            return Ok(Some(format!(
                "an index compares {name} byte by byte where PostgreSQL {why}; PostgreSQL answers it"
            )));
        }
    }
    Ok(None)
}
