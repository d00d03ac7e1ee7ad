//! verifier: are the two stores the same? Sampled read replay, the full
//! diff, the mismatch store, repair, and the figures cutover is gated on.
//!
//! The verifier speaks the cell API ([`schemaless::CellStore`]) to both
//! stores, so it does not care which side served a read; bodies are
//! compared in the legacy layout's canonical form, minus the `[verify]`
//! ignore rules, within its tolerances.
//!
//! # Layout
//!
//! - [`sample`]: the facade's [`sample::Sampler`] and the background
//!   replay with triage;
//! - [`compare`]: the comparison rules and units;
//! - [`full`]: the resumable, parallel full diff;
//! - [`strict`]: the full diff's check through PostgreSQL's own casts;
//! - [`repair`]: rewriting the side that is not the source of truth;
//! - [`report`]: samples, rates, the confidence bound, coverage;
//! - [`store`]: the verifier's PostgreSQL tables;
//! - [`bound`]: the 95% upper confidence bound of a rate.

pub mod bound;
pub mod compare;
pub mod error;
pub mod full;
pub mod repair;
pub mod report;
pub mod sample;
pub mod store;
pub mod strict;

pub use compare::{Rules, Side};
pub use error::Error;
pub use sample::{Answer, Read, Sample, Sampler, Triage};
