//! The sampling settings every facade follows.

use super::*;

/// The sampling settings every facade follows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// Share of reads sampled.
    pub sample_rate: f64,
    /// Samples per second per facade, at most.
    pub max_samples_per_sec: u64,
}

/// The stored settings, if `verify sample` ever set them.
pub async fn settings(pool: &PgPool) -> Result<Option<Settings>, Error> {
    let row = sqlx::query(
        "/* mezzanine */ SELECT sample_rate, max_samples_per_sec FROM mezzanine.verify_settings",
    )
    .fetch_optional(pool)
    .await
    .map_err(Error::postgres("reading the sampling settings"))?;
    row.map(|r| {
        Ok(Settings {
            sample_rate: r
                .try_get(0)
                .map_err(Error::postgres("reading the sampling settings"))?,
            max_samples_per_sec: r
                .try_get::<i64, _>(1)
                .map_err(Error::postgres("reading the sampling settings"))?
                as u64,
        })
    })
    .transpose()
}

/// Sets the sampling every facade follows (within a second).
pub async fn set_settings(pool: &PgPool, settings: Settings, by: &str) -> Result<(), Error> {
    if !(0.0..=1.0).contains(&settings.sample_rate) {
        return Err(Error::Refused(format!(
            "the sample rate must be between 0.0 and 1.0, got {}",
            settings.sample_rate
        )));
    }
    if settings.max_samples_per_sec == 0 || settings.max_samples_per_sec > 1_000_000 {
        return Err(Error::Refused(format!(
            "the cap must be between 1 and 1000000 samples per second, got {}",
            settings.max_samples_per_sec
        )));
    }
    sqlx::query(
        "/* mezzanine */ INSERT INTO mezzanine.verify_settings (id, sample_rate, max_samples_per_sec, updated_by)
         VALUES (true, $1, $2, $3)
         ON CONFLICT (id) DO UPDATE SET sample_rate = excluded.sample_rate,
             max_samples_per_sec = excluded.max_samples_per_sec,
             updated_at = now(), updated_by = excluded.updated_by",
    )
    .bind(settings.sample_rate)
    .bind(settings.max_samples_per_sec as i64)
    .bind(by)
    .execute(pool)
    .await
    .map_err(Error::postgres("setting the sampling"))?;
    Ok(())
}

/// Forgets the stored settings: facades started from now follow
/// `[verify]` again.
pub async fn forget_settings(pool: &PgPool) -> Result<(), Error> {
    sqlx::query("/* mezzanine */ DELETE FROM mezzanine.verify_settings")
        .execute(pool)
        .await
        .map(|_| ())
        .map_err(Error::postgres("forgetting the sampling settings"))
}
