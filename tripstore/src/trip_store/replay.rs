//! The stores the verifier's isolated runtime replays samples on: its own
//! connections, built on that runtime, never the serving path's.

use super::*;

/// The sampled-read replay's own stores, opened on its thread
/// ([`verifier::sample::start_isolated`]): pools of their own, sized for
/// `verify.replayers` replays at once, so that no connection of the
/// serving path belongs to the replay's runtime or waits behind a replay.
pub(super) struct ReplayStores {
    config: config::Config,
    opened: Mutex<Option<(LegacyStore, MySqlStore)>>,
}

impl ReplayStores {
    pub(super) fn new(config: &config::Config) -> ReplayStores {
        let mut config = config.clone();
        // A replay holds one connection to one store at a time; the
        // flusher and triage one more each.
        let wanted = config.verify.replayers as u32 + 2;
        if let Some(legacy) = config.legacy.as_mut() {
            legacy.max_connections = legacy.max_connections.min(wanted);
        }
        config.storage.max_connections_per_node =
            config.storage.max_connections_per_node.min(wanted);
        // The facade's own store reconciles buffered writes; the replay
        // only reads.
        config.storage.reconcile_in_app = false;
        ReplayStores {
            config,
            opened: Mutex::new(None),
        }
    }
}

#[async_trait]
impl verifier::sample::ReplayerSource for ReplayStores {
    async fn build(&self) -> Result<Replayer, String> {
        let config = &self.config;
        let legacy = LegacyStore::connect(config)
            .await
            .map_err(|e| e.to_string())?;
        let schemaless = MySqlStore::connect(config).map_err(|e| e.to_string())?;
        let visible =
            Arc::new(Tombstoned::new(schemaless.clone(), config).map_err(|e| e.to_string())?);
        *self.opened.lock().expect("replay stores lock") =
            Some((legacy.clone(), schemaless.clone()));
        Ok(Replayer {
            stores: Stores {
                legacy: Arc::new(legacy.clone()),
                schemaless: visible,
                canonical: Arc::new(legacy.clone()),
                rules: verifier::Rules::from_config(&config.verify),
            },
            pool: legacy.pool().clone(),
            triage: Arc::new(MirrorTriage::new(legacy, schemaless)),
            config: config.verify.clone(),
        })
    }

    async fn close(&self) {
        let opened = self.opened.lock().expect("replay stores lock").take();
        if let Some((legacy, schemaless)) = opened {
            legacy.close().await;
            schemaless.close().await;
        }
    }
}
