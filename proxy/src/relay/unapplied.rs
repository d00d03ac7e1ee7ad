//! Reading one's own writes in `primary` ([`crate::fresh`]): the cells of
//! a session's writes through the facade it keeps, and a statement it
//! forwards to PostgreSQL held until they are there.

use std::time::Duration;

use bytes::BytesMut;

use super::pending::Pending;
use super::State;
use crate::frame::Frame;
use crate::Shared;

/// A statement forwarded once the session's writes are in PostgreSQL:
/// the mode it was judged in, a read's statement and parameters (to
/// sample it), and why a read was not served.
type Forwarded = (
    tripstore::Mode,
    Option<(String, Vec<String>)>,
    Option<String>,
);

/// The most shards a session keeps a write to wait for
/// ([`State::awaiting`]).
const UNAPPLIED_SHARDS: usize = 256;

impl State {
    /// `frame`, a `Query` or `Bind` to be forwarded to PostgreSQL, held
    /// until the session's writes are there; given back (`Err`) when none
    /// are pending, to be forwarded now. `unserved`: a read Schemaless did
    /// not answer, and why.
    pub(super) fn await_writes(
        &mut self,
        shared: &Shared,
        frame: Frame,
        (mode, read, unserved): Forwarded,
    ) -> Result<Pending, Frame> {
        if self.unapplied.is_empty() {
            return Err(frame);
        }
        let within = Duration::from_millis(shared.settings.read_your_writes_ms);
        let cells = std::mem::take(&mut self.unapplied)
            .into_iter()
            .map(|(_, cell)| cell)
            .collect();
        let answer = shared.sampling.applied(cells, within, unserved);
        Ok(Pending::held(frame, answer, mode, read))
    }

    /// Notes `cells`, written through the facade in `primary`, to be
    /// awaited in PostgreSQL: per shard only the newest, since the reverse
    /// mirror applies a shard's change log in order (the session's older
    /// cells there are applied by then), and at most
    /// [`UNAPPLIED_SHARDS`] shards, those written last (a session writing
    /// to more between two forwarded statements is checked on those).
    pub(super) fn awaiting(&mut self, cells: Vec<schemaless::Cell>, shards: u32) {
        for cell in cells {
            let shard = schemaless::routing::shard_of(&cell.key.row_key, shards);
            self.unapplied.retain(|(s, _)| *s != shard);
            self.unapplied.push((shard, cell));
        }
        let excess = self.unapplied.len().saturating_sub(UNAPPLIED_SHARDS);
        self.unapplied.drain(..excess);
    }

    /// Forwards `frame` (a `Query` or `Bind`) to PostgreSQL, once the
    /// session's writes are there ([`State::await_writes`]).
    pub(super) fn forward(
        &mut self,
        shared: &Shared,
        frame: Frame,
        out: &mut BytesMut,
    ) -> Option<Pending> {
        match self.await_writes(shared, frame, (shared.mode(), None, None)) {
            Ok(held) => Some(held),
            Err(frame) => {
                self.sent(frame.kind);
                out.extend_from_slice(&frame.bytes);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(n: u128, ref_key: i64) -> schemaless::Cell {
        schemaless::Cell::new(
            schemaless::RowKey::from(uuid::Uuid::from_u128(0x4000_8000_0000_0000 | n)),
            schemaless::Column::new("BASE").unwrap(),
            schemaless::RefKey::new(ref_key).unwrap(),
            schemaless::Body::from_value(serde_json::json!({})).unwrap(),
        )
    }

    #[test]
    fn a_session_awaits_its_newest_write_of_each_shard_and_so_many_shards() {
        let mut state = State::new();
        let shards = 4096;
        let shard = |c: &schemaless::Cell| schemaless::routing::shard_of(&c.key.row_key, shards);
        let (a, b) = (cell(1, 1), cell(1, 2));
        let other = (2..)
            .map(|n| cell(n, 1))
            .find(|c| shard(c) != shard(&a))
            .unwrap();
        state.awaiting(vec![a, other.clone()], shards);
        state.awaiting(vec![b.clone()], shards);
        // The row's second version stands for its first: one per shard.
        let kept: Vec<_> = state.unapplied.iter().map(|(_, c)| c.key.clone()).collect();
        assert_eq!(kept, [other.key.clone(), b.key.clone()]);
        // Past the bound, the shards written last are kept.
        let many: Vec<schemaless::Cell> = (100..5000).map(|n| cell(n, 1)).collect();
        let last = many.last().unwrap().key.clone();
        state.awaiting(many, shards);
        assert_eq!(state.unapplied.len(), UNAPPLIED_SHARDS);
        assert_eq!(state.unapplied.last().unwrap().1.key, last);
        let distinct: std::collections::HashSet<u32> =
            state.unapplied.iter().map(|(s, _)| *s).collect();
        assert_eq!(distinct.len(), UNAPPLIED_SHARDS);
    }
}
