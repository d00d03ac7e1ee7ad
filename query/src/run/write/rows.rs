//! The rows a write names: an INSERT's proposed row and its conflict,
//! an UPDATE's next version over the latest cells, and their cells.

use super::*;

impl<S: CellStore> Writer<'_, S> {
    /// One INSERTed row, its sequences drawn ([`Writer::draw_all`]): its
    /// values and cells, or `None` when the row exists and ON CONFLICT DO
    /// NOTHING leaves it.
    pub(super) async fn insert(
        &self,
        row: &Inserted,
        conflict: &OnConflict,
        Targets { targets, given, .. }: &Targets,
    ) -> Result<Option<RowWrite>, Refused> {
        let evaluating = async {
            let key = row.key.as_ref().map(ToString::to_string);
            self.evaluate(key.as_deref(), targets, &[], None).await
        };
        // A key written as a literal UUID (a bound parameter) is known
        // before PostgreSQL evaluates it: its latest cells are read
        // meanwhile, one round trip less; used only if the evaluation
        // gives that key.
        let literal = row
            .key
            .as_ref()
            .and_then(super::super::postgres::literal_uuid);
        let (evaluated, early) = match literal {
            Some(uuid) => {
                let guess = RowKey::from(uuid);
                let (evaluated, latest, retired) =
                    futures::join!(evaluating, self.latest(&guess), self.retired(&guess));
                (evaluated, Some((guess, latest, retired)))
            }
            None => (evaluating.await, None),
        };
        let (key, new, _) = evaluated?;
        // Not given, the UUID column's default is the key (the value
        // RETURNING reads too).
        let key = match row.key {
            Some(_) => key,
            None => self
                .cols
                .iter()
                .position(|c| matches!(c.kind, Kind::RowKey))
                .and_then(|i| new.get(i)?.as_str().map(String::from)),
        };
        if let (None, Some(id)) = (&key, &row.parent_id) {
            // Named by an id no parent has: PostgreSQL's foreign key error.
            return Err(self.parent_missing(Some(id)).await);
        }
        let key = row_key(key, &self.key_column(), &self.table_name())?;
        let mut new = self.generate(new).await?;
        if let Table::Child(_) = self.write.table {
            // Its key to the parent, which RETURNING reads: the parent's id.
            self.read_ids(&[key]).await?;
            if let Some(at) = self.cols.iter().position(|c| matches!(c.kind, Kind::Id)) {
                new[at] = self.existing_id(&key).map_or(Value::Null, Value::from);
            }
        }
        // PostgreSQL checks the proposed row before it looks for a
        // conflict: an upsert's too.
        self.check_not_null(&new)?;
        let (latest, retired) = match early {
            Some((guess, latest, retired)) if guess == key => (latest?, retired?),
            _ => {
                let (latest, retired) = futures::join!(self.latest(&key), self.retired(&key));
                (latest?, retired?)
            }
        };
        let exists = latest.iter().any(Option::is_some);
        if let (Table::Child(_), false) = (self.write.table, exists) {
            // No parent row has the key (or it is deleted).
            return match (row.of_parent_found, &row.parent_id) {
                // The SELECT over the parent table finds no row.
                (true, _) => Ok(None),
                (false, id) => Err(self.parent_missing(id.as_ref()).await.of_row(key)),
            };
        }
        if retired && !exists {
            // A deleted row's key: a cell put under it now would be
            // acknowledged and then hidden by the row's tombstone.
            return match conflict {
                OnConflict::Nothing { .. } => Ok(None),
                _ => Err(Refused::new(
                    "23505",
                    format!(
                        "duplicate key value: row {} of {} was deleted, and a deleted row key \
                         is retired (its tombstone hides whatever is written under it): insert \
                         the row under a new UUID",
                        key.uuid(),
                        self.layout().table
                    ),
                )
                .of_row(key)),
            };
        }
        // (A child row's own key, its parent's and its ref key, is
        // checked when its cell is put.)
        if let (Table::Parent, true) = (self.write.table, exists) {
            return match conflict {
                OnConflict::Fail => Err(self.duplicate(&key, None)),
                OnConflict::Nothing { .. } => Ok(None),
                OnConflict::Update { sets, condition } => {
                    let sets = sets
                        .iter()
                        .map(|(name, e)| Ok((name.clone(), excluded(e, self.cols, &new)?)))
                        .collect::<Result<Vec<_>, Refused>>()?;
                    let condition = condition
                        .iter()
                        .map(|c| excluded(c, self.cols, &new))
                        .collect::<Result<Vec<_>, Refused>>()?;
                    // The row keeps its id, which RETURNING reads.
                    self.read_ids(&[key]).await?;
                    self.update(&key, &latest, &sets, &condition).await
                }
            };
        }
        // Each layout column the INSERT gives a value of; given none,
        // every one (PostgreSQL writes the row whole, of defaults).
        let given_of = |column: usize| {
            self.cols.iter().enumerate().any(|(j, d)| {
                given[j] && matches!(d.kind, Kind::RefKey(k) | Kind::Field(k, _) if k == column)
            })
        };
        let none_given = !self
            .cols
            .iter()
            .any(|c| matches!(c.kind, Kind::RefKey(k) if given_of(k)));
        let mut cells = Vec::new();
        for (i, c) in self.cols.iter().enumerate() {
            let Kind::RefKey(column) = c.kind else {
                continue;
            };
            if none_given || given_of(column) {
                cells.push(self.cell(&key, column, i, &new)?);
            }
        }
        Ok(Some((new, cells)))
    }

    /// An UPDATE of row `key`: nothing when it is not there.
    pub(super) async fn update_existing(
        &self,
        key: &RowKey,
        sets: &[(String, Expr)],
        conditions: &[Expr],
    ) -> Result<Option<RowWrite>, Refused> {
        let latest = self.latest(key).await?;
        if latest.iter().all(Option::is_none) {
            return Ok(None);
        }
        self.update(key, &latest, sets, conditions).await
    }

    /// What a DELETE of row `key` (a parent row, or the child rows of
    /// parent `key`) writes: a tombstone per row deleted, with the row's
    /// values, which RETURNING shows.
    pub(super) async fn delete(
        &self,
        key: &RowKey,
        conditions: &[Expr],
    ) -> Result<Vec<RowWrite>, Refused> {
        match self.write.table {
            Table::Parent => Ok(self
                .delete_existing(key, conditions)
                .await?
                .into_iter()
                .collect()),
            Table::Child(_) => self.delete_children(key, conditions).await,
        }
    }

    /// The tombstone of each child row of parent `key` (as the facade
    /// reads them: a deleted parent has none) on which `conditions` hold.
    async fn delete_children(
        &self,
        key: &RowKey,
        conditions: &[Expr],
    ) -> Result<Vec<RowWrite>, Refused> {
        let Some(column) = self.cols.iter().find_map(|c| match c.kind {
            Kind::RefKey(i) => Some(i),
            _ => None,
        }) else {
            return Ok(Vec::new());
        };
        let name = &self.layout().columns[column].name;
        if self.earlier.deletes(key) {
            return Ok(Vec::new());
        }
        let mut children = self
            .store
            .get_column_cells(std::slice::from_ref(key), name, ReadFrom::Master)
            .await
            .map_err(|e| Refused::new("58000", format!("reading the child rows: {e}")))?;
        children.sort_by_key(|s| s.cell.key.ref_key);
        let evaluated = children.iter().map(|stored| async move {
            let mut latest = vec![None; self.layout().columns.len()];
            latest[column] = Some(stored.clone());
            let values = self.base(key, &latest);
            let (_, _, holds) = self.evaluate(None, &[], conditions, Some(&values)).await?;
            let tombstone = schemaless::tombstone::cell_tombstone(
                *key,
                self.eval.legacy.tombstones(),
                name,
                stored.cell.key.ref_key.get(),
            );
            Ok::<_, Refused>(holds.then(|| (values, vec![tombstone])))
        });
        let mut rows = Vec::new();
        for row in futures::future::join_all(evaluated).await {
            rows.extend(row?);
        }
        Ok(rows)
    }

    /// The tombstone of row `key`, if it is there and `conditions` hold
    /// on its latest cells; the row's values are what RETURNING shows.
    async fn delete_existing(
        &self,
        key: &RowKey,
        conditions: &[Expr],
    ) -> Result<Option<RowWrite>, Refused> {
        let latest = self.latest(key).await?;
        if latest.iter().all(Option::is_none) {
            return Ok(None);
        }
        let base = self.base(key, &latest);
        let (_, _, holds) = self.evaluate(None, &[], conditions, Some(&base)).await?;
        if !holds {
            return Ok(None);
        }
        let tombstone = schemaless::tombstone::row_tombstone(*key, self.eval.legacy.tombstones());
        Ok(Some((base, vec![tombstone])))
    }

    /// The row `key`'s values (one per [`Col`]) in its latest cells.
    fn base(&self, key: &RowKey, latest: &[Option<StoredCell>]) -> Vec<Value> {
        self.cols
            .iter()
            .map(|c| match c.kind {
                Kind::RowKey => Value::String(key.uuid().to_string()),
                // An UPDATE's, DELETE's or upsert's RETURNING reads it
                // (a plain INSERT reads no row).
                Kind::Id => self.existing_id(key).map_or(Value::Null, Value::from),
                Kind::RefKey(i) => latest[i]
                    .as_ref()
                    .map_or(Value::Null, |s| Value::from(s.cell.key.ref_key.get())),
                Kind::Field(i, f) => latest[i]
                    .as_ref()
                    .and_then(|s| s.cell.body.fields().get(&f.json).cloned())
                    .unwrap_or(Value::Null),
            })
            .collect()
    }

    /// The next version of an existing row: `sets` evaluated over its
    /// latest cells, if `conditions` hold there.
    async fn update(
        &self,
        key: &RowKey,
        latest: &[Option<StoredCell>],
        sets: &[(String, Expr)],
        conditions: &[Expr],
    ) -> Result<Option<RowWrite>, Refused> {
        let base = self.base(key, latest);
        let mut targets = Vec::new();
        for (name, e) in sets {
            let at = self.position(name).ok_or_else(|| {
                Refused::new(
                    "0A000",
                    format!("sets {name}, which the layout does not map"),
                )
            })?;
            let attr = &self.cols[at].attr;
            if attr.generated || attr.always {
                let what = match attr.generated {
                    true => "a generated column",
                    false => "an identity column defined as GENERATED ALWAYS",
                };
                return Err(Refused::new(
                    "428C9",
                    format!("column \"{name}\" can only be updated to DEFAULT: it is {what}"),
                ));
            }
            targets.push((at, e.to_string()));
        }
        // The conditions first, the SET's values only where they hold:
        // PostgreSQL never evaluates a row's SET where its WHERE fails,
        // so a value that would fail there (`1 / 0`, an out-of-range
        // cast) fails nothing. In one SELECT the values were evaluated
        // anyway, and no `CASE` or `WHERE` can guard them: PostgreSQL
        // folds an expression of constants (the row's values, here)
        // before it runs the query.
        if !conditions.is_empty() {
            let (_, _, holds) = self.evaluate(None, &[], conditions, Some(&base)).await?;
            if !holds {
                return Ok(None);
            }
        }
        let (_, values, _) = self.evaluate(None, &targets, &[], Some(&base)).await?;
        let bumped = &self.write.bumped;
        let before = (!bumped.is_empty()).then(|| base.clone());
        let mut new = base;
        for ((at, _), v) in targets.iter().zip(values) {
            new[*at] = v;
        }
        let mut new = self.generate(new).await?;
        self.check_not_null(&new)?;
        // A version raised only by `capture.bump_version`: a row whose
        // fields of that column come out as they were keeps it, and gets
        // no cell, as capture's trigger leaves an unchanged row.
        if let Some(before) = &before {
            for (i, c) in self.cols.iter().enumerate() {
                if let Kind::RefKey(column) = c.kind {
                    if bumped.contains(&c.sql) && self.same_fields(column, before, &new) {
                        new[i] = before[i].clone();
                    }
                }
            }
        }
        let mut cells = Vec::new();
        for (i, c) in self.cols.iter().enumerate() {
            if let Kind::RefKey(column) = c.kind {
                let kept =
                    bumped.contains(&c.sql) && before.as_ref().is_some_and(|b| b[i] == new[i]);
                if targets.iter().any(|(at, _)| *at == i) && !kept {
                    let cell = self.cell(key, column, i, &new)?;
                    self.past_latest(&cell, latest[column].as_ref(), &c.sql)?;
                    cells.push(cell);
                }
            }
        }
        Ok(Some((new, cells)))
    }

    /// Whether rows `a` and `b` hold the same values in the fields of
    /// layout column `column`.
    fn same_fields(&self, column: usize, a: &[Value], b: &[Value]) -> bool {
        self.cols
            .iter()
            .enumerate()
            .filter(|(_, c)| matches!(c.kind, Kind::Field(of, _) if of == column))
            .all(|(i, _)| a[i] == b[i])
    }

    /// Row `new` with its generated columns computed over the others, as
    /// PostgreSQL computes them on every INSERT and UPDATE (one more
    /// evaluation, only for a table that has them).
    async fn generate(&self, mut new: Vec<Value>) -> Result<Vec<Value>, Refused> {
        let targets: Vec<(usize, String)> = self
            .cols
            .iter()
            .enumerate()
            .filter(|(_, c)| c.attr.generated)
            .map(|(i, c)| (i, c.attr.default.clone().unwrap_or_else(|| "NULL".into())))
            .collect();
        if targets.is_empty() {
            return Ok(new);
        }
        let (_, values, _) = self.evaluate(None, &targets, &[], Some(&new)).await?;
        for ((at, _), v) in targets.iter().zip(values) {
            new[*at] = v;
        }
        Ok(new)
    }

    /// The cell of layout column `column` in row `new` (`at`: its ref
    /// key's position).
    fn cell(&self, key: &RowKey, column: usize, at: usize, new: &[Value]) -> Result<Cell, Refused> {
        let ref_key = new[at].as_i64().ok_or_else(|| {
            Refused::new(
                "23502",
                format!(
                    "null value in column \"{}\" of relation \"{}\" violates not-null \
                     constraint: it is the ref key of Schemaless column {}",
                    self.cols[at].sql,
                    self.table_name(),
                    self.layout().columns[column].name
                ),
            )
        })?;
        let ref_key = RefKey::new(ref_key).map_err(|e| Refused::new("22023", e.to_string()))?;
        let mut body = serde_json::Map::new();
        for (c, v) in self.cols.iter().zip(new) {
            if let Kind::Field(k, f) = c.kind {
                if k == column {
                    body.insert(f.json.clone(), v.clone());
                }
            }
        }
        let body = Body::from_value(Value::Object(body))
            .map_err(|e| Refused::new("22023", e.to_string()))?;
        Ok(Cell::new(
            *key,
            self.layout().columns[column].name.clone(),
            ref_key,
            body,
        ))
    }

    /// The column a row's key is written to: the parent's UUID column,
    /// or a child's key to its parent.
    fn key_column(&self) -> String {
        let layout = self.layout();
        let child = self.cols.iter().find_map(|c| match c.kind {
            Kind::RefKey(i) => match &layout.columns[i].shape {
                Shape::Child { parent_sql } => Some(unquote(parent_sql)),
                Shape::Row => None,
            },
            _ => None,
        });
        child.unwrap_or_else(|| unquote(layout.uuid_sql()))
    }
}

/// The row key evaluated, or PostgreSQL's NOT NULL error for `column`
/// (the UUID column, or a child's key to its parent) of `table`.
fn row_key(text: Option<String>, column: &str, table: &str) -> Result<RowKey, Refused> {
    let text = text.ok_or_else(|| {
        Refused::new(
            "23502",
            format!(
                "null value in column \"{column}\" of relation \"{table}\" violates not-null \
                 constraint: it is the row key"
            ),
        )
    })?;
    text.parse::<uuid::Uuid>()
        .map(RowKey::from)
        .map_err(|e| Refused::new("22P02", format!("{text}: {e}")))
}

/// `e` with every `EXCLUDED.x` replaced by the proposed row's typed
/// value of `x` (`NULL` for a column the layout does not map, which the
/// translator refuses in a DO UPDATE).
fn excluded(e: &Expr, cols: &[Col], proposed: &[Value]) -> Result<Expr, Refused> {
    let mut e = e.clone();
    let mut failed = None;
    let _ = visit_expressions_mut(&mut e, |e| {
        if let Expr::CompoundIdentifier(parts) = e {
            if let [table, column] = parts.as_slice() {
                if folded(table) == "excluded" {
                    let column = folded(column);
                    let typed = match cols.iter().position(|c| c.sql == column) {
                        Some(at) => cols[at].typed(&proposed[at]),
                        None => Ok("NULL".to_string()),
                    };
                    match typed.and_then(|sql| {
                        Parser::new(&PostgreSqlDialect {})
                            .try_with_sql(&sql)
                            .and_then(|mut p| p.parse_expr())
                            .map_err(|e| Refused::new("XX000", e.to_string()))
                    }) {
                        Ok(value) => *e = Expr::Nested(Box::new(value)),
                        Err(err) => {
                            failed = Some(err);
                            return ControlFlow::Break(());
                        }
                    }
                }
            }
        }
        ControlFlow::Continue(())
    });
    match failed {
        Some(err) => Err(err),
        None => Ok(e),
    }
}
