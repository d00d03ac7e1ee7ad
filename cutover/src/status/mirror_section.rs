//! The mirror's section: outbox, capture and reverse-mirror lag, and
//! the workers that drain them.

use super::*;

/// Both directions of the mirror.
#[derive(Clone, Debug, Serialize)]
pub struct Mirror {
    /// Entries waiting in the outbox.
    pub outbox_depth: u64,
    /// Age of the oldest, seconds.
    pub outbox_oldest_secs: Option<f64>,
    /// Parked outbox entries.
    pub outbox_parked: u64,
    /// Whether capture is enabled.
    pub capture_enabled: bool,
    /// Changes waiting in the capture queue.
    pub capture_depth: u64,
    /// Age of the oldest, seconds.
    pub capture_oldest_secs: Option<f64>,
    /// Parked captured changes.
    pub capture_parked: u64,
    /// Change-log cells the reverse mirror has not applied, all shards.
    pub reverse_lag_cells: u64,
    /// Shards with a reverse offset.
    pub reverse_shards: usize,
    /// Cells the reverse mirror parked.
    pub reverse_parked: u64,
    /// Why the reverse lag could not be measured.
    pub reverse_error: Option<String>,
    /// Relays and reverse mirrors that wrote a heartbeat within a minute.
    pub workers: Vec<MirrorWorker>,
    /// Distinct processes among them (`host:pid`): the facades and workers
    /// running the mirror.
    pub processes: usize,
}

/// A relay or reverse mirror.
#[derive(Clone, Debug, Serialize)]
pub struct MirrorWorker {
    /// `kind:host:pid:suffix`.
    pub name: String,
    /// `relay` or `reverse`.
    pub kind: String,
    /// Seconds since its heartbeat.
    pub silent_secs: f64,
    /// Cells a second over its last interval.
    pub rate: f64,
    /// Its last failure.
    pub last_error: Option<String>,
}

pub(super) async fn mirror(sources: &Sources) -> Section<Mirror> {
    let result = async {
        mirror::schema::ensure(&sources.pool).await?;
        mirror::status::read(&sources.pool, &sources.schemaless).await
    }
    .await;
    Section::of(result.map(|s| {
        let live: Vec<MirrorWorker> = s
            .workers
            .iter()
            .filter(|w| w.silent_secs < 60.0)
            .map(|w| MirrorWorker {
                name: w.name.clone(),
                kind: w.kind.clone(),
                silent_secs: w.silent_secs,
                rate: w.rate,
                last_error: w.last_error.clone(),
            })
            .collect();
        // `kind:host:pid:suffix`: one process runs one relay and one
        // reverse mirror at most.
        let processes: std::collections::BTreeSet<String> = live
            .iter()
            .map(|w| {
                w.name
                    .split(':')
                    .skip(1)
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(":")
            })
            .collect();
        Mirror {
            outbox_depth: s.outbox_depth,
            outbox_oldest_secs: s.outbox_oldest_secs,
            outbox_parked: s.outbox_parked,
            capture_enabled: sources.config.capture.enabled,
            capture_depth: s.capture.depth,
            capture_oldest_secs: s.capture.oldest_secs,
            capture_parked: s.capture.parked,
            reverse_lag_cells: s.reverse_lag(),
            reverse_shards: s.reverse.len(),
            reverse_parked: s.reverse_parked,
            reverse_error: s.reverse_error.clone(),
            processes: processes.len(),
            workers: live,
        }
    }))
}
