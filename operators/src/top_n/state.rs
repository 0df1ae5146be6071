//! Top-N's state: every kept row in rank order, the snapshot's tables
//! (`rows`, and with final rows `meta` and `emitted`) and their restore.

use std::sync::Arc;

use arrow::array::RecordBatch;
use weir_core::{Result, WeirError};

use super::{Final, TopNOperator};
use crate::StateTable;
use crate::process::now_ms;
use crate::row_store::Ref;

impl TopNOperator {
    /// Every kept row, key by key in rank order, in batches of at most
    /// `chunk` rows, with row numbers.
    pub(super) fn all_kept(&self, chunk: usize) -> Result<Vec<(RecordBatch, Vec<u64>)>> {
        let mut batches = vec![];
        let mut refs = vec![];
        let mut numbers = vec![];
        let flush = |refs: &mut Vec<Ref>,
                     numbers: &mut Vec<u64>,
                     batches: &mut Vec<(RecordBatch, Vec<u64>)>|
         -> Result<()> {
            let columns = self.store.gather_refs(refs, None)?;
            let rows = RecordBatch::try_new_with_options(
                Arc::clone(&self.input_schema),
                columns,
                &arrow::array::RecordBatchOptions::new().with_row_count(Some(refs.len())),
            )?;
            batches.push((rows, std::mem::take(numbers)));
            refs.clear();
            Ok(())
        };
        for kept in &self.ranks {
            for (n, row) in kept.iter().enumerate() {
                refs.push(Ref::Stored(row.slot as usize));
                numbers.push(n as u64 + 1);
            }
            if refs.len() >= chunk {
                flush(&mut refs, &mut numbers, &mut batches)?;
            }
        }
        if !refs.is_empty() || batches.is_empty() {
            flush(&mut refs, &mut numbers, &mut batches)?;
        }
        Ok(batches)
    }

    /// The snapshot's tables (see the module's comment).
    pub(super) fn snapshot(&mut self) -> Result<Vec<StateTable>> {
        let batch = match self.all_kept(usize::MAX)?.pop() {
            Some((rows, _)) => rows,
            None => RecordBatch::new_empty(Arc::clone(&self.input_schema)),
        };
        let mut tables =
            vec![StateTable::new("rows", batch).keyed(self.key_indices.iter().copied())];
        if self.final_rows.is_some() {
            tables.push(crate::window::meta_table(self.watermark)?);
        }
        if matches!(self.final_rows, Some(Final::FirstByRowtime(_))) {
            let parser = self.key_rows.parser();
            let keys = self
                .key_rows
                .convert_rows(self.emitted.keys().map(|k| parser.parse(k)))?;
            let batch = RecordBatch::try_new_with_options(
                Arc::clone(&self.key_schema),
                keys,
                &arrow::array::RecordBatchOptions::new().with_row_count(Some(self.emitted.len())),
            )?;
            tables.push(StateTable::new("emitted", batch).keyed(0..self.key_indices.len()));
        }
        tables.extend(self.replay.tables(&[&self.key_indices]));
        Ok(tables)
    }

    /// Restore the tables of a snapshot: kept rows are ranked again.
    pub(super) fn restore(&mut self, tables: Vec<StateTable>) -> Result<()> {
        let mut watermark = None;
        for t in tables {
            let Some(t) = self
                .replay
                .take_table(t, &[&self.key_indices], &self.key_groups)?
            else {
                continue;
            };
            if t.name == "meta" && self.final_rows.is_some() {
                crate::window::restore_meta(&self.name, &t.batch, &mut watermark)?;
                continue;
            }
            if t.name == "emitted" && matches!(self.final_rows, Some(Final::FirstByRowtime(_))) {
                let all: Vec<usize> = (0..self.key_indices.len()).collect();
                let batch = self.key_groups.keep(t.batch, &all)?;
                let keys = self.key_rows.convert_columns(batch.columns())?;
                // Restored keys' TTL starts over.
                let now = now_ms();
                self.emitted
                    .extend(keys.iter().map(|k| (k.data().into(), now)));
                continue;
            }
            if t.name != "rows" || t.batch.schema().fields() != self.input_schema.fields() {
                return Err(WeirError::Execution(format!(
                    "{}: state table '{}' does not fit this Top-N",
                    self.name, t.name
                )));
            }
            let batch = self.key_groups.keep(t.batch, &self.key_indices)?;
            if batch.num_rows() > 0 {
                // Kept rows were stored in order: re-sorting keeps it.
                let mut ignore = vec![];
                let saved = std::mem::replace(&mut self.changelog, false);
                let r = self.process(&batch, now_ms(), &mut ignore);
                self.changelog = saved;
                r?;
            }
        }
        if let Some(w) = watermark {
            self.watermark = w;
        }
        Ok(())
    }
}
