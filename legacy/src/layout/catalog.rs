//! The live schema as the layout reads it: each table's columns with
//! their types (a domain read as its base type, an array as its
//! element's), its unique indexes and its constraints, and what the
//! server must offer for some types (`money`'s locale, the function that
//! prints a composite value).

use std::collections::{BTreeSet, HashMap};

use sqlx::PgPool;

use super::checks::TableChecks;
use crate::conversion;
use crate::error::Error;

/// A table's columns as the catalog has them.
pub(super) struct TableInfo {
    pub(super) columns: HashMap<String, CatalogColumn>,
    /// Column sets of its valid unique indexes (and primary key).
    unique: Vec<BTreeSet<String>>,
    /// What PostgreSQL alone judges of its rows ([`super::checks`]).
    pub(super) checks: TableChecks,
}

/// One column of a table, a domain read as its base type.
pub(super) struct CatalogColumn {
    /// `pg_type.typname` of the type, or of a domain's base type.
    pub(super) typname: String,
    /// `format_type` of the column's own type: `numeric(10,2)`, a
    /// domain's name.
    pub(super) full: String,
    /// The type modifier (`varchar(n)` is n + 4), a domain's own.
    pub(super) modifier: i32,
    /// The type without its modifier.
    pub(super) base: String,
    /// An enum's labels in their order (of a domain's base type, or of
    /// an array's elements, too).
    pub(super) labels: Option<Vec<String>>,
    /// A generated column (`GENERATED ALWAYS AS (...) STORED`).
    pub(super) generated: bool,
    /// An identity column `GENERATED ALWAYS`.
    pub(super) identity_always: bool,
    /// A composite type (of a domain's base type, or of an array's
    /// elements, too).
    pub(super) composite: bool,
}

/// Whether this server's `money` keeps an amount as the layout writes it
/// (`"-1234.56"`, [`crate::conversion::money_fits`]): `lc_monetary` reads
/// the decimal point as `.` and keeps two fraction digits. Under a locale
/// with `,` for the point, `'1234.56'` would be read as 123456, and under
/// one with no fraction digits, `12.5` would be rounded.
pub(super) async fn money_reads_back(pool: &PgPool, column: &str) -> Result<(), Error> {
    let (back, monetary): (String, String) = sqlx::query_as(
        "/* mezzanine */ SELECT ('-1234.56'::pg_catalog.money)::pg_catalog.numeric::text, \
         pg_catalog.current_setting('lc_monetary')",
    )
    .fetch_one(pool)
    .await
    .map_err(|e| Error::postgres("checking how money reads amounts", e))?;
    if back != "-1234.56" {
        return Err(Error::Layout(format!(
            "{column} is money, which the layout keeps only where lc_monetary reads '.' as the \
             decimal point and keeps two fraction digits: under lc_monetary = {monetary:?}, \
             '-1234.56'::money is {back}"
        )));
    }
    Ok(())
}

/// Creates [`conversion::COMPOSITE_TEXT`] unless it is there. Two
/// processes creating it at once may see one fail; then it is there.
///
/// It lives in a schema of its own that every role may use: the proxy
/// evaluates an app's values as the app's own role, which holds no rights
/// on schema `mezzanine` (its tables are Mezzanine's alone). The function
/// only prints the value it is given.
pub(super) async fn composite_text(pool: &PgPool) -> Result<(), Error> {
    let there = || async {
        sqlx::query_scalar::<_, bool>(
            "/* mezzanine */ SELECT to_regprocedure('mezzanine_public.composite_text(anyelement)') IS NOT NULL",
        )
        .fetch_one(pool)
        .await
        .map_err(|e| Error::postgres("looking for mezzanine_public.composite_text", e))
    };
    if there().await? {
        return Ok(());
    }
    let created = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "/* mezzanine */ CREATE SCHEMA IF NOT EXISTS mezzanine_public;
         GRANT USAGE ON SCHEMA mezzanine_public TO PUBLIC; {}",
        conversion::COMPOSITE_TEXT
    )))
    .execute(pool)
    .await;
    match created {
        Ok(_) => Ok(()),
        Err(_) if there().await? => Ok(()),
        Err(e) => Err(Error::postgres(
            "creating mezzanine_public.composite_text, which reads composite values",
            e,
        )),
    }
}

pub(super) async fn table_info(
    pool: &PgPool,
    schema: &str,
    table: &str,
) -> Result<TableInfo, Error> {
    // (name, typname, format_type, modifier, base type, enum labels,
    // generated, identity always, composite)
    type Row = (
        String,
        String,
        String,
        i32,
        String,
        Option<Vec<String>>,
        bool,
        bool,
        bool,
    );
    // A domain is read as its base type, through any number of domains
    // (PostgreSQL's `getBaseTypeAndTypmod`: the modifier is the innermost
    // domain's), and so is an array's element: an array of a domain over
    // `numeric(10,2)` reads as `numeric[]` of that scale. Written values
    // are cast into the column's own type (`format_type` without the
    // modifier), so PostgreSQL checks every domain's constraints.
    let rows: Vec<Row> = sqlx::query_as(
        "/* mezzanine */ SELECT a.attname::text,
                CASE WHEN r.of_array THEN (SELECT x.typname FROM pg_type x WHERE x.oid = bt.typarray)
                     ELSE bt.typname END::text,
                format_type(a.atttypid, a.atttypmod),
                CASE WHEN r.domain THEN r.typmod ELSE a.atttypmod END,
                format_type(a.atttypid, NULL),
                (SELECT array_agg(e.enumlabel::text ORDER BY e.enumsortorder)
                 FROM pg_enum e
                 WHERE e.enumtypid = CASE WHEN bt.typtype = 'e' THEN bt.oid
                                          WHEN bt.typcategory = 'A' THEN bt.typelem END),
                a.attgenerated <> '', a.attidentity = 'a', bt.typtype = 'c'
         FROM pg_attribute a
         JOIN pg_class c ON c.oid = a.attrelid
         JOIN pg_namespace n ON n.oid = c.relnamespace
         JOIN pg_type t ON t.oid = a.atttypid
         -- An array type is its element's `typarray` (not `int2vector`,
         -- which has an element but is no array of it).
         CROSS JOIN LATERAL (
             SELECT coalesce((SELECT e.typarray = t.oid FROM pg_type e WHERE e.oid = t.typelem), false)
                 AS of_array) array_type
         CROSS JOIN LATERAL (
             WITH RECURSIVE chain(oid, typmod, domain) AS (
                 SELECT CASE WHEN array_type.of_array THEN t.typelem ELSE t.oid END, -1, false
                 UNION ALL
                 SELECT d.typbasetype, d.typtypmod, true
                 FROM chain JOIN pg_type d ON d.oid = chain.oid
                 WHERE d.typtype = 'd')
             SELECT chain.oid, chain.typmod, chain.domain, array_type.of_array
             FROM chain JOIN pg_type b ON b.oid = chain.oid
             WHERE b.typtype <> 'd') r
         JOIN pg_type bt ON bt.oid = r.oid
         WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')
           AND a.attnum > 0 AND NOT a.attisdropped",
    )
    .bind(schema)
    .bind(table)
    .fetch_all(pool)
    .await
    .map_err(|e| Error::postgres(format!("reading the columns of {schema}.{table}"), e))?;
    if rows.is_empty() {
        return Err(Error::Layout(format!(
            "table {schema}.{table} does not exist"
        )));
    }
    let unique: Vec<(Vec<String>,)> = sqlx::query_as(
        "/* mezzanine */ SELECT array_agg(a.attname::text)
         FROM pg_index i
         JOIN pg_class c ON c.oid = i.indrelid
         JOIN pg_namespace n ON n.oid = c.relnamespace
         JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
         WHERE n.nspname = $1 AND c.relname = $2
           AND i.indisunique AND i.indisvalid AND i.indpred IS NULL AND i.indexprs IS NULL
         GROUP BY i.indexrelid",
    )
    .bind(schema)
    .bind(table)
    .fetch_all(pool)
    .await
    .map_err(|e| Error::postgres(format!("reading the indexes of {schema}.{table}"), e))?;
    let checks = TableChecks::read(pool, schema, table).await?;
    Ok(TableInfo {
        checks,
        columns: rows
            .into_iter()
            .map(
                |(
                    name,
                    typname,
                    full,
                    modifier,
                    base,
                    labels,
                    generated,
                    identity_always,
                    composite,
                )| {
                    (
                        name,
                        CatalogColumn {
                            typname,
                            full,
                            modifier,
                            base,
                            labels,
                            generated,
                            identity_always,
                            composite,
                        },
                    )
                },
            )
            .collect(),
        unique: unique
            .into_iter()
            .map(|(cols,)| cols.into_iter().collect())
            .collect(),
    })
}

impl TableInfo {
    pub(super) fn column(
        &self,
        table: &str,
        what: &str,
        name: &str,
    ) -> Result<&CatalogColumn, Error> {
        self.columns
            .get(name)
            .ok_or_else(|| Error::Layout(format!("{what}: table {table} has no column {name:?}")))
    }

    pub(super) fn integer(&self, table: &str, what: &str, name: &str) -> Result<(), Error> {
        let c = self.column(table, what, name)?;
        if matches!(c.typname.as_str(), "int2" | "int4" | "int8") {
            Ok(())
        } else {
            Err(Error::Layout(format!(
                "{what}: {table}.{name} is {}, but must be an integer (smallint, integer or bigint)",
                c.full
            )))
        }
    }

    pub(super) fn has_unique(&self, columns: &[&str]) -> bool {
        let want: BTreeSet<String> = columns.iter().map(|c| c.to_string()).collect();
        self.unique.contains(&want)
    }
}
