//! One JSON field of a layout column and the SQL column behind it: what
//! a value written for it must be to fit that column (its conversion,
//! length limit, enum labels, digits kept).

use serde_json::Value;

use crate::conversion::{self, Conversion};

/// One JSON field of a column and the SQL column behind it.
#[derive(Clone, Debug)]
pub struct Field {
    /// The body's field name.
    pub json: String,
    /// The SQL column.
    pub sql: String,
    /// How its type converts.
    pub conversion: Conversion,
    /// The column's exact type (`numeric(10,2)`), which written values are
    /// cast to.
    pub sql_type: String,
    /// The column's type as the catalog names it (`pg_type.typname`:
    /// `numeric`, `_int4`; a domain's base type's), whatever
    /// [`Field::conversion`] says: the strict check of `verify full`
    /// decides by it alone.
    pub typname: String,
    /// The type without its modifier (`numeric`, `character varying`,
    /// `integer[]`).
    pub base_type: String,
    /// The type's modifier (`atttypmod`, a domain's `typtypmod`; -1 for
    /// none): a `numeric` with one has a fixed scale.
    pub typmod: i32,
    /// The length limit of a `varchar(n)` or `character(n)`, checked
    /// before writing so the error can name the field.
    pub max_chars: Option<usize>,
    /// An enum's labels, as the catalog had them when the layout was
    /// read (a label added since is refused until the process reads the
    /// layout again).
    pub labels: Option<Vec<String>>,
    /// A generated column: PostgreSQL computes it from the row's other
    /// columns. It is read like any field, never written: a cell whose
    /// value is not what PostgreSQL computes is refused by the write's
    /// read-back, naming the value PostgreSQL would keep.
    pub generated: bool,
    /// An identity column `GENERATED ALWAYS`: a new row is inserted with
    /// the cell's value (`OVERRIDING SYSTEM VALUE`), an update leaves it
    /// as it is (PostgreSQL refuses to change it), and the read-back
    /// refuses a cell that says otherwise.
    pub identity_always: bool,
    /// `NOT NULL`: a cell with it null is refused before a write that
    /// reaches PostgreSQL only later (see [`super::Checks`]).
    pub not_null: bool,
    /// `layout.json_null = "sql_null"`: a `json`/`jsonb` value that is
    /// JSON `null` in this column, which allows SQL NULL, is read as SQL
    /// NULL instead of refused (see [`Field::render`]).
    pub json_null_as_sql_null: bool,
}

impl Field {
    /// A JSON value written for this field: its canonical form and the
    /// text cast into the column (`None` for NULL), checked as far as the
    /// column's type goes without asking PostgreSQL: the conversion, a
    /// length limit, an enum's labels, the digits a `numeric(p,s)` or a
    /// `timestamp(p)` keeps (a value PostgreSQL would round is refused,
    /// as the legacy store refuses a write that reads back otherwise, so
    /// Schemaless never takes a value the legacy column cannot hold).
    /// What only PostgreSQL knows (a domain's or the table's CHECK
    /// constraints) is checked where the value is cast into the column.
    pub fn accept(&self, value: &Value) -> Result<(Value, Option<String>), String> {
        if value.is_null() && self.null_is_json() {
            return Ok((Value::Null, Some("null".into())));
        }
        let (canonical, param) = self.conversion.accept(value)?;
        match (&canonical, self.conversion) {
            (Value::Array(_), conversion) => {
                // Canonical, so rectangular; a `json[]`'s are its items.
                let dims = conversion::dims::dimensions(&canonical, !conversion.dimensional())?;
                let items = conversion::dims::leaves(&canonical, &dims);
                if let Conversion::ArrayOf(element) = conversion {
                    for (i, item) in items.iter().enumerate() {
                        if let Value::String(text) = item {
                            self.check(element.scalar(), text).map_err(|e| {
                                format!("{}: {e}", conversion::dims::position(&dims, i))
                            })?;
                        }
                    }
                }
                match self.fitted_elements(&dims, &items)? {
                    Some(cut) => self.conversion.accept(&cut),
                    None => Ok((canonical, param)),
                }
            }
            (Value::String(text), conversion) => {
                self.check(conversion, text)?;
                match self.fitted(text)? {
                    Some(cut) => Ok((Value::String(cut.clone()), Some(cut))),
                    None => Ok((canonical, param)),
                }
            }
            _ => Ok((canonical, param)),
        }
    }

    /// Whether a `null` of this field is JSON's `null` rather than SQL
    /// NULL: a `json` or `jsonb` column that is `NOT NULL` cannot hold
    /// SQL NULL, so the one `null` a cell has means the JSON value there
    /// (as Django's `JSONField(null=False)` stores `None`). Elsewhere the
    /// two read alike (the NULL rule of [`crate::conversion`]).
    pub fn null_is_json(&self) -> bool {
        self.not_null && matches!(self.conversion, Conversion::Json | Conversion::Jsonb)
    }

    /// The JSON value of this field's stored text, as
    /// [`Conversion::read_expr`] reads it (`None`: SQL NULL). A cell has
    /// one `null`: in a `json`/`jsonb` column that allows SQL NULL it is
    /// SQL NULL, so a value there that is JSON `null` would come back as
    /// the other one. It is refused, naming the choices, unless the
    /// layout says the app never tells the two apart
    /// (`layout.json_null = "sql_null"`). In a `NOT NULL` column it can
    /// only be JSON's, and is read as it is ([`Field::null_is_json`]). An
    /// element of a `json[]`/`jsonb[]` that is JSON `null` is refused
    /// alike (an SQL NULL element is what a cell's `null` element means).
    pub fn render(&self, text: Option<String>) -> Result<Value, String> {
        let stored = text.is_some();
        if let (Some(text), false) = (&text, self.json_null_as_sql_null) {
            json_null_element(self.conversion, text)?;
        }
        let value = self.conversion.render_owned(text)?;
        if stored
            && value.is_null()
            && !self.not_null
            && !self.json_null_as_sql_null
            && matches!(self.conversion, Conversion::Json | Conversion::Jsonb)
        {
            return Err(format!(
                "a {} value that is JSON null, in a column that allows SQL NULL: a cell has one \
                 null, which is SQL NULL there, so the value would come back as SQL NULL. Store \
                 SQL NULL instead, make the column NOT NULL, or set layout.json_null = \
                 \"sql_null\" if the app never tells the two apart",
                self.base_type
            ));
        }
        Ok(value)
    }

    /// The text a canonical value (one Schemaless holds) is cast from
    /// into the column (`None`: SQL NULL), as [`Field::accept`] writes
    /// it, without the checks of a value written.
    pub fn text_of(&self, value: &Value) -> Result<Option<String>, String> {
        if value.is_null() && self.null_is_json() {
            return Ok(Some("null".into()));
        }
        Ok(self.conversion.accept(value)?.1)
    }

    /// The checks of a canonical text value (or array element) of
    /// `conversion` that need the field: an enum's labels, the digits a
    /// `numeric(p,s)`, a `timestamp(p)`, a `time(p)` or a `timetz(p)` keeps, the fields
    /// and digits an `interval` column keeps, the bits a `bit(n)` or
    /// `bit varying(n)` holds.
    fn check(&self, conversion: Conversion, text: &str) -> Result<(), String> {
        if let (Conversion::Enum, Some(labels)) = (conversion, &self.labels) {
            if !labels.iter().any(|l| l == text) {
                return Err(format!(
                    "{text:?} is not a label of the enum (its labels: {})",
                    labels.join(", ")
                ));
            }
        }
        match conversion {
            Conversion::Numeric => conversion::numeric_fits(text, self.typmod),
            Conversion::Timestamp | Conversion::Timestamptz => {
                conversion::timestamp_fits(text, self.typmod)
            }
            Conversion::Time => crate::duration::time_fits(text, self.typmod),
            Conversion::Timetz => crate::zoned::timetz_fits(text, self.typmod),
            Conversion::Interval => crate::duration::Interval::parse(text)?.fits(self.typmod, text),
            // An array's type name is its element's with a `_`.
            Conversion::Bit => {
                crate::bits::bits_fit(text, self.typname.trim_start_matches('_'), self.typmod)
            }
            _ => Ok(()),
        }
    }

    /// Whether the canonical value, cast into the column's type, gives
    /// back the text PostgreSQL sends for the stored value. Not for a
    /// `numrange` or `nummultirange` (its bounds are unconstrained
    /// numerics, kept as values: `1.50` as `1.5`) or a `json` (its spacing
    /// and key order are not kept), nor arrays of them: Schemaless keeps
    /// their value. A `numeric(p,s)`, or a domain over one, gets its
    /// scale back from the cast; an unconstrained `numeric` is kept with
    /// its own ([`Conversion::UnconstrainedNumeric`]).
    pub fn keeps_text(&self) -> bool {
        match self.conversion {
            Conversion::Json | Conversion::ArrayOf(conversion::Element::Json) => false,
            // Its bounds are unconstrained numerics.
            Conversion::Range(crate::range::Subtype::Numeric)
            | Conversion::Multirange(crate::range::Subtype::Numeric)
            | Conversion::ArrayOf(
                conversion::Element::Range(crate::range::Subtype::Numeric)
                | conversion::Element::Multirange(crate::range::Subtype::Numeric),
            ) => false,
            _ => true,
        }
    }

    /// An array's elements (`items`, of an array of dimensions `dims`) in
    /// the length limit of a `varchar(n)[]` or `character(n)[]`
    /// (PostgreSQL fits each element it assigns as it fits a scalar):
    /// `None` when all fit as they are, the array with the cut ones when
    /// only spaces were over; an error naming the first element over it.
    pub fn fitted_elements(
        &self,
        dims: &[usize],
        items: &[&Value],
    ) -> Result<Option<Value>, String> {
        let mut cut: Option<Vec<Value>> = None;
        for (i, item) in items.iter().enumerate() {
            let Value::String(text) = item else {
                continue;
            };
            let fits = self
                .fitted(text)
                .map_err(|e| format!("{} {e}", conversion::dims::position(dims, i)))?;
            if let Some(fits) = fits {
                cut.get_or_insert_with(|| items.iter().map(|v| (*v).clone()).collect())[i] =
                    Value::String(fits);
            }
        }
        Ok(cut.map(|flat| conversion::dims::nest(dims, flat)))
    }

    /// `text` in the column's length limit, as PostgreSQL fits a value
    /// it assigns: `None` when it fits as it is; cut to the limit when
    /// only spaces are over it (`'ab   '` into `varchar(3)` is `'ab '`);
    /// an error when more is. A `character(n)`'s canonical text has no
    /// trailing spaces to cut.
    pub fn fitted(&self, text: &str) -> Result<Option<String>, String> {
        let Some(max) = self.max_chars else {
            return Ok(None);
        };
        let chars = text.chars().count();
        if chars <= max {
            return Ok(None);
        }
        let (at, _) = text.char_indices().nth(max).unwrap_or((text.len(), ' '));
        if text[at..].bytes().all(|b| b == b' ') {
            return Ok(Some(text[..at].to_string()));
        }
        Err(format!("is {chars} characters, over the {max} it holds"))
    }
}

/// Refuses a `json[]`/`jsonb[]` read (`text`, its elements each as their
/// text) with an element that is JSON `null`: a cell's array has one
/// `null` element, which is SQL NULL, so it would come back as SQL NULL.
fn json_null_element(conversion: Conversion, text: &str) -> Result<(), String> {
    use crate::conversion::Element;
    if !matches!(
        conversion,
        Conversion::ArrayOf(Element::Json | Element::Jsonb)
    ) {
        return Ok(());
    }
    let Ok(Value::Array(elements)) = serde_json::from_str::<Value>(text) else {
        // Not a flat array's text: the conversion refuses it.
        return Ok(());
    };
    match elements
        .iter()
        .position(|e| matches!(e, Value::String(t) if t.trim() == "null"))
    {
        None => Ok(()),
        Some(i) => Err(format!(
            "element {}: a value that is JSON null, where a cell's array has one null \
             element, which is SQL NULL, so the value would come back as SQL NULL. Store \
             SQL NULL instead, or set layout.json_null = \"sql_null\" if the app never \
             tells the two apart",
            i + 1
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field(conversion: Conversion, max_chars: Option<usize>, labels: Option<&[&str]>) -> Field {
        Field {
            json: "f".into(),
            sql: "f".into(),
            conversion,
            sql_type: "t".into(),
            typname: "t".into(),
            base_type: "t".into(),
            typmod: -1,
            max_chars,
            labels: labels.map(|l| l.iter().map(|s| s.to_string()).collect()),
            generated: false,
            identity_always: false,
            not_null: false,
            json_null_as_sql_null: false,
        }
    }

    #[test]
    fn json_null_is_refused_where_a_cell_would_read_it_as_sql_null() {
        use conversion::Element;
        let mut meta = field(Conversion::Jsonb, None, None);
        let err = meta.render(Some("null".into())).unwrap_err();
        assert!(
            err.contains("JSON null") && err.contains("layout.json_null"),
            "{err}"
        );
        assert_eq!(meta.render(None), Ok(json!(null)));
        assert_eq!(meta.render(Some("[null]".into())), Ok(json!([null])));
        meta.not_null = true;
        assert_eq!(meta.render(Some("null".into())), Ok(json!(null)));
        meta.not_null = false;
        meta.json_null_as_sql_null = true;
        assert_eq!(meta.render(Some("null".into())), Ok(json!(null)));

        // An array's elements, each as its text: JSON `null` ("null",
        // spacing kept by a `json`) against an SQL NULL element (null).
        for element in [Element::Json, Element::Jsonb] {
            let mut docs = field(Conversion::ArrayOf(element), None, None);
            let read = r#"["{\"a\": 1}", " null ", null]"#;
            let err = docs.render(Some(read.into())).unwrap_err();
            assert!(
                err.starts_with("element 2: ") && err.contains("JSON null"),
                "{err}"
            );
            assert_eq!(
                docs.render(Some(r#"["{\"a\": 1}", "\"null\"", null]"#.into())),
                Ok(json!([{"a": 1}, "null", null]))
            );
            docs.json_null_as_sql_null = true;
            assert_eq!(
                docs.render(Some(read.into())),
                Ok(json!([{"a": 1}, null, null]))
            );
        }
    }

    #[test]
    fn a_field_checks_its_labels_and_length() {
        let status = field(Conversion::Enum, None, Some(&["requested", "completed"]));
        assert_eq!(
            status.accept(&json!("completed")).unwrap(),
            (json!("completed"), Some("completed".into()))
        );
        assert_eq!(status.accept(&json!(null)).unwrap(), (json!(null), None));
        let err = status.accept(&json!("Completed")).unwrap_err();
        assert!(
            err.contains("\"Completed\" is not a label") && err.contains("requested, completed"),
            "{err}"
        );
        // `character(3)`: padding does not count, the rest does.
        let code = field(Conversion::Char, Some(3), None);
        assert_eq!(code.accept(&json!("ab    ")).unwrap().0, json!("ab"));
        let err = code.accept(&json!("abcd")).unwrap_err();
        assert!(err.contains("is 4 characters, over the 3"), "{err}");
        // `varchar(3)`: spaces over the limit are cut, as PostgreSQL
        // cuts them on assignment; anything else over it is refused.
        let short = field(Conversion::Text, Some(3), None);
        assert_eq!(
            short.accept(&json!("ab    ")).unwrap(),
            (json!("ab "), Some("ab ".into()))
        );
        assert_eq!(short.accept(&json!("ééé  ")).unwrap().0, json!("ééé"));
        assert!(short.accept(&json!("ab  c")).is_err());
        assert_eq!(short.accept(&json!("abc")).unwrap().0, json!("abc"));
    }
}
