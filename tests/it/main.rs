//! End-to-end tests of Mezzanine against real servers.
//!
//! One test binary (so the servers start once): every test shares one
//! private dev cluster started on free loopback ports by [`harness`], and
//! uses its own Schemaless instance so tests run in parallel. Tests that
//! stop or kill servers start a private cluster of their own.
//!
//! - [`cells`]: cell API semantics on MariaDB;
//! - [`group_commit`]: concurrent calls combined per master, each answered
//!   for its own cells, cancelled calls losing no other's;
//! - [`changelog`]: `get_cells_for_shard` order, paging and minion reads;
//! - [`connections`]: a node's settled connections kept and reused without
//!   the pool's pings, cut-off ones never handed on, none leaked;
//! - [`model`]: random operation sequences on the in-memory model and on
//!   MariaDB give the same answers;
//! - [`bad_input`]: invalid input and corrupt stored data are clear errors
//!   and change nothing;
//! - [`schema`]: creating and dropping instances on the servers;
//! - [`servers`]: the dev cluster's node control (kill -9, restart, pause,
//!   catch-up);
//! - [`legacy_conversions`]: every SQL type through the layout, by every
//!   read path and back;
//! - [`exact_values`]: hard values (huge and tiny numbers, NaN, -0, far
//!   dates, DST edges, control and combining characters) through both
//!   stores and back, compared by PostgreSQL's own text;
//! - [`legacy_bad_input`]: bad layouts, bad cells and bad index queries on
//!   the legacy model;
//! - [`legacy_scan`]: chunked scans against the read API, index queries
//!   against a brute-force filter, on the seeded trips data set;
//! - [`legacy_model`]: random operations on the legacy model and on the
//!   in-memory model give the same answers where the legacy model supports
//!   them;
//! - [`query`]: the SQL audit from files and live from pg_stat_statements
//!   (statements run through sqlx and psql), translate's exit codes, bad
//!   input;
//! - [`cutover`]: reads moved to Schemaless by share and row key on every
//!   facade, dry runs changing nothing, the history, the status screen
//!   and its JSON;
//! - [`mode`]: the facade's mode, changed through one facade and seen by
//!   another, and the routing of calls by it;
//! - [`mirror`]: the outbox survives a writer killed after its commit, a
//!   Schemaless master stopped under load and two relays at once; the
//!   reverse mirror survives a kill and ignores late, older cells; every
//!   test ends comparing the two stores;
//! - [`deletes`]: tombstones put through the facade delete from the
//!   legacy tables in every mode (through the reverse mirror in
//!   `primary`); tombstones the legacy tables cannot follow are refused;
//! - [`capture`]: plain SQL writes from psql processes reach Schemaless
//!   through a killed relay and a concurrent backfill; deletions become
//!   tombstones; the version rule; install and uninstall under writers;
//!   a second layout of other names; bad input;
//! - [`backfill`]: 100k trips copied and compared; runs killed at random
//!   points end like an uninterrupted run; mirrored writes racing the
//!   copy; two processes on one plan; stale chunks, bad rows, pause, and
//!   the gate of `shadow`;
//! - [`add_uuid`]: `legacy add-uuid` killed and resumed under concurrent
//!   writers;
//! - [`triggers`]: trigger order, resumption, lease ownership and
//!   takeover, parking, retries and stops;
//! - [`indexes`]: secondary indexes against the model's brute force, and a
//!   version switch under load;
//! - [`verify`]: A/A sampling under live writes, planted divergence found
//!   by samples and the full diff and repaired, the served read untouched
//!   with the other store down, the dashboard in headless Chromium;
//! - [`availability`]: a master killed under load loses no acknowledged
//!   write with buffered writes (promotion, reconciler), and how many
//!   without; a frozen master's breaker and read failover; a minion down;
//!   a reconciler killed mid-replay;
//! - [`backup`]: a backup under write load restored into a fresh
//!   cluster and compared with the source as of each shard's position;
//!   point-in-time restore; a restore cut short and continued; damaged
//!   files, non-empty targets and other bad input changing nothing;
//! - [`moves`]: a shard copied to another cluster under writes ends equal
//!   to its source; a copy started again over a partial one too;
//! - [`placement`]: a shard placed on another cluster is read and written
//!   there by every store after its refresh; the newest epoch wins; bad
//!   placements change nothing;
//! - [`tls`]: verify-full TLS to PostgreSQL and MariaDB, a wrong CA
//!   refused;
//! - [`worker`]: the facade over HTTP: every endpoint in every mode
//!   against the linked facade, bad input, auth, saturation, drain on
//!   SIGTERM, TLS, and a worker killed under the client's write load;
//! - [`runbook`]: `docs/runbook.md` rehearsed command by command from
//!   `legacy` to `schemaless` and back, with facade and plain SQL writers
//!   running, no acknowledged write lost and no mismatch open at any step;
//! - [`cli`]: the `mezzanine` command line.

mod add_uuid;
mod addresses;
mod availability;
mod backfill;
mod backup;
mod bad_input;
mod bits;
mod capture;
mod catalog_types;
mod cells;
mod changelog;
mod classify;
mod cli;
mod composite;
mod connections;
mod cutover;
mod deletes;
mod dimensions;
mod durations;
mod element_arrays;
mod exact_values;
mod group_commit;
mod harness;
mod hstore;
mod index_agreement;
mod indexes;
mod json_null;
mod legacy_bad_input;
mod legacy_conversions;
mod legacy_model;
mod legacy_scan;
mod mirror;
mod mode;
mod model;
mod money_geometry;
mod moves;
mod placement;
mod primary_checks;
mod proxy;
mod proxy_batches;
mod proxy_corpus;
mod proxy_modes;
mod proxy_names;
mod proxy_sql_prepare;
mod proxy_writes;
mod query;
mod ranges;
mod returning_ids;
mod reverse_unreadable;
mod runbook;
mod schema;
mod servers;
mod shard_move;
mod text_case;
mod text_search;
mod tls;
mod triggers;
mod unconstrained_numeric;
mod upserts;
mod verify;
mod worker;
mod xml;
mod zoned_times;
