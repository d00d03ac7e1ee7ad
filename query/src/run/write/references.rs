//! A parent row a DELETE would delete while rows of a child table still
//! refer to it. The cell API has no foreign keys: a row's tombstone hides
//! its child rows with it, and the reverse mirror deletes them from
//! PostgreSQL. PostgreSQL deletes them only where the child table's
//! foreign key says `ON DELETE CASCADE`; with `NO ACTION` or `RESTRICT`
//! (the default) it refuses the DELETE (`23503`), and an app may count on
//! that refusal to keep rows it must not lose (a ledger under its
//! account). Before, the proxy's DELETE in `primary` deleted them.
//!
//! And a child row an INSERT names under a parent that is not there:
//! PostgreSQL's `23503` with the constraint's fields where the INSERT
//! names the parent by its id, and the `NOT NULL` of the key column where
//! it names it by UUID through `(SELECT id FROM parent WHERE uuid = v)`,
//! which PostgreSQL evaluates to NULL.

use legacy::layout::ColumnLayout;

use super::*;

/// A child table's foreign key to the parent, and what it does when a
/// parent row it refers to is deleted, as `pg_constraint.confdeltype`
/// says it.
struct ForeignKey {
    /// The constraint's name.
    name: String,
    /// `a` (no action), `r` (restrict), `c` (cascade), `n` (set null),
    /// `d` (set default).
    action: String,
    /// The child table's and the parent table's names, as PostgreSQL's
    /// message gives them.
    child: String,
    parent: String,
    /// The child table's schema, the parent's key columns the constraint
    /// refers to and the child's columns that refer to them, as
    /// PostgreSQL names them in its details.
    schema: String,
    referenced: String,
    referencing: String,
    /// Whether every referring column is `NOT NULL`.
    not_null: bool,
}

impl<S: CellStore> Writer<'_, S> {
    /// Refuses, before any tombstone is put, a DELETE of parent rows
    /// `deleted` of which one still has child rows (as the facade reads
    /// them) in a table whose foreign key does not cascade: with
    /// PostgreSQL's `23503` where it would refuse the DELETE, or `0A000`
    /// where it would keep the child rows with their key set to NULL or
    /// its default (no cell can hold a child row without its parent). A
    /// child table without a foreign key to the parent loses its rows
    /// with the parent, as the tombstone hides them (docs/proxy.md).
    pub(super) async fn still_referenced(&self, deleted: &[RowKey]) -> Result<(), Refused> {
        let children: Vec<&ColumnLayout> = self
            .layout()
            .columns
            .iter()
            .filter(|c| matches!(c.shape, Shape::Child { .. }))
            .collect();
        if deleted.is_empty() || children.is_empty() {
            return Ok(());
        }
        let keys = foreign_keys(self.eval.legacy, &children).await?;
        for (child, on_delete) in children.iter().zip(keys) {
            let Some(on_delete) = on_delete else {
                continue;
            };
            if on_delete.action == "c" {
                continue;
            }
            // Child rows an earlier statement of the batch inserts or
            // deletes are not in the store yet: which remain is not known.
            if let Some(key) = deleted.iter().find(|k| self.earlier.writes_children_of(k)) {
                return Err(Refused::new(
                    "0A000",
                    format!(
                        "deletes row {} of {}, whose rows of {} an earlier statement of the same \
                         batch writes, while foreign key \"{}\" keeps a row referred to: send \
                         the DELETE on its own",
                        key.uuid(),
                        on_delete.parent,
                        on_delete.child,
                        on_delete.name
                    ),
                )
                .of_row(*key));
            }
            let found = self
                .store
                .get_column_cells(deleted, &child.name, ReadFrom::Master)
                .await
                .map_err(|e| Refused::new("58000", format!("reading the child rows: {e}")))?;
            let Some(referring) = found.first() else {
                continue;
            };
            let key = referring.cell.key.row_key;
            return Err(match on_delete.action.as_str() {
                "a" | "r" => Refused::new(
                    "23503",
                    format!(
                        "update or delete on table \"{}\" violates foreign key constraint \
                         \"{}\" on table \"{}\"",
                        on_delete.parent, on_delete.name, on_delete.child
                    ),
                )
                .with(self.still_referenced_fields(&on_delete, key).await),
                _ => Refused::new(
                    "0A000",
                    format!(
                        "deletes row {} of {}, whose rows of {} foreign key \"{}\" would keep \
                         with their key set to NULL or its default: a child row is a cell of \
                         its parent and cannot outlive it; delete or move the child rows first",
                        key.uuid(),
                        on_delete.parent,
                        on_delete.child,
                        on_delete.name
                    ),
                ),
            }
            .of_row(key));
        }
        Ok(())
    }
}

impl<S: CellStore> Writer<'_, S> {
    /// PostgreSQL's fields of the `23503` refusing the DELETE of row
    /// `key`: the child table, its schema, the constraint and the detail
    /// naming the parent's key (its integer id, where it can be read).
    async fn still_referenced_fields(&self, on_delete: &ForeignKey, key: RowKey) -> Diagnostics {
        let id = super::ids::existing_ids(self.eval.legacy, &[key])
            .await
            .ok()
            .and_then(|ids| ids.get(&key).copied());
        Diagnostics {
            detail: id.map(|id| {
                format!(
                    "Key ({})=({id}) is still referenced from table \"{}\".",
                    on_delete.referenced, on_delete.child
                )
            }),
            schema: Some(on_delete.schema.clone()),
            table: Some(on_delete.child.clone()),
            constraint: Some(on_delete.name.clone()),
        }
    }
}

impl<S: CellStore> Writer<'_, S> {
    /// The refusal of an INSERTed child row whose parent is not there,
    /// as PostgreSQL refuses it: named by its integer id `given` (the
    /// INSERT's expression), the foreign key's `23503` with its fields
    /// and the detail's `Key (…)=(…) is not present in table "…".`;
    /// named by UUID through a subquery, which PostgreSQL evaluates to
    /// NULL, the key column's `23502` where it is `NOT NULL`. A nullable
    /// key would keep a row without its parent, which no cell can hold
    /// (`0A000`). Where the catalog cannot be read, PostgreSQL's code
    /// with a message of ours.
    pub(super) async fn parent_missing(&self, given: Option<&Expr>) -> Refused {
        let table = self.table_name();
        let plain = || {
            Refused::new(
                "23503",
                format!(
                    "insert on table \"{table}\" violates its foreign key to \"{}\": no such \
                     row there",
                    self.layout().table
                ),
            )
        };
        let child = match self.write.table {
            Table::Child(i) => self.layout().columns.get(i),
            Table::Parent => None,
        };
        let Some(key) = (match child {
            Some(child) => foreign_keys(self.eval.legacy, &[child])
                .await
                .ok()
                .and_then(|mut keys| keys.pop().flatten()),
            None => None,
        }) else {
            return plain();
        };
        let Some(given) = given else {
            return if key.not_null {
                Refused::new(
                    "23502",
                    format!(
                        "null value in column \"{}\" of relation \"{}\" violates not-null \
                         constraint",
                        unquote(&key.referencing),
                        key.child
                    ),
                )
                .with(Diagnostics {
                    schema: Some(key.schema.clone()),
                    table: Some(key.child.clone()),
                    ..Diagnostics::default()
                })
            } else {
                Refused::new(
                    "0A000",
                    format!(
                        "inserts a row of {} whose parent in {} is not there: PostgreSQL would \
                         keep it with its key {} NULL, but a child row is a cell of its parent \
                         and cannot be without one",
                        key.child, key.parent, key.referencing
                    ),
                )
            };
        };
        // The id as PostgreSQL prints it in the detail (a bound
        // parameter's too).
        let id = self
            .eval
            .texts(format!("SELECT (CAST(({given}) AS pg_catalog.int8))::text"))
            .await
            .ok()
            .and_then(|texts| texts.into_iter().next().flatten());
        Refused::new(
            "23503",
            format!(
                "insert or update on table \"{}\" violates foreign key constraint \"{}\"",
                key.child, key.name
            ),
        )
        .with(Diagnostics {
            detail: id.map(|id| {
                format!(
                    "Key ({})=({id}) is not present in table \"{}\".",
                    key.referencing, key.parent
                )
            }),
            schema: Some(key.schema.clone()),
            table: Some(key.child.clone()),
            constraint: Some(key.name.clone()),
        })
    }
}

/// The foreign key of each of `children`'s tables to the parent table,
/// if it has one (of several, one that does not cascade, as PostgreSQL
/// refuses the DELETE if any refuses it). Read from the catalog at each
/// DELETE of parent rows: a foreign key may be changed while the proxy
/// runs, and a DELETE is rare beside the reads and writes.
async fn foreign_keys(
    legacy: &LegacyStore,
    children: &[&ColumnLayout],
) -> Result<Vec<Option<ForeignKey>>, Refused> {
    let tables: Vec<&str> = children.iter().map(|c| c.table_sql()).collect();
    type Row = (
        i64,
        String,
        String,
        String,
        String,
        String,
        String,
        String,
        bool,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "/* mezzanine */ SELECT ch.n, c.conname::text, c.confdeltype::text, r.relname::text,
                p.relname::text, rn.nspname::text,
                (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.n)
                 FROM unnest(c.confkey) WITH ORDINALITY AS k(attnum, n)
                 JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.attnum),
                (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.n)
                 FROM unnest(c.conkey) WITH ORDINALITY AS k(attnum, n)
                 JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum),
                (SELECT bool_and(a.attnotnull)
                 FROM pg_attribute a WHERE a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey))
         FROM unnest($1::text[]) WITH ORDINALITY AS ch(t, n)
         JOIN pg_constraint c ON c.contype = 'f' AND c.conrelid = ch.t::regclass
              AND c.confrelid = $2::regclass
         JOIN pg_class r ON r.oid = c.conrelid
         JOIN pg_namespace rn ON rn.oid = r.relnamespace
         JOIN pg_class p ON p.oid = c.confrelid
         ORDER BY ch.n, c.confdeltype = 'c', c.conname",
    )
    .bind(&tables)
    .bind(legacy.layout().table_sql())
    .fetch_all(legacy.pool())
    .await
    .map_err(|e| {
        Refused::new(
            "58000",
            format!("reading the child tables' foreign keys: {e}"),
        )
    })?;
    let mut out: Vec<Option<ForeignKey>> = children.iter().map(|_| None).collect();
    for (n, name, action, child, parent, schema, referenced, referencing, not_null) in rows {
        let slot = &mut out[(n - 1) as usize];
        // Ordered so that a key that does not cascade comes first.
        if slot.is_none() {
            *slot = Some(ForeignKey {
                name,
                action,
                child,
                parent,
                schema,
                referenced,
                referencing,
                not_null,
            });
        }
    }
    Ok(out)
}
