//! `MATCH_RECOGNIZE` snapshots: each partition's rows still needed and its
//! partial and waiting matches, as Arrow tables, and their restore.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray, UInt32Array, UInt64Array};
use arrow::compute::take;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use weir_core::{Result, WeirError};

use super::MatchRecognizeOperator;
use crate::StateTable;
use crate::match_nfa::{Found, Mapped, Thread};

impl MatchRecognizeOperator {
    fn matches_schema(&self) -> SchemaRef {
        let mut fields: Vec<Field> = self
            .keyed
            .key_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new("__start", DataType::UInt64, false));
        fields.push(Field::new("__start_ts", DataType::Int64, false));
        fields.push(Field::new("__pc", DataType::UInt32, true));
        fields.push(Field::new("__order", DataType::UInt64, false));
        fields.push(Field::new("__rows", DataType::Utf8, false));
        Arc::new(Schema::new(fields))
    }

    pub(super) fn key_columns(&self) -> Vec<usize> {
        if self.keyed.key_indices.is_empty() {
            vec![]
        } else {
            (0..self.keyed.key_indices.len()).collect()
        }
    }

    pub(super) fn matches_table(&self) -> Result<StateTable> {
        let schema = self.matches_schema();
        let width = self.keyed.key_schema.fields().len();
        let mut owner = vec![];
        let (mut start, mut start_ts, mut pc, mut order, mut rows) =
            (vec![], vec![], vec![], vec![], vec![]);
        let json = |m: &Mapped| serde_json::to_string(m).unwrap_or_default();
        for (i, p) in self.partitions.iter().enumerate() {
            for (n, t) in p.run.threads.iter().enumerate() {
                owner.push(i as u32);
                start.push(t.start);
                start_ts.push(t.start_ts);
                pc.push(Some(t.pc as u32));
                order.push(n as u64);
                rows.push(json(&t.rows));
            }
            for f in &p.run.found {
                owner.push(i as u32);
                start.push(f.start);
                start_ts.push(0);
                pc.push(None);
                order.push(f.order);
                rows.push(json(&f.rows));
            }
        }
        let owner = UInt32Array::from(owner);
        let mut columns: Vec<ArrayRef> = vec![];
        for c in 0..width {
            let keys: Vec<&dyn Array> = self.partitions.iter().map(|p| p.key[c].as_ref()).collect();
            let keys = if keys.is_empty() {
                arrow::array::new_empty_array(schema.field(c).data_type())
            } else {
                arrow::compute::concat(&keys)?
            };
            columns.push(take(keys.as_ref(), &owner, None)?);
        }
        columns.push(Arc::new(UInt64Array::from(start)));
        columns.push(Arc::new(arrow::array::Int64Array::from(start_ts)));
        columns.push(Arc::new(UInt32Array::from(pc)));
        columns.push(Arc::new(UInt64Array::from(order)));
        columns.push(Arc::new(StringArray::from(rows)));
        let batch = RecordBatch::try_new(schema, columns)?;
        Ok(StateTable::new("matches", batch).keyed(self.key_columns()))
    }

    pub(super) fn malformed(&self, table: &str) -> WeirError {
        WeirError::Execution(format!("{}: malformed state table '{table}'", self.name))
    }

    pub(super) fn restore_rows(&mut self, batch: RecordBatch) -> Result<()> {
        let batch = self.filter.keep(batch, &self.keyed.key_indices)?;
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let width = self.input_schema.fields().len();
        let seq = batch
            .column(width)
            .as_primitive_opt::<arrow::datatypes::UInt64Type>()
            .ok_or_else(|| self.malformed("rows"))?
            .clone();
        let rows = batch.project(&(0..width).collect::<Vec<_>>())?;
        let keys = self.keyed.keys(&rows);
        self.intern(&keys)?;
        let order = crate::window::partition_order(&self.key_ids, seq.values());
        let sorted = arrow::compute::take_record_batch(&rows, &order)?;
        let pids: Vec<usize> = order
            .values()
            .iter()
            .map(|&i| self.key_ids[i as usize])
            .collect();
        let seqs: Vec<u64> = order
            .values()
            .iter()
            .map(|&i| seq.value(i as usize))
            .collect();
        let mut i = 0;
        while i < pids.len() {
            let mut j = i + 1;
            while j < pids.len() && pids[j] == pids[i] {
                j += 1;
            }
            let p = &mut self.partitions[pids[i]];
            p.rows = Some(sorted.slice(i, j - i));
            p.base = seqs[i];
            p.next = seqs[j - 1] + 1;
            i = j;
        }
        Ok(())
    }

    pub(super) fn restore_matches(&mut self, batch: RecordBatch) -> Result<()> {
        let batch = self.filter.keep(batch, &self.key_columns())?;
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let width = self.keyed.key_schema.fields().len();
        let keys: Vec<ArrayRef> = batch.columns()[..width].to_vec();
        self.intern(&keys)?;
        let malformed = self.malformed("matches");
        let bad = || WeirError::Execution(malformed.to_string());
        let start = batch
            .column(width)
            .as_primitive_opt::<arrow::datatypes::UInt64Type>()
            .ok_or_else(bad)?;
        let start_ts = batch
            .column(width + 1)
            .as_primitive_opt::<arrow::datatypes::Int64Type>()
            .ok_or_else(bad)?;
        let pc = batch
            .column(width + 2)
            .as_primitive_opt::<arrow::datatypes::UInt32Type>()
            .ok_or_else(bad)?;
        let order = batch
            .column(width + 3)
            .as_primitive_opt::<arrow::datatypes::UInt64Type>()
            .ok_or_else(bad)?;
        let rows = batch
            .column(width + 4)
            .as_string_opt::<i32>()
            .ok_or_else(bad)?;
        let mut threads: Vec<(usize, u64, Thread)> = vec![];
        for r in 0..batch.num_rows() {
            let pid = self.key_ids[r];
            let mapped: Mapped = serde_json::from_str(rows.value(r)).map_err(|_| bad())?;
            let p = &mut self.partitions[pid];
            if pc.is_null(r) {
                p.run.found.push(Found {
                    start: start.value(r),
                    order: order.value(r),
                    rows: mapped,
                });
                p.run.counter = p.run.counter.max(order.value(r) + 1);
            } else {
                threads.push((
                    pid,
                    order.value(r),
                    Thread {
                        start: start.value(r),
                        start_ts: start_ts.value(r),
                        pc: pc.value(r) as usize,
                        rows: mapped,
                    },
                ));
            }
        }
        threads.sort_by_key(|(pid, order, _)| (*pid, *order));
        for (pid, _, t) in threads {
            self.partitions[pid].run.threads.push(t);
        }
        Ok(())
    }
}
