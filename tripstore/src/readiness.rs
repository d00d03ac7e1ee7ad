//! Whether a facade can serve now: the stores its mode needs, each asked
//! with one cheap round trip. Load balancers and workers' `/readyz` ask
//! this; it changes nothing.

use std::time::Duration;

use schemaless::CellStore;

use crate::mode::Mode;
use crate::trip_store::TripStore;

/// How long one store may take to answer the check.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// One store's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreCheck {
    /// `legacy` (PostgreSQL) or `schemaless:<cluster>`.
    pub store: String,
    /// Whether it answered.
    pub ok: bool,
    /// What failed, or what is degraded (a cluster answering only from
    /// its minions serves stale reads).
    pub detail: Option<String>,
}

/// The facade's readiness in its current mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Readiness {
    /// The mode the checks were chosen by.
    pub mode: Mode,
    /// Every store the mode uses answered.
    pub ready: bool,
    /// One check per store (per Schemaless cluster) the mode uses.
    pub checks: Vec<StoreCheck>,
}

/// Which stores a mode serves calls from: PostgreSQL in every mode but
/// `schemaless` (in `primary` the reverse mirror keeps writing it);
/// Schemaless from `mirror` on (the relay writes it).
fn uses(mode: Mode) -> (bool, bool) {
    (mode != Mode::Schemaless, mode != Mode::Legacy)
}

impl TripStore {
    /// Checks the stores the current mode uses.
    pub async fn readiness(&self) -> Readiness {
        let mode = self.mode();
        let (legacy, schemaless) = uses(mode);
        let mut checks = Vec::new();
        if legacy {
            let pool = self.legacy().pool();
            let answer = tokio::time::timeout(
                CHECK_TIMEOUT,
                sqlx::raw_sql("/* mezzanine */ SELECT 1").execute(pool),
            )
            .await;
            let detail = match answer {
                Ok(Ok(_)) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some(format!("no answer within {CHECK_TIMEOUT:?}")),
            };
            checks.push(StoreCheck {
                store: "legacy".into(),
                ok: detail.is_none(),
                detail,
            });
        }
        if schemaless && self.schemaless().shard_count() > 0 {
            let clusters = &self.schemaless().topology().clusters;
            let probes = clusters.iter().map(|cluster| async move {
                let probe = |node: std::sync::Arc<schemaless::mysql::topology::Node>| async move {
                    matches!(
                        tokio::time::timeout(CHECK_TIMEOUT, node.probe()).await,
                        Ok(Ok(_))
                    )
                };
                let master = probe(cluster.master()).await;
                let mut minion = false;
                if !master {
                    for node in cluster.minions() {
                        if probe(node).await {
                            minion = true;
                            break;
                        }
                    }
                }
                let (ok, detail) = match (master, minion) {
                    (true, _) => (true, None),
                    (false, true) => (
                        true,
                        Some("the master does not answer: reads are served stale by a minion, writes are buffered or refused".to_string()),
                    ),
                    (false, false) => (false, Some("no node of the cluster answers".to_string())),
                };
                StoreCheck {
                    store: format!("schemaless:{}", cluster.name),
                    ok,
                    detail,
                }
            });
            checks.extend(futures::future::join_all(probes).await);
        }
        Readiness {
            mode,
            ready: checks.iter().all(|c| c.ok),
            checks,
        }
    }
}
