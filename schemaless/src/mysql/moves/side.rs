//! The shard's other tables, copied whole while it is fenced: trigger
//! offsets, leases and dead letters, and the entries and row pointers of
//! every secondary index version whose entries the shard holds.
//!
//! Unlike `entity` these tables change in place and keep no log, so they
//! cannot be followed; they are small next to the cells (a row per trigger,
//! per parked cell, per indexed row), and are copied in full under the
//! fence: the target's rows are replaced by the source's in one
//! transaction per table. Tables are found by listing the database, and
//! values are written back by their column's type (integers and decimals
//! as their text, floating point by its shortest exact form, everything
//! else as hex), so an index version made after this code was written
//! moves the same way.

use sqlx::mysql::MySqlRow;
use sqlx::Row;

use crate::error::{Error, Result};
use crate::mysql::topology::Node;

/// Rows per `INSERT` of a copied table.
const ROWS_PER_INSERT: usize = 500;

/// How a column's values are read and written back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Read as its decimal text, written as it.
    Number,
    /// Read as a double, written in its shortest exact form.
    Float,
    /// Read as hex, written as `X'…'`.
    Bytes,
}

fn kind_of(data_type: &str) -> Kind {
    match data_type {
        "tinyint" | "smallint" | "mediumint" | "int" | "bigint" | "decimal" | "bit" | "year" => {
            Kind::Number
        }
        "float" | "double" => Kind::Float,
        _ => Kind::Bytes,
    }
}

/// Copies every table of `database` but `entity` (and the old copy's
/// renamed one) from `source` to `target`, creating the tables the target
/// lacks. Returns the rows copied.
pub async fn copy(source: &Node, target: &Node, database: &str) -> Result<u64> {
    let mut copied = 0;
    for table in super::fence::tables(source, database).await? {
        if table == "entity" || table == super::MOVED_ENTITY {
            continue;
        }
        copied += copy_table(source, target, database, &table).await?;
    }
    Ok(copied)
}

async fn copy_table(source: &Node, target: &Node, database: &str, table: &str) -> Result<u64> {
    let create: String = source
        .fetch_all(format!("SHOW CREATE TABLE `{database}`.`{table}`"))
        .await?
        .first()
        .map(|r| r.try_get(1))
        .transpose()
        .map_err(|e| source.error(e))?
        .ok_or_else(|| Error::Schema(format!("{database}.{table} has no definition")))?;
    let body = create
        .strip_prefix(&format!("CREATE TABLE `{table}`"))
        .ok_or_else(|| {
            Error::Schema(format!(
                "unexpected definition of {database}.{table}: {create}"
            ))
        })?;
    target
        .execute(format!(
            "CREATE TABLE IF NOT EXISTS `{database}`.`{table}`{body}"
        ))
        .await?;
    let columns: Vec<(String, Kind)> = source
        .fetch_all(format!(
            "SELECT column_name, data_type FROM information_schema.columns
             WHERE table_schema = '{database}' AND table_name = '{table}'
             ORDER BY ordinal_position"
        ))
        .await?
        .iter()
        .map(|r| {
            let name: String = r.try_get(0)?;
            let data_type: String = r.try_get(1)?;
            Ok((name, kind_of(&data_type.to_ascii_lowercase())))
        })
        .collect::<std::result::Result<_, sqlx::Error>>()
        .map_err(|e| source.error(e))?;
    let select: Vec<String> = columns
        .iter()
        .map(|(name, kind)| match kind {
            Kind::Number => format!("CAST(`{name}` AS CHAR)"),
            Kind::Float => format!("`{name}`"),
            Kind::Bytes => format!("HEX(`{name}`)"),
        })
        .collect();
    let rows = source
        .fetch_all(format!(
            "SELECT {} FROM `{database}`.`{table}`",
            select.join(", ")
        ))
        .await?;
    let names: Vec<String> = columns.iter().map(|(n, _)| format!("`{n}`")).collect();
    let mut statements = vec![format!("DELETE FROM `{database}`.`{table}`")];
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let values = chunk
            .iter()
            .map(|row| literal_row(row, &columns).map_err(|e| source.error(e)))
            .collect::<Result<Vec<_>>>()?;
        statements.push(format!(
            "INSERT INTO `{database}`.`{table}` ({}) VALUES {}",
            names.join(", "),
            values.join(", ")
        ));
    }
    // One transaction on one connection: a reader of the target never
    // sees the table emptied.
    let mut conn = target.acquire().await?;
    conn.begin_transaction();
    target
        .run(&mut conn, |c| {
            Box::pin(async move {
                sqlx::raw_sql("START TRANSACTION").execute(&mut *c).await?;
                for statement in statements {
                    sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
                        .execute(&mut *c)
                        .await?;
                }
                sqlx::raw_sql("COMMIT").execute(&mut *c).await?;
                Ok(())
            })
        })
        .await?;
    conn.end_transaction();
    Ok(rows.len() as u64)
}

/// `(v1, v2, …)` of one row read by [`copy_table`]'s select.
fn literal_row(row: &MySqlRow, columns: &[(String, Kind)]) -> Result<String, sqlx::Error> {
    let mut out = String::from("(");
    for (i, (name, kind)) in columns.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        match kind {
            Kind::Float => match row.try_get::<Option<f64>, _>(i)? {
                None => out.push_str("NULL"),
                Some(v) => out.push_str(&format!("{v:e}")),
            },
            Kind::Number | Kind::Bytes => match row.try_get::<Option<String>, _>(i)? {
                None => out.push_str("NULL"),
                Some(text) => {
                    // Both are digits and signs (or hex) as the server
                    // wrote them; checked, as anything put in SQL text is.
                    let allowed = |c: char| match kind {
                        Kind::Number => c.is_ascii_digit() || matches!(c, '-' | '.'),
                        _ => c.is_ascii_hexdigit(),
                    };
                    if !text.chars().all(allowed) {
                        return Err(sqlx::Error::Decode(
                            format!("column {name}: unexpected text {text:?}").into(),
                        ));
                    }
                    if *kind == Kind::Bytes {
                        out.push_str(&format!("X'{text}'"));
                    } else {
                        out.push_str(&format!("'{text}'"));
                    }
                }
            },
        }
    }
    out.push(')');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_types_read_back_by_kind() {
        assert_eq!(kind_of("bigint"), Kind::Number);
        assert_eq!(kind_of("decimal"), Kind::Number);
        assert_eq!(kind_of("double"), Kind::Float);
        assert_eq!(kind_of("varchar"), Kind::Bytes);
        assert_eq!(kind_of("binary"), Kind::Bytes);
        assert_eq!(kind_of("mediumtext"), Kind::Bytes);
    }

    #[test]
    fn doubles_print_exactly() {
        for v in [0.1f64, 1.0 / 3.0, 1e300, -2.5e-300, f64::MAX] {
            let text = format!("{v:e}");
            assert_eq!(text.parse::<f64>().unwrap(), v, "{text}");
        }
    }
}
