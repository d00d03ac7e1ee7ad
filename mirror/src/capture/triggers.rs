//! `capture.method = "triggers"`: the trigger functions that make
//! PostgreSQL record every change to the layout's tables, generated from
//! the layout ([`plan`]); [`super::install`] installs them.
//!
//! Each table of the layout gets one `AFTER INSERT OR UPDATE OR DELETE`
//! row trigger and one `AFTER TRUNCATE` statement trigger. What they
//! record in `mezzanine.capture_queue`, in the same transaction as the
//! change:
//!
//! - the parent table: per row column whose version, fields or row key
//!   changed, the parent id and row key (`w`); a deleted parent, or a
//!   parent whose row key changed, as the deletion of its old row key
//!   (`d`);
//! - a child table: the (parent id, ref key) of each child row inserted or
//!   whose fields changed (`w`), and of each one deleted or moved to
//!   another address (`d`);
//! - a truncated table (`t`).
//!
//! An update that changes no mapped field (an `updated_at`, a counter the
//! layout does not map) records nothing. The functions are generated from
//! the resolved layout, and skip a transaction that set
//! `mezzanine.capture = 'skip'` ([`legacy::store::CAPTURE_SETTING`]: the
//! facade's outbox already carries it).
//!
//! **Why row triggers, and plain ones.** Measured with `mezzanine bench
//! capture` on an app's mix of single-row writes, what a trigger costs is
//! its PL/pgSQL call and the queue row itself (heap and WAL; the queue has
//! no key, which cost another tenth); the
//! first version, statement triggers with transition tables and one
//! set-based `INSERT ... SELECT` each, cost a write about 45% at
//! saturation against about 20% for these row triggers (transition tables
//! are built for every statement, and the set-based query is planned with
//! anti-joins even for one row). A bulk statement pays one small insert
//! per row either way. Values are compared natively, except floats,
//! `json` and an unconstrained `numeric` (as text: `-0` is not `0` in
//! JSON, `json` has no equality, and `0.10` is not `0.1` in a cell).
//!
//! **Privileges.** The capture functions are `SECURITY DEFINER`, owned by
//! the installer, so that the app's roles need no rights on schema
//! `mezzanine`. Instead of a per-call `SET search_path` (a measurable cost
//! on every write) every name they use is schema-qualified, types and
//! functions included, so that nothing the invoking role creates (in
//! `pg_temp` or elsewhere) can stand in for them.
//!
//! With `capture.bump_version`, the parent table also gets a `BEFORE
//! UPDATE` row trigger raising a row column's version by one when mapped
//! fields changed and the writer left the version as it was.

use config::ColumnKind;
use legacy::conversion::{Conversion, Element};
use legacy::layout::{quote, ColumnLayout, Layout};
use legacy::store::CAPTURE_SETTING;

/// The row trigger capture puts on every app table of the layout.
pub const ROW_TRIGGER: &str = "mezzanine_capture";

/// The statement trigger recording a `TRUNCATE`.
pub const TRUNCATE_TRIGGER: &str = "mezzanine_capture_truncate";

/// The `BEFORE UPDATE` trigger of `capture.bump_version`.
pub const BUMP_TRIGGER: &str = "mezzanine_bump_version";

/// One app table of the layout and what capture puts on it.
#[derive(Clone, Debug)]
pub struct TablePlan {
    /// `schema.table`, for messages.
    pub name: String,
    /// Quoted and schema-qualified.
    pub table_sql: String,
    /// The triggers.
    pub(crate) triggers: Vec<TriggerPlan>,
}

/// One trigger and its function.
#[derive(Clone, Debug)]
pub(crate) struct TriggerPlan {
    /// The trigger's name.
    pub(crate) trigger: String,
    /// The function's qualified name.
    pub(crate) function: String,
    /// `CREATE OR REPLACE FUNCTION` (with its fingerprint comment) and
    /// `CREATE OR REPLACE TRIGGER`.
    pub(crate) sql: String,
    /// A hash of the function's text, kept in its comment.
    pub(crate) fingerprint: String,
}

/// What `capture install` puts on every table of `layout`.
pub fn plan(layout: &Layout, bump_version: bool) -> Vec<TablePlan> {
    let mut tables = vec![parent_plan(layout, bump_version)];
    // A child table may carry several layout columns.
    let mut children: Vec<(&str, Vec<(&ColumnLayout, &str)>)> = Vec::new();
    for (column, parent) in layout.children() {
        match children.iter_mut().find(|(t, _)| *t == column.table_sql()) {
            Some((_, columns)) => columns.push((column, parent)),
            None => children.push((column.table_sql(), vec![(column, parent)])),
        }
    }
    for (_, columns) in children {
        tables.push(child_plan(layout, &columns));
    }
    tables
}

/// A function's name: its kind, a hash of the table it belongs to (names
/// of any length fit PostgreSQL's 63 bytes), and what it handles.
fn function_name(kind: &str, table_sql: &str, what: &str) -> String {
    format!(
        "mezzanine.{}",
        quote(&format!(
            "{kind}_{:016x}_{what}",
            schemaless::routing::fnv1a64(table_sql.as_bytes())
        ))
    )
}

/// The value of a field as compared to tell whether it changed: natively,
/// but floats, `json`/`jsonb`, `interval` and an unconstrained `numeric`
/// as text (`1.50` and `1.5` are equal numbers but different values here,
/// as `1 day` and `24 hours` are equal intervals; arrays of them
/// likewise; a `numeric(p,s)` prints one scale), geometric values and their
/// arrays as text (a `point` or a `path` has no `=`, so a row comparison
/// of one fails, as a `json[]`'s does;
/// a `box`'s or a `circle`'s `=` compares areas, so a moved box would be
/// no change), and text of any kind byte
/// for byte (`COLLATE "C"`): a `citext`, or a column of a
/// nondeterministic collation, finds `Bob` equal to `bob`, and a change of
/// case is a change of the value Schemaless keeps. An `xml` (no `=`) is
/// compared as the text stored, an `xml[]` element by element. A
/// composite value (and its arrays) as its text: its `=` compares its
/// fields by their own `=` (`1.50` equal to `1.5`), or fails for a field
/// with none.
fn compared(record: &str, column: &str, conversion: Option<Conversion>) -> String {
    match conversion {
        Some(
            Conversion::Float4
            | Conversion::Float8
            | Conversion::UnconstrainedNumeric
            | Conversion::Json
            | Conversion::Jsonb
            | Conversion::Interval
            | Conversion::Geometric(_)
            | Conversion::Xml
            | Conversion::Record
            | Conversion::Text
            | Conversion::Char
            | Conversion::Enum
            | Conversion::TextArray
            | Conversion::ArrayOf(
                Element::Float4
                | Element::Float8
                | Element::UnconstrainedNumeric
                | Element::Interval
                | Element::Json
                | Element::Jsonb
                | Element::Geometric(_)
                | Element::Record,
            ),
        ) => {
            format!("({record}.{column})::pg_catalog.text COLLATE \"C\"")
        }
        // Element by element, each as stored: an `xml[]`'s text prints
        // its elements as `xml_out` rewrites their declarations.
        Some(Conversion::ArrayOf(Element::Xml)) => format!(
            "CASE WHEN {record}.{column} IS NOT NULL THEN ARRAY(
                 SELECT u.e::pg_catalog.text FROM unnest({record}.{column}) WITH ORDINALITY AS u(e, n)
                 ORDER BY u.n) END"
        ),
        _ => format!("{record}.{column}"),
    }
}

/// `ROW(NEW.a, …) IS DISTINCT FROM ROW(OLD.a, …)` over `columns` (quoted
/// name and conversion; key columns have none).
fn changed(columns: &[(String, Option<Conversion>)]) -> String {
    let side = |record: &str| {
        columns
            .iter()
            .map(|(c, conversion)| compared(record, c, *conversion))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!("ROW({}) IS DISTINCT FROM ROW({})", side("NEW"), side("OLD"))
}

fn fields(column: &ColumnLayout) -> impl Iterator<Item = (String, Option<Conversion>)> + '_ {
    column
        .fields
        .iter()
        .map(|f| (quote(&f.sql), Some(f.conversion)))
}

fn key(column: &str) -> (String, Option<Conversion>) {
    (column.to_string(), None)
}

/// One queue row: `column` is a quoted literal or `NULL`.
fn enqueue(column: &str, parent_id: &str, row_key: &str, ref_key: &str, op: char) -> String {
    format!(
        "/* mezzanine */ INSERT INTO mezzanine.capture_queue (column_name, parent_id, row_key, ref_key, op)
      VALUES ({column}, {parent_id}::pg_catalog.int8, {row_key}, {ref_key}::pg_catalog.int8, '{op}');"
    )
}

/// A capture function's body: skip a transaction the facade marked, else
/// `record`.
fn capture_body(record: &str, returns: &str) -> String {
    format!(
        "BEGIN
  IF pg_catalog.current_setting('{CAPTURE_SETTING}', true) OPERATOR(pg_catalog.=) 'skip' THEN RETURN {returns}; END IF;
{record}
  RETURN {returns};
END"
    )
}

/// A trigger on `table_sql` firing `events` (`AFTER INSERT OR …`) `each`
/// (`ROW` or `STATEMENT`), and its function.
fn trigger_plan(
    table_sql: &str,
    trigger: &str,
    function: String,
    body: String,
    (events, each): (&str, &str),
) -> TriggerPlan {
    let fingerprint = format!(
        "{:016x}",
        schemaless::routing::fnv1a64(format!("{table_sql}\n{events} {each}\n{body}").as_bytes())
    );
    // The bump trigger only changes NEW: it runs as the writer.
    let security = if trigger == BUMP_TRIGGER {
        ""
    } else {
        " SECURITY DEFINER"
    };
    let sql = format!(
        "CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql{security} AS $mezzanine$
{body}
$mezzanine$;
COMMENT ON FUNCTION {function}() IS 'mezzanine capture {fingerprint}';
CREATE OR REPLACE TRIGGER {trigger} {events} ON {table_sql} FOR EACH {each} EXECUTE FUNCTION {function}();",
        trigger = quote(trigger),
    );
    TriggerPlan {
        trigger: trigger.to_string(),
        function,
        sql,
        fingerprint,
    }
}

/// The row trigger and the truncate trigger of a table.
fn capture_triggers(table_sql: &str, record: &str, truncated: &str) -> Vec<TriggerPlan> {
    vec![
        trigger_plan(
            table_sql,
            ROW_TRIGGER,
            function_name("capture", table_sql, "row"),
            capture_body(record, "NULL"),
            ("AFTER INSERT OR UPDATE OR DELETE", "ROW"),
        ),
        trigger_plan(
            table_sql,
            TRUNCATE_TRIGGER,
            function_name("capture", table_sql, "truncate"),
            capture_body(truncated, "NULL"),
            ("AFTER TRUNCATE", "STATEMENT"),
        ),
    ]
}

fn parent_plan(layout: &Layout, bump_version: bool) -> TablePlan {
    let (id, uuid) = (layout.id_sql(), layout.uuid_sql());
    let row_columns: Vec<&ColumnLayout> = layout
        .columns
        .iter()
        .filter(|c| c.kind() == ColumnKind::Row)
        .collect();
    let old_row_key_gone = enqueue(
        "NULL",
        &format!("OLD.{id}"),
        &format!("OLD.{uuid}"),
        "NULL",
        'd',
    );
    let mut record = format!(
        "  IF TG_OP OPERATOR(pg_catalog.=) 'DELETE' THEN
    IF OLD.{uuid} IS NOT NULL THEN
      {old_row_key_gone}
    END IF;
    RETURN NULL;
  END IF;
  IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' AND OLD.{uuid} IS NOT NULL AND OLD.{uuid} IS DISTINCT FROM NEW.{uuid} THEN
    {old_row_key_gone}
  END IF;"
    );
    for column in &row_columns {
        let v = column.ref_key_sql();
        let mut compared = vec![key(uuid), key(id), key(v)];
        compared.extend(fields(column));
        record.push_str(&format!(
            "
  IF NEW.{v} IS NOT NULL AND (TG_OP OPERATOR(pg_catalog.=) 'INSERT' OR {changed}) THEN
    {write}
  END IF;",
            changed = changed(&compared),
            write = enqueue(
                &format!("'{}'", column.name.as_str()),
                &format!("NEW.{id}"),
                &format!("NEW.{uuid}"),
                "NULL",
                'w'
            ),
        ));
    }
    let truncated = format!("  {}", enqueue("NULL", "NULL", "NULL", "NULL", 't'));
    let table_sql = layout.table_sql();
    let mut triggers = capture_triggers(table_sql, &record, &truncated);
    if bump_version && !row_columns.is_empty() {
        triggers.push(trigger_plan(
            table_sql,
            BUMP_TRIGGER,
            function_name("bump", table_sql, "row"),
            bump_body(&row_columns),
            ("BEFORE UPDATE", "ROW"),
        ));
    }
    TablePlan {
        name: format!("{}.{}", layout.schema, layout.table),
        table_sql: table_sql.to_string(),
        triggers,
    }
}

/// `capture.bump_version`: per row column, a version left as it was while
/// mapped fields changed is raised by one.
fn bump_body(row_columns: &[&ColumnLayout]) -> String {
    let mut record = String::new();
    for column in row_columns {
        let v = column.ref_key_sql();
        let fields: Vec<_> = fields(column).collect();
        record.push_str(&format!(
            "  IF NEW.{v} IS NOT DISTINCT FROM OLD.{v} AND OLD.{v} IS NOT NULL AND {changed} THEN
    NEW.{v} := OLD.{v} OPERATOR(pg_catalog.+) 1;
  END IF;
",
            changed = changed(&fields),
        ));
    }
    capture_body(record.trim_end(), "NEW")
}

/// The capture plan of one child table; `columns` are its layout columns,
/// each with its key to the parent id.
fn child_plan(layout: &Layout, columns: &[(&ColumnLayout, &str)]) -> TablePlan {
    let first = columns[0].0;
    let table_sql = first.table_sql();
    let mut record = String::new();
    let mut truncated = String::new();
    for &(column, p) in columns {
        let r = column.ref_key_sql();
        let name = format!("'{}'", column.name.as_str());
        let mut compared = vec![key(p), key(r)];
        compared.extend(fields(column));
        record.push_str(&format!(
            "  IF TG_OP OPERATOR(pg_catalog.<>) 'INSERT' AND OLD.{p} IS NOT NULL AND OLD.{r} IS NOT NULL
     AND (TG_OP OPERATOR(pg_catalog.=) 'DELETE' OR {moved}) THEN
    {gone}
  END IF;
  IF TG_OP OPERATOR(pg_catalog.<>) 'DELETE' AND NEW.{p} IS NOT NULL AND NEW.{r} IS NOT NULL
     AND (TG_OP OPERATOR(pg_catalog.=) 'INSERT' OR {changed}) THEN
    {write}
  END IF;
",
            moved = changed(&[key(p), key(r)]),
            gone = enqueue(&name, &format!("OLD.{p}"), "NULL", &format!("OLD.{r}"), 'd'),
            changed = changed(&compared),
            write = enqueue(&name, &format!("NEW.{p}"), "NULL", &format!("NEW.{r}"), 'w'),
        ));
        truncated.push_str(&format!(
            "  {}\n",
            enqueue(&name, "NULL", "NULL", "NULL", 't')
        ));
    }
    TablePlan {
        name: format!("{}.{}", layout.schema, first.table),
        table_sql: table_sql.to_string(),
        triggers: capture_triggers(table_sql, record.trim_end(), truncated.trim_end()),
    }
}
