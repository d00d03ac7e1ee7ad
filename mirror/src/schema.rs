//! The mirror's tables, in the `mezzanine` schema of the legacy database
//! (never among the app's tables).
//!
//! - `outbox`: cells written to the legacy tables and not yet delivered
//!   to Schemaless, in commit order of their ids;
//! - `outbox_parked`: entries Schemaless refused for good (a conflicting
//!   cell, a body over its limits), with the reason; `mezzanine mirror
//!   retry` puts them back;
//! - `reverse_offsets`: per shard, the change-log position the reverse
//!   mirror has applied up to and the ids below it still awaited;
//! - `reverse_parked`: change-log cells the legacy model refused;
//! - `mirror_workers`: one heartbeat row per running relay or reverse
//!   mirror;
//! - `capture_queue`: changes the capture triggers recorded (which parent
//!   changed in which column), waiting for the relay; see
//!   [`crate::capture`]. It has no key and no index: every write of the
//!   app pays for its row, and an index on it cost a plain SQL write about
//!   a tenth more at saturation (`bench capture`). The relay takes any
//!   rows, not the oldest (it reads the rows as they are now, so order
//!   does not matter), by `ctid`; autovacuum is told to clean it often;
//! - `capture_parked`: captured changes Schemaless could not take (a
//!   second body at one ref key, a row the layout cannot read, a
//!   truncated table), with both bodies and the reason; `mezzanine
//!   capture retry` puts them back (one row per change and kind);
//! - `deletions`: every deletion sent to Schemaless (a whole row, when
//!   `column_name` is empty, or one child address) with the last outbox
//!   id handed out when it was recorded, so the relay can tell a cell
//!   written again after its deletion from one delivered again; see
//!   [`crate::retired`];
//! - `row_ids`: the integer id of a parent row the proxy inserted
//!   through the facade (in `primary`), given by the INSERT or drawn for
//!   its `RETURNING id`, until the reverse mirror inserts the row under
//!   it (the same statement deletes the reservation). Every role may
//!   read it (`GRANT SELECT ... TO PUBLIC`): an app's write by that id,
//!   evaluated as the app's role, finds the row's UUID there before the
//!   row is in its table;
//! - `capture_replica_identity`: with `capture.method = "logical"`, the
//!   replica identity each layout table had before install changed it,
//!   which uninstall restores.

use sqlx::PgPool;

use crate::error::Error;

/// Creates the tables if they are missing. Serialized by an advisory lock,
/// so facades starting together do not race on `CREATE TABLE`.
pub async fn ensure(pool: &PgPool) -> Result<(), Error> {
    let everything = legacy::connection::present(
        pool,
        &[
            "mezzanine.outbox",
            "mezzanine.outbox_parked",
            "mezzanine.reverse_offsets",
            "mezzanine.reverse_parked",
            "mezzanine.mirror_workers",
            "mezzanine.capture_queue",
            "mezzanine.capture_parked",
            "mezzanine.capture_parked_change",
            "mezzanine.capture_replica_identity",
            "mezzanine.deletions",
            "mezzanine.row_ids",
        ],
        &[
            ("mezzanine.reverse_offsets", "awaited_ranges"),
            ("mezzanine.reverse_parked", "legacy_body"),
        ],
    );
    if everything.await {
        return Ok(());
    }
    let context = "creating the mirror's tables";
    let mut tx = pool.begin().await.map_err(Error::postgres(context))?;
    sqlx::raw_sql(
        "/* mezzanine */ SELECT pg_advisory_xact_lock(7415262542);
         CREATE SCHEMA IF NOT EXISTS mezzanine;
         CREATE TABLE IF NOT EXISTS mezzanine.outbox (
             id bigserial PRIMARY KEY,
             row_key uuid NOT NULL,
             column_name text NOT NULL,
             ref_key bigint NOT NULL,
             body text NOT NULL,
             enqueued_at timestamptz NOT NULL DEFAULT clock_timestamp());
         CREATE TABLE IF NOT EXISTS mezzanine.outbox_parked (
             id bigint PRIMARY KEY,
             row_key uuid NOT NULL,
             column_name text NOT NULL,
             ref_key bigint NOT NULL,
             body text NOT NULL,
             enqueued_at timestamptz NOT NULL,
             parked_at timestamptz NOT NULL DEFAULT now(),
             error text NOT NULL);
         CREATE TABLE IF NOT EXISTS mezzanine.reverse_offsets (
             shard integer PRIMARY KEY,
             added_id bigint NOT NULL,
             awaited bigint[] NOT NULL DEFAULT '{}',
             applied bigint NOT NULL DEFAULT 0,
             updated_at timestamptz NOT NULL DEFAULT now());
         ALTER TABLE mezzanine.reverse_offsets ADD COLUMN IF NOT EXISTS awaited_ranges text;
         CREATE TABLE IF NOT EXISTS mezzanine.reverse_parked (
             shard integer NOT NULL,
             added_id bigint NOT NULL,
             row_key uuid NOT NULL,
             column_name text NOT NULL,
             ref_key bigint NOT NULL,
             body text NOT NULL,
             parked_at timestamptz NOT NULL DEFAULT now(),
             error text NOT NULL,
             PRIMARY KEY (shard, added_id));
         ALTER TABLE mezzanine.reverse_parked ADD COLUMN IF NOT EXISTS legacy_body text;
         CREATE TABLE IF NOT EXISTS mezzanine.mirror_workers (
             name text PRIMARY KEY,
             kind text NOT NULL CHECK (kind IN ('relay', 'reverse')),
             started_at timestamptz NOT NULL DEFAULT now(),
             heartbeat_at timestamptz NOT NULL DEFAULT now(),
             cells bigint NOT NULL DEFAULT 0,
             rate double precision NOT NULL DEFAULT 0,
             failures bigint NOT NULL DEFAULT 0,
             parked bigint NOT NULL DEFAULT 0,
             last_error text);
         CREATE TABLE IF NOT EXISTS mezzanine.capture_queue (
             column_name text,
             parent_id bigint,
             row_key uuid,
             ref_key bigint,
             op \"char\" NOT NULL,
             captured_at timestamptz NOT NULL DEFAULT clock_timestamp())
             WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000);
         CREATE TABLE IF NOT EXISTS mezzanine.capture_parked (
             id bigserial PRIMARY KEY,
             column_name text,
             parent_id bigint,
             row_key uuid,
             ref_key bigint,
             op \"char\" NOT NULL,
             captured_at timestamptz NOT NULL,
             parked_at timestamptz NOT NULL DEFAULT now(),
             kind text NOT NULL,
             reason text NOT NULL,
             legacy_body text,
             schemaless_body text);
         CREATE UNIQUE INDEX IF NOT EXISTS capture_parked_change ON mezzanine.capture_parked (
             coalesce(column_name, ''), coalesce(parent_id, -1),
             coalesce(row_key, '00000000-0000-0000-0000-000000000000'::uuid),
             coalesce(ref_key, -1), op, kind);
         CREATE TABLE IF NOT EXISTS mezzanine.capture_replica_identity (
             table_sql text PRIMARY KEY,
             identity text NOT NULL,
             index_sql text);
         CREATE TABLE IF NOT EXISTS mezzanine.row_ids (
             parent regclass NOT NULL,
             row_key uuid NOT NULL,
             id bigint NOT NULL,
             reserved_at timestamptz NOT NULL DEFAULT now(),
             PRIMARY KEY (parent, row_key),
             UNIQUE (parent, id));
         GRANT USAGE ON SCHEMA mezzanine TO PUBLIC;
         GRANT SELECT ON mezzanine.row_ids TO PUBLIC;
         CREATE TABLE IF NOT EXISTS mezzanine.deletions (
             row_key uuid NOT NULL,
             column_name text NOT NULL,
             ref_key bigint NOT NULL,
             after bigint NOT NULL,
             recorded_at timestamptz NOT NULL DEFAULT now(),
             PRIMARY KEY (row_key, column_name, ref_key));",
    )
    .execute(&mut *tx)
    .await
    .map_err(Error::postgres(context))?;
    tx.commit().await.map_err(Error::postgres(context))
}
