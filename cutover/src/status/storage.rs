//! Schemaless's own sections: storage nodes probed, trigger lag, index
//! versions.

use super::*;

/// A storage node.
#[derive(Clone, Debug, Serialize)]
pub struct NodeState {
    /// Its cluster.
    pub cluster: String,
    /// Its URL without password.
    pub node: String,
    /// `master` or `minion`, as this process's topology has it.
    pub role: &'static str,
    /// Whether it answered the probe.
    pub answers: bool,
    /// How long the probe took, milliseconds.
    pub probe_ms: Option<f64>,
    /// What failed.
    pub error: Option<String>,
}

/// A trigger's progress.
#[derive(Clone, Debug, Serialize)]
pub struct TriggerLag {
    /// Its name.
    pub name: String,
    /// Change-log cells not handled yet, all shards.
    pub lag_cells: u64,
    /// Parked cells.
    pub parked: u64,
    /// Runners holding shards.
    pub runners: usize,
    /// Shards no runner holds.
    pub unowned_shards: usize,
}

/// An index version.
#[derive(Clone, Debug, Serialize)]
pub struct IndexState {
    /// The index.
    pub name: String,
    /// The version.
    pub version: u32,
    /// `building`, `active` or `retired`.
    pub state: &'static str,
    /// Change-log cells its maintainer has not applied; `null` for a
    /// retired version.
    pub lag_cells: Option<u64>,
}

pub(super) async fn nodes(store: &MySqlStore) -> Vec<NodeState> {
    let topology = store.topology();
    let mut probes = Vec::new();
    for cluster in &topology.clusters {
        let master = cluster.master();
        for node in &cluster.members {
            let role = if std::sync::Arc::ptr_eq(node, &master) {
                "master"
            } else {
                "minion"
            };
            let cluster = cluster.name.clone();
            let node = node.clone();
            probes.push(async move {
                let answer = tokio::time::timeout(PROBE_TIMEOUT, node.probe()).await;
                let (answers, probe_ms, error) = match answer {
                    Ok(Ok(took)) => (true, Some(took.as_secs_f64() * 1000.0), None),
                    Ok(Err(e)) => (false, None, Some(e.to_string())),
                    Err(_) => (
                        false,
                        None,
                        Some(format!("no answer within {PROBE_TIMEOUT:?}")),
                    ),
                };
                NodeState {
                    cluster,
                    node: node.label.clone(),
                    role,
                    answers,
                    probe_ms,
                    error,
                }
            });
        }
    }
    join_all(probes).await
}

pub(super) async fn triggers(store: &MySqlStore) -> Section<Vec<TriggerLag>> {
    let result = async {
        let mut out = Vec::new();
        for name in trigger::names(store).await? {
            let shards = trigger::status(store, &name).await?;
            let runners: std::collections::BTreeSet<&str> =
                shards.iter().filter_map(|s| s.owner.as_deref()).collect();
            out.push(TriggerLag {
                lag_cells: shards.iter().map(|s| s.lag).sum(),
                parked: shards.iter().map(|s| s.parked).sum(),
                runners: runners.len(),
                unowned_shards: shards.iter().filter(|s| s.owner.is_none()).count(),
                name,
            });
        }
        Ok::<_, schemaless::Error>(out)
    }
    .await;
    Section::of(result)
}

pub(super) async fn indexes(sources: &Sources) -> Section<Vec<IndexState>> {
    let store = &sources.schemaless;
    let result = async {
        let mut out = Vec::new();
        for spec in &sources.config.indexes {
            for (version, state) in index::versions(store, &spec.name).await? {
                let lag_cells = match state {
                    index::VersionState::Retired => None,
                    _ => {
                        Some(trigger::lag(store, &index::trigger_name(&spec.name, version)).await?)
                    }
                };
                out.push(IndexState {
                    name: spec.name.clone(),
                    version,
                    state: state.as_str(),
                    lag_cells,
                });
            }
        }
        Ok::<_, schemaless::Error>(out)
    }
    .await;
    Section::of(result)
}
