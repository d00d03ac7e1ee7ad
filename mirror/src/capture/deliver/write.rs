//! Writing a batch's cells to Schemaless, and parking what it refuses
//! with the reason and both bodies.

use super::*;

impl CaptureDelivery {
    /// Writes `cells` in batches; per address, how it was taken or why
    /// not. Fails as a whole on anything that is not about one cell.
    pub(super) async fn write(
        &self,
        cells: Vec<Cell>,
    ) -> Result<HashMap<CellKey, Result<WriteOutcome, Refusal>>, Error> {
        let mut out = HashMap::with_capacity(cells.len());
        for batch in schemaless::cell::batches(&cells, &self.limits) {
            self.write_batch(batch.to_vec(), &mut out).await?;
        }
        Ok(out)
    }

    pub(super) async fn write_batch(
        &self,
        cells: Vec<Cell>,
        out: &mut HashMap<CellKey, Result<WriteOutcome, Refusal>>,
    ) -> Result<(), Error> {
        match self.target.put_cells(cells.clone()).await {
            Ok(results) => {
                for (cell, result) in cells.into_iter().zip(results) {
                    out.insert(cell.key, result.map_err(|_| Refusal::Conflict));
                }
                Ok(())
            }
            Err(schemaless::Error::InvalidInput { .. }) if cells.len() > 1 => {
                // One cell spoils the batch: find it by writing them one at
                // a time.
                for cell in cells {
                    Box::pin(self.write_batch(vec![cell], out)).await?;
                }
                Ok(())
            }
            Err(schemaless::Error::InvalidInput { field, message, .. }) => {
                let key = cells[0].key.clone();
                out.insert(key, Err(Refusal::Refused(format!("{field}: {message}"))));
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// Why Schemaless did not take a cell.
pub(super) enum Refusal {
    /// Another body is stored at the address.
    Conflict,
    /// The cell is invalid for Schemaless (over its limits).
    Refused(String),
}
