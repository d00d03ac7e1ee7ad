//! The integer ids of the parent rows a write inserts: no cell holds
//! them, so each is reserved for its row in `mezzanine.row_ids` before
//! the row's cells are put (the id the INSERT gives, the one drawn for
//! its RETURNING, or the next of the id's sequence), and the reverse
//! mirror inserts the row under it. An UPDATE's or DELETE's RETURNING
//! reads the ids of the rows it names the same two places.

use super::answer::Staged;
use super::*;

/// Reserves, in `mezzanine.row_ids`, the integer id of each kept row of
/// a parent INSERT that gives one or whose RETURNING reads it (drawn from
/// the column's default, as PostgreSQL would draw it), for the row's key:
/// the reverse mirror inserts the row under it. Committed before any
/// cell is put, so the reverse mirror, which may apply the row at once,
/// finds it; a failure after it leaves an id unused, as a failed INSERT
/// in PostgreSQL leaves its drawn id. A reservation for the same key
/// again (the app retrying a write it was not answered) takes the new id.
/// An id a row of the table has, or another row's reservation, is
/// PostgreSQL's unique violation (`23505`), and nothing is reserved.
pub(super) async fn reserve_ids(
    legacy: &LegacyStore,
    reservations: &[(RowKey, i64)],
) -> Result<(), Refused> {
    if reservations.is_empty() {
        return Ok(());
    }
    let layout = legacy.layout();
    let keys: Vec<uuid::Uuid> = reservations.iter().map(|(k, _)| k.uuid()).collect();
    let ids: Vec<i64> = reservations.iter().map(|(_, id)| *id).collect();
    let sql = format!(
        "/* mezzanine */ WITH taken AS (
             SELECT t.{id}::int8 AS id FROM {table} t WHERE t.{id} = ANY($3::int8[])
             UNION ALL
             SELECT r.id FROM mezzanine.row_ids r
             WHERE r.parent = $1::regclass AND r.id = ANY($3::int8[]) AND r.row_key <> ALL($2::uuid[])
             LIMIT 1),
         reserved AS (
             INSERT INTO mezzanine.row_ids (parent, row_key, id)
             SELECT $1::regclass, k, i FROM unnest($2::uuid[], $3::int8[]) AS u(k, i)
             WHERE NOT EXISTS (SELECT FROM taken)
             ON CONFLICT (parent, row_key) DO UPDATE SET id = EXCLUDED.id, reserved_at = now())
         SELECT id::text FROM taken",
        id = layout.id_sql(),
        table = layout.table_sql(),
    );
    let found: Result<Option<String>, sqlx::Error> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(layout.table_sql())
        .bind(keys)
        .bind(ids)
        .fetch_optional(legacy.pool())
        .await;
    reserved(
        legacy,
        found,
        ("{id} given twice", "reserving the rows' integer ids"),
    )
}

/// Numbers the parent rows `keys` (inserted without an id the statement
/// gives or reads) now, in the order the app inserted them: each is
/// reserved the next value of the id's default (its sequence, drawn by
/// the facade's user, as the reverse mirror would draw it), which the
/// reverse mirror then inserts the row under. Without this the reverse
/// mirror drew each id as it applied the row, shard by shard, so rows
/// inserted one after the other could be numbered the other way round,
/// and an app's `ORDER BY id` no longer said which came first. An id
/// default that draws from no sequence is left to the reverse mirror. A
/// drawn id a row of the table has (an app that gave ids ahead of the
/// sequence) is PostgreSQL's `23505`, nothing reserved.
pub(super) async fn number_rows(
    legacy: &LegacyStore,
    catalog: &Catalog,
    keys: &[RowKey],
) -> Result<(), Refused> {
    if keys.is_empty() {
        return Ok(());
    }
    let layout = legacy.layout();
    let id = unquote(layout.id_sql());
    let default = catalog
        .attribute(legacy, layout.table_sql(), &id)
        .await?
        .default
        .filter(|d| d.to_ascii_lowercase().contains("nextval("));
    let Some(default) = default else {
        return Ok(());
    };
    let keys: Vec<uuid::Uuid> = keys.iter().map(RowKey::uuid).collect();
    let sql = format!(
        "/* mezzanine */ WITH drawn AS (
             SELECT k, ({default})::int8 AS i
             FROM unnest($2::uuid[]) WITH ORDINALITY AS u(k, n) ORDER BY n),
         taken AS (
             SELECT d.i FROM drawn d WHERE EXISTS (SELECT FROM {table} t WHERE t.{id_sql} = d.i)
             LIMIT 1),
         reserved AS (
             INSERT INTO mezzanine.row_ids (parent, row_key, id)
             SELECT $1::regclass, k, i FROM drawn WHERE NOT EXISTS (SELECT FROM taken)
             ON CONFLICT (parent, row_key) DO NOTHING)
         SELECT i::text FROM taken",
        table = layout.table_sql(),
        id_sql = layout.id_sql(),
    );
    let found: Result<Option<String>, sqlx::Error> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(layout.table_sql())
        .bind(keys)
        .fetch_optional(legacy.pool())
        .await;
    reserved(
        legacy,
        found,
        (
            "Key ({id})=(the next value of its sequence) already reserved for another row",
            "numbering the rows inserted",
        ),
    )
}

/// A reservation statement's outcome (`found`: an id a row of the table
/// has), as PostgreSQL would answer the INSERT: the id's unique violation
/// (`23505`), naming the id found, or, when the reservations collided
/// among themselves, saying `twice` (`{id}`: the id column); any other
/// failure `58000`, saying while `doing` what.
fn reserved(
    legacy: &LegacyStore,
    found: Result<Option<String>, sqlx::Error>,
    (twice, doing): (&str, &str),
) -> Result<(), Refused> {
    let layout = legacy.layout();
    let column = unquote(layout.id_sql());
    let duplicate = |what: String| {
        Refused::new(
            "23505",
            format!(
                "duplicate key value violates unique constraint on \"{}\": {what}",
                layout.table
            ),
        )
    };
    match found {
        Ok(None) => Ok(()),
        Ok(Some(id)) => Err(duplicate(format!("Key ({column})=({id}) already exists"))),
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("23505") => {
            Err(duplicate(twice.replace("{id}", &column)))
        }
        Err(e) => Err(Refused::new(
            "58000",
            format!("{doing} (mezzanine.row_ids): {e}"),
        )),
    }
}

/// The integer ids of those of parent rows `keys` that have one: the
/// legacy table's row's, else the row's reservation (a row the proxy
/// inserted that the reverse mirror has not yet). Ids never change: the
/// translator refuses a write of the id column, and the reverse mirror
/// keeps the row's.
pub(super) async fn existing_ids(
    legacy: &LegacyStore,
    keys: &[RowKey],
) -> Result<std::collections::HashMap<RowKey, i64>, Refused> {
    let layout = legacy.layout();
    let uuids: Vec<uuid::Uuid> = keys.iter().map(RowKey::uuid).collect();
    let sql = format!(
        "/* mezzanine */ SELECT t.{uuid}, t.{id}::int8, 0 AS source FROM {table} t
         WHERE t.{uuid} = ANY($2::uuid[])
         UNION ALL
         SELECT r.row_key, r.id, 1 FROM mezzanine.row_ids r
         WHERE r.parent = $1::regclass AND r.row_key = ANY($2::uuid[])
         ORDER BY source DESC",
        uuid = layout.uuid_sql(),
        id = layout.id_sql(),
        table = layout.table_sql(),
    );
    let found: Vec<(uuid::Uuid, i64, i32)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(layout.table_sql())
        .bind(uuids)
        .fetch_all(legacy.pool())
        .await
        .map_err(|e| {
            Refused::new(
                "58000",
                format!("reading the rows' integer ids for RETURNING: {e}"),
            )
        })?;
    // The table's row last, so it wins over a reservation left behind.
    Ok(found
        .into_iter()
        .map(|(key, id, _)| (RowKey::from(key), id))
        .collect())
}

impl<S: CellStore> Writer<'_, S> {
    /// Reads the integer ids of the existing rows `keys` an UPDATE,
    /// DELETE or upsert names, where its RETURNING reads them
    /// ([`Write::reads_ids`]).
    pub(super) async fn read_ids(&self, keys: &[RowKey]) -> Result<(), Refused> {
        if !self.write.reads_ids || keys.is_empty() {
            return Ok(());
        }
        let ids = existing_ids(self.eval.legacy, keys).await?;
        self.ids
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(ids);
        Ok(())
    }

    /// The integer id of existing row `key`, if [`Writer::read_ids`]
    /// read one.
    pub(super) fn existing_id(&self, key: &RowKey) -> Option<i64> {
        self.ids
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(key)
            .copied()
    }

    /// Refuses, before any cell is put, a statement whose RETURNING reads
    /// the integer id of a row written that has none: one written through
    /// the cell API that the reverse mirror has not inserted into the
    /// legacy table (in `schemaless`, none is ever inserted).
    pub(super) fn ids_known(&self, rows: &[Vec<Value>]) -> Result<(), Refused> {
        let (true, Some(at)) = (
            self.write.reads_ids,
            self.cols.iter().position(|c| matches!(c.kind, Kind::Id)),
        ) else {
            return Ok(());
        };
        let Some(row) = rows.iter().find(|row| row[at].is_null()) else {
            return Ok(());
        };
        // A child row's is its parent's, whose key the row does not hold.
        let which = match self
            .cols
            .iter()
            .position(|c| matches!(c.kind, Kind::RowKey))
        {
            Some(key) => format!("of row {}", row[key].as_str().unwrap_or_default()),
            None => "of a child row's parent".to_string(),
        };
        Err(Refused::new(
            "0A000",
            format!(
                "RETURNING reads the integer id {which}, which has none yet: it was written \
                 through the cell API and the reverse mirror has not inserted it into {} \
                 (nothing was written; return the UUID instead)",
                self.layout().table_sql()
            ),
        ))
    }

    /// The (row key, integer id) of each kept row of `rows` the
    /// statement inserts, where it reserves ids: an upsert's row that
    /// existed keeps its own ([`Writer::existing_id`]).
    pub(super) fn reservations(
        &self,
        rows: &[Vec<Value>],
        staged: &Staged,
    ) -> Result<Vec<(RowKey, i64)>, Refused> {
        if !self.write.reserves_ids {
            // An UPDATE's or DELETE's ids are the rows' own.
            return Ok(Vec::new());
        }
        let at = |kind: fn(&Kind) -> bool| self.cols.iter().position(|c| kind(&c.kind));
        let (Some(key), Some(id)) = (
            at(|k| matches!(k, Kind::RowKey)),
            at(|k| matches!(k, Kind::Id)),
        ) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for (row, _) in rows.iter().zip(staged.kept()).filter(|(_, &kept)| kept) {
            let key = row[key]
                .as_str()
                .and_then(|k| k.parse::<uuid::Uuid>().ok())
                .map(RowKey::from);
            match (key, row[id].as_i64()) {
                (Some(key), Some(_)) if self.existing_id(&key).is_some() => {}
                (Some(key), Some(id)) => out.push((key, id)),
                _ => {
                    return Err(Refused::new(
                        "XX000",
                        format!("a row inserted without its key or id: {:?}", row),
                    ))
                }
            }
        }
        Ok(out)
    }

    /// The keys of the kept rows of `rows` that [`number_rows`] numbers:
    /// a parent INSERT's, where the statement reserves no ids of its own
    /// and updates no existing row (an upsert's row may be one).
    pub(super) fn unnumbered(&self, rows: &[Vec<Value>], staged: &Staged) -> Vec<RowKey> {
        let inserts = self.write.table == Table::Parent
            && matches!(&self.write.rows, Rows::Insert { conflict, .. }
                if !matches!(conflict, OnConflict::Update { .. }));
        let key = self
            .cols
            .iter()
            .position(|c| matches!(c.kind, Kind::RowKey));
        let (true, false, Some(key)) = (inserts, self.write.reserves_ids, key) else {
            return Vec::new();
        };
        rows.iter()
            .zip(staged.kept())
            .filter(|(_, &kept)| kept)
            .filter_map(|(row, _)| row[key].as_str()?.parse::<uuid::Uuid>().ok())
            .map(RowKey::from)
            .collect()
    }
}
