//! Following the mode and the read share: a listener on the mode's
//! channel, a poll as the backstop, and the background tasks that run
//! only in some modes.

use super::*;

/// A flag that follows `mode` through `wanted`, until `cancel`.
pub(super) fn enabled_while(
    mode: &watch::Receiver<Mode>,
    wanted: fn(&Mode) -> bool,
    cancel: &CancellationToken,
) -> watch::Receiver<bool> {
    let mut mode = mode.clone();
    let (sender, receiver) = watch::channel(wanted(&mode.borrow_and_update()));
    let cancel = cancel.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                changed = mode.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let on = wanted(&mode.borrow_and_update());
                    sender.send_if_modified(|was| std::mem::replace(was, on) != on);
                }
            }
        }
    });
    receiver
}

/// Follows the mode until cancelled: notifications for speed, polling for
/// safety.
pub(super) async fn watch_mode(
    pool: PgPool,
    (sender, reads): (watch::Sender<Mode>, watch::Sender<Arc<ReadShare>>),
    poll: Duration,
    cancel: CancellationToken,
) {
    let mut listener = None;
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if listener.is_none() {
            listener = listen(&pool).await;
        }
        let notified = async {
            match listener.as_mut() {
                Some(l) => l.recv().await.map(|_| ()),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = cancel.cancelled() => return,
            result = notified => {
                if let Err(e) = result {
                    tracing::warn!("mode notifications lost ({e}); polling until they return");
                    listener = None;
                }
            }
            _ = tick.tick() => {}
        }
        match mode::read(&pool).await {
            Ok(state) => {
                reads.send_if_modified(|share| {
                    let changed = **share != state.reads;
                    if changed {
                        tracing::info!(
                            "reads in shadow: {} of them to Schemaless (was {})",
                            state.reads.describe(),
                            share.describe()
                        );
                        *share = Arc::new(state.reads.clone());
                    }
                    changed
                });
                sender.send_if_modified(|mode| {
                    let changed = *mode != state.mode;
                    if changed {
                        tracing::info!("mode is now {} (was {mode})", state.mode);
                        *mode = state.mode;
                    }
                    changed
                });
            }
            Err(e) => tracing::warn!("reading the mode: {e}"),
        }
    }
}

pub(super) async fn listen(pool: &PgPool) -> Option<PgListener> {
    let result = async {
        let mut listener = PgListener::connect_with(pool).await?;
        listener.listen(mode::CHANNEL).await?;
        Ok::<_, sqlx::Error>(listener)
    }
    .await;
    match result {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::warn!("listening for mode changes: {e}; polling instead");
            None
        }
    }
}
