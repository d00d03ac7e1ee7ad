//! The verifier's section: the mismatch rate with its upper bound, and
//! coverage.

use super::*;

/// The verifier's figures.
#[derive(Clone, Debug, Serialize)]
pub struct Verify {
    /// Where the window starts (seconds since the epoch): the later of the
    /// mode's start and the backfill's last chunk.
    pub since: Option<f64>,
    /// Samples in the window.
    pub samples: u64,
    /// Mismatches in the window.
    pub mismatches: u64,
    /// mismatches / samples.
    pub mismatch_rate: f64,
    /// Its 95% upper bound.
    pub upper_bound: f64,
    /// Mismatches not resolved.
    pub open_mismatches: u64,
    /// Per layout column: rows verified since their last write.
    pub coverage: Vec<Coverage>,
}

/// One column's coverage.
#[derive(Clone, Debug, Serialize)]
pub struct Coverage {
    /// The column.
    pub column: String,
    /// Rows verified since their last write.
    pub verified: u64,
    /// Rows.
    pub rows: u64,
    /// verified / rows.
    pub share: f64,
}

pub(super) async fn verify(sources: &Sources) -> Section<Verify> {
    let pool = &sources.pool;
    let result = async {
        verifier::store::ensure(pool).await?;
        backfill::plan::ensure_tables(pool)
            .await
            .map_err(|e| tripstore::Error::Gate(e.to_string()))?;
        let since = tripstore::gates::verification_window(pool).await?;
        let report = verifier::report::read(pool, sources.legacy.as_ref(), since).await?;
        Ok::<_, tripstore::Error>(Verify {
            since,
            samples: report.totals.samples,
            mismatches: report.totals.mismatches,
            mismatch_rate: report.mismatch_rate,
            upper_bound: report.upper_bound,
            open_mismatches: report.open_mismatches,
            coverage: report
                .coverage
                .iter()
                .map(|c| Coverage {
                    column: c.column.clone(),
                    verified: c.verified,
                    rows: c.rows,
                    share: c.share(),
                })
                .collect(),
        })
    }
    .await;
    Section::of(result)
}
