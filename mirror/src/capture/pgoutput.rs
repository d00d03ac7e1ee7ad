//! The messages of PostgreSQL's `pgoutput` logical decoding plugin
//! (protocol version 1), as `pg_logical_slot_peek_binary_changes`
//! returns them: one message per row.
//!
//! Only what capture reads is decoded: transaction boundaries, relations
//! (to know a table's columns), the changes' key columns in text form,
//! truncates and logical decoding messages (the facade's "skip this
//! transaction"). Anything else is skipped; a malformed message is an
//! error naming the offset, never a panic. The format is PostgreSQL's
//! "Logical Replication Message Formats".

/// One decoded message.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// `B`: a transaction begins.
    Begin {
        /// Its commit's LSN.
        final_lsn: u64,
        /// Its commit time, microseconds since 2000-01-01 UTC.
        commit_time: i64,
    },
    /// `C`: it commits.
    Commit {
        /// The end of the commit record: where decoding goes on from.
        end_lsn: u64,
    },
    /// `R`: a table's columns, sent before its first change.
    Relation(Relation),
    /// `I`: a row inserted.
    Insert {
        /// The table's OID.
        relation: u32,
        /// The new row.
        new: Tuple,
    },
    /// `U`: a row updated.
    Update {
        /// The table's OID.
        relation: u32,
        /// The old row's replica identity columns (`K`, when they
        /// changed) or the whole old row (`O`, replica identity full).
        old: Option<Tuple>,
        /// The new row.
        new: Tuple,
    },
    /// `D`: a row deleted.
    Delete {
        /// The table's OID.
        relation: u32,
        /// Its replica identity columns (`K`) or the whole row (`O`).
        old: Tuple,
    },
    /// `T`: tables truncated.
    Truncate {
        /// Their OIDs.
        relations: Vec<u32>,
    },
    /// `M`: a logical decoding message (`pg_logical_emit_message`).
    Message {
        /// Emitted inside the transaction (decoded with it).
        transactional: bool,
        /// Its prefix.
        prefix: String,
        /// Its content.
        content: Vec<u8>,
    },
    /// Anything capture does not need (`O` origin, `Y` type).
    Other(u8),
}

/// A table as a `Relation` message describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct Relation {
    /// Its OID.
    pub id: u32,
    /// Its schema (`pg_catalog` is sent as empty).
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its columns' names, in order.
    pub columns: Vec<String>,
}

/// A row's values, in the relation's column order.
#[derive(Clone, Debug, PartialEq)]
pub struct Tuple(pub Vec<Value>);

/// One column's value in a tuple.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// SQL NULL (also: a column not in the replica identity of a `K`
    /// tuple).
    Null,
    /// A TOASTed value that did not change (its value is not sent).
    Unchanged,
    /// The value's text form.
    Text(String),
}

impl Tuple {
    /// The text of column `index`, if it has one.
    pub fn text(&self, index: usize) -> Option<&str> {
        match self.0.get(index) {
            Some(Value::Text(t)) => Some(t),
            _ => None,
        }
    }
}

/// A malformed message.
#[derive(Debug, thiserror::Error)]
#[error("pgoutput message {kind:?} at byte {at}: {what}")]
pub struct ParseError {
    kind: char,
    at: usize,
    what: String,
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    kind: char,
}

impl<'a> Reader<'a> {
    fn fail(&self, what: impl Into<String>) -> ParseError {
        ParseError {
            kind: self.kind,
            at: self.at,
            what: what.into(),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ParseError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| self.fail(format!("{n} more bytes expected, the message ends")))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, ParseError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, ParseError> {
        Ok(u16::from_be_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }

    fn u32(&mut self) -> Result<u32, ParseError> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> Result<u64, ParseError> {
        Ok(u64::from_be_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn string(&mut self) -> Result<String, ParseError> {
        let rest = &self.bytes[self.at..];
        let len = rest
            .iter()
            .position(|b| *b == 0)
            .ok_or_else(|| self.fail("a string without its terminating zero"))?;
        let text = std::str::from_utf8(&rest[..len])
            .map_err(|_| self.fail("a string that is not UTF-8"))?
            .to_string();
        self.at += len + 1;
        Ok(text)
    }

    fn tuple(&mut self) -> Result<Tuple, ParseError> {
        let n = self.u16()?;
        let mut values = Vec::with_capacity(n as usize);
        for _ in 0..n {
            values.push(match self.u8()? {
                b'n' => Value::Null,
                b'u' => Value::Unchanged,
                b't' => {
                    let len = self.u32()? as usize;
                    let bytes = self.take(len)?;
                    Value::Text(
                        std::str::from_utf8(bytes)
                            .map_err(|_| self.fail("a text value that is not UTF-8"))?
                            .to_string(),
                    )
                }
                other => return Err(self.fail(format!("unknown value kind {:?}", other as char))),
            });
        }
        Ok(Tuple(values))
    }
}

/// Decodes one message.
pub fn parse(bytes: &[u8]) -> Result<Message, ParseError> {
    let kind = *bytes.first().ok_or(ParseError {
        kind: '?',
        at: 0,
        what: "an empty message".into(),
    })?;
    let mut r = Reader {
        bytes,
        at: 1,
        kind: kind as char,
    };
    Ok(match kind {
        b'B' => {
            let final_lsn = r.u64()?;
            let commit_time = r.u64()? as i64;
            let _xid = r.u32()?;
            Message::Begin {
                final_lsn,
                commit_time,
            }
        }
        b'C' => {
            let _flags = r.u8()?;
            let _commit_lsn = r.u64()?;
            let end_lsn = r.u64()?;
            let _time = r.u64()?;
            Message::Commit { end_lsn }
        }
        b'R' => {
            let id = r.u32()?;
            let namespace = r.string()?;
            let name = r.string()?;
            let _identity = r.u8()?;
            let n = r.u16()?;
            let mut columns = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let _flags = r.u8()?;
                columns.push(r.string()?);
                let _type = r.u32()?;
                let _modifier = r.u32()?;
            }
            Message::Relation(Relation {
                id,
                namespace,
                name,
                columns,
            })
        }
        b'I' => {
            let relation = r.u32()?;
            match r.u8()? {
                b'N' => Message::Insert {
                    relation,
                    new: r.tuple()?,
                },
                other => return Err(r.fail(format!("expected N, got {:?}", other as char))),
            }
        }
        b'U' => {
            let relation = r.u32()?;
            let mut old = None;
            let new = loop {
                match r.u8()? {
                    b'K' | b'O' if old.is_none() => old = Some(r.tuple()?),
                    b'N' => break r.tuple()?,
                    other => {
                        return Err(r.fail(format!("expected K, O or N, got {:?}", other as char)))
                    }
                }
            };
            Message::Update { relation, old, new }
        }
        b'D' => {
            let relation = r.u32()?;
            match r.u8()? {
                b'K' | b'O' => Message::Delete {
                    relation,
                    old: r.tuple()?,
                },
                other => return Err(r.fail(format!("expected K or O, got {:?}", other as char))),
            }
        }
        b'T' => {
            let n = r.u32()?;
            let _options = r.u8()?;
            let relations = (0..n).map(|_| r.u32()).collect::<Result<_, _>>()?;
            Message::Truncate { relations }
        }
        b'M' => {
            let flags = r.u8()?;
            let _lsn = r.u64()?;
            let prefix = r.string()?;
            let len = r.u32()? as usize;
            let content = r.take(len)?.to_vec();
            Message::Message {
                transactional: flags & 1 == 1,
                prefix,
                content,
            }
        }
        other => Message::Other(other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(s.as_bytes());
        out.push(0);
    }

    fn text(out: &mut Vec<u8>, s: &str) {
        out.push(b't');
        out.extend_from_slice(&(s.len() as u32).to_be_bytes());
        out.extend_from_slice(s.as_bytes());
    }

    #[test]
    fn transactions_relations_and_changes_decode() {
        let mut begin = vec![b'B'];
        begin.extend_from_slice(&0x16B3748u64.to_be_bytes());
        begin.extend_from_slice(&123_456u64.to_be_bytes());
        begin.extend_from_slice(&7u32.to_be_bytes());
        assert_eq!(
            parse(&begin).unwrap(),
            Message::Begin {
                final_lsn: 0x16B3748,
                commit_time: 123_456
            }
        );

        let mut relation = vec![b'R'];
        relation.extend_from_slice(&16_384u32.to_be_bytes());
        string(&mut relation, "public");
        string(&mut relation, "trips");
        relation.push(b'i');
        relation.extend_from_slice(&2u16.to_be_bytes());
        for (key, name) in [(0u8, "id"), (1, "uuid")] {
            relation.push(key);
            string(&mut relation, name);
            relation.extend_from_slice(&20u32.to_be_bytes());
            relation.extend_from_slice(&(-1i32 as u32).to_be_bytes());
        }
        let Message::Relation(r) = parse(&relation).unwrap() else {
            panic!("a relation");
        };
        assert_eq!(
            (r.id, r.namespace.as_str(), r.name.as_str()),
            (16_384, "public", "trips")
        );
        assert_eq!(r.columns, ["id", "uuid"]);

        let mut update = vec![b'U'];
        update.extend_from_slice(&16_384u32.to_be_bytes());
        update.push(b'K');
        update.extend_from_slice(&2u16.to_be_bytes());
        update.push(b'n');
        text(&mut update, "6f1c1a0e-8a3b-4a55-9d1e-3c2b1a0f9e8d");
        update.push(b'N');
        update.extend_from_slice(&2u16.to_be_bytes());
        text(&mut update, "42");
        update.push(b'u');
        let Message::Update { relation, old, new } = parse(&update).unwrap() else {
            panic!("an update");
        };
        assert_eq!(relation, 16_384);
        let old = old.unwrap();
        assert_eq!(old.text(0), None);
        assert_eq!(old.text(1), Some("6f1c1a0e-8a3b-4a55-9d1e-3c2b1a0f9e8d"));
        assert_eq!(new.text(0), Some("42"));
        assert_eq!(new.0[1], Value::Unchanged);

        let mut message = vec![b'M', 1];
        message.extend_from_slice(&9u64.to_be_bytes());
        string(&mut message, "mezzanine.capture");
        message.extend_from_slice(&4u32.to_be_bytes());
        message.extend_from_slice(b"skip");
        assert_eq!(
            parse(&message).unwrap(),
            Message::Message {
                transactional: true,
                prefix: "mezzanine.capture".into(),
                content: b"skip".to_vec()
            }
        );

        let mut truncate = vec![b'T'];
        truncate.extend_from_slice(&2u32.to_be_bytes());
        truncate.push(0);
        truncate.extend_from_slice(&1u32.to_be_bytes());
        truncate.extend_from_slice(&2u32.to_be_bytes());
        assert_eq!(
            parse(&truncate).unwrap(),
            Message::Truncate {
                relations: vec![1, 2]
            }
        );
        assert_eq!(parse(b"Yxyz").unwrap(), Message::Other(b'Y'));
    }

    #[test]
    fn malformed_messages_are_errors_not_panics() {
        assert!(parse(b"").is_err());
        assert!(parse(b"B\x00\x01").is_err());
        let err = parse(b"R\x00\x00\x00\x01public").unwrap_err().to_string();
        assert!(err.contains("terminating zero"), "{err}");
        let mut insert = vec![b'I', 0, 0, 0, 1, b'N', 0, 1, b't', 0, 0, 0, 9, b'x'];
        assert!(parse(&insert)
            .unwrap_err()
            .to_string()
            .contains("more bytes"));
        insert[8] = b'z';
        assert!(parse(&insert)
            .unwrap_err()
            .to_string()
            .contains("unknown value kind"));
        assert!(parse(b"U\x00\x00\x00\x01X").is_err());
        for len in 0..20 {
            let _ = parse(
                &b"C\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02\x00"
                    [..len],
            );
        }
    }
}
