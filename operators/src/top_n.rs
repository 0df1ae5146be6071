//! Top-N per key (and deduplication, N = 1): SQL's `ROW_NUMBER() OVER
//! (PARTITION BY k ORDER BY …) <= N`.
//!
//! Each key's kept rows are one small sorted batch. A batch is split by key
//! (keys row-encoded once for the whole batch); for each key it touches, the
//! kept rows and its new rows are concatenated, sorted (the arrival
//! position breaks ties, so earlier rows rank first, as in Flink) and cut
//! to N. The changelog compares old and new kept rows as multisets: a row
//! that left is `-D` (or `-U` when the same row stays at another position),
//! one that entered is `+I` (or `+U`). With a row-number column, a row whose
//! position changed is retracted and re-emitted with its new number.
//!
//! Snapshots: table `rows` (every kept row, keyed by the key columns).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray, UInt32Array, UInt64Array};
use arrow::compute::{SortColumn, SortOptions, concat_batches, lexsort_to_indices};
use arrow::datatypes::SchemaRef;
use arrow::row::{OwnedRow, RowConverter, SortField};
use weir_core::spec::TopNSpec;
use weir_core::{Result, WeirError};

use crate::{KeyGroupFilter, Operator, OperatorContext, Output, StateTable};

/// The Top-N operator of one subtask.
pub struct TopNOperator {
    name: String,
    key_indices: Vec<usize>,
    order: Vec<(usize, SortOptions)>,
    limit: usize,
    later_wins_ties: bool,
    row_number: bool,
    changelog: bool,
    input_schema: SchemaRef,
    schema: SchemaRef,
    keys: RowConverter,
    /// Kept rows by row-encoded key.
    kept: HashMap<Box<[u8]>, RecordBatch>,
    /// Encodes whole input rows, to compare old and new kept rows.
    rows: RowConverter,
    key_groups: KeyGroupFilter,
}

impl TopNOperator {
    /// The operator of one subtask.
    pub fn try_new(
        name: String,
        spec: &TopNSpec,
        schema: SchemaRef,
        ctx: &OperatorContext,
    ) -> Result<Self> {
        let input = &spec.input_schema;
        let key_indices = crate::column_indices(input, &spec.keys)?;
        let order = spec
            .order
            .iter()
            .map(|(c, desc, nulls_first)| {
                Ok((
                    input.index_of(c)?,
                    SortOptions {
                        descending: *desc,
                        nulls_first: *nulls_first,
                    },
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let keys = RowConverter::new(
            key_indices
                .iter()
                .map(|&i| SortField::new(input.field(i).data_type().clone()))
                .collect(),
        )?;
        Ok(Self {
            name,
            key_indices,
            order,
            limit: spec.limit,
            later_wins_ties: spec.later_wins_ties,
            row_number: spec.row_number.is_some(),
            changelog: spec.changelog,
            input_schema: Arc::clone(input),
            schema,
            keys,
            kept: HashMap::new(),
            rows: RowConverter::new(
                input
                    .fields()
                    .iter()
                    .map(|f| SortField::new(f.data_type().clone()))
                    .collect(),
            )?,
            key_groups: KeyGroupFilter::new(ctx),
        })
    }

    /// `rows` sorted (ties by position) and cut to the limit.
    fn best(&self, rows: &RecordBatch) -> Result<RecordBatch> {
        let mut columns: Vec<SortColumn> = self
            .order
            .iter()
            .map(|(i, o)| SortColumn {
                values: Arc::clone(rows.column(*i)),
                options: Some(*o),
            })
            .collect();
        columns.push(SortColumn {
            values: Arc::new(UInt32Array::from_iter_values(0..rows.num_rows() as u32)),
            options: Some(SortOptions {
                descending: self.later_wins_ties,
                nulls_first: false,
            }),
        });
        let index = lexsort_to_indices(&columns, Some(self.limit))?;
        Ok(arrow::compute::take_record_batch(rows, &index)?)
    }

    /// Output rows: the input columns, the row number, the change kind.
    fn output(
        &self,
        rows: &RecordBatch,
        numbers: &[u64],
        op: Option<&[&str]>,
    ) -> Result<RecordBatch> {
        let mut columns: Vec<ArrayRef> = rows.columns().to_vec();
        if self.row_number {
            columns.push(Arc::new(UInt64Array::from(numbers.to_vec())));
        }
        if let Some(op) = op {
            columns.push(Arc::new(StringArray::from(op.to_vec())));
        }
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }

    fn content(&self, rows: &RecordBatch) -> Result<Vec<OwnedRow>> {
        Ok(self
            .rows
            .convert_columns(rows.columns())?
            .iter()
            .map(|r| r.owned())
            .collect())
    }

    /// The changes from `old` to `new` kept rows of one key.
    fn changes(
        &self,
        old: Option<&RecordBatch>,
        new: &RecordBatch,
        out: &mut Vec<RecordBatch>,
    ) -> Result<()> {
        let empty = RecordBatch::new_empty(Arc::clone(&self.input_schema));
        let old = old.unwrap_or(&empty);
        let (old_content, new_content) = (self.content(old)?, self.content(new)?);
        // A row's identity: its content, and its position when numbered.
        let identity = |content: &[OwnedRow]| -> Vec<(OwnedRow, usize)> {
            content
                .iter()
                .enumerate()
                .map(|(i, r)| (r.clone(), if self.row_number { i } else { 0 }))
                .collect()
        };
        let (old_id, new_id) = (identity(&old_content), identity(&new_content));
        let mut remaining: HashMap<&(OwnedRow, usize), usize> = HashMap::new();
        for r in &new_id {
            *remaining.entry(r).or_default() += 1;
        }
        let mut removed = vec![];
        for (i, r) in old_id.iter().enumerate() {
            match remaining.get_mut(r) {
                Some(n) if *n > 0 => *n -= 1,
                _ => removed.push(i),
            }
        }
        let mut kept_old: HashMap<&(OwnedRow, usize), usize> = HashMap::new();
        for r in &old_id {
            *kept_old.entry(r).or_default() += 1;
        }
        let mut added = vec![];
        for (i, r) in new_id.iter().enumerate() {
            match kept_old.get_mut(r) {
                Some(n) if *n > 0 => *n -= 1,
                _ => added.push(i),
            }
        }
        let emit = |rows: &RecordBatch,
                    at: &[usize],
                    kind: &dyn Fn(usize) -> &'static str,
                    out: &mut Vec<RecordBatch>|
         -> Result<()> {
            if at.is_empty() {
                return Ok(());
            }
            let index = UInt32Array::from_iter_values(at.iter().map(|&i| i as u32));
            let picked = arrow::compute::take_record_batch(rows, &index)?;
            let numbers: Vec<u64> = at.iter().map(|&i| i as u64 + 1).collect();
            let kinds: Vec<&str> = at.iter().map(|&i| kind(i)).collect();
            out.push(self.output(&picked, &numbers, Some(&kinds))?);
            Ok(())
        };
        emit(
            old,
            &removed,
            &|i| {
                if new_content.contains(&old_content[i]) {
                    "-U"
                } else {
                    "-D"
                }
            },
            out,
        )?;
        emit(
            new,
            &added,
            &|i| {
                if old_content.contains(&new_content[i]) {
                    "+U"
                } else {
                    "+I"
                }
            },
            out,
        )?;
        Ok(())
    }

    fn process(&mut self, batch: &RecordBatch, out: &mut dyn Output) -> Result<()> {
        let key_columns: Vec<ArrayRef> = self
            .key_indices
            .iter()
            .map(|&i| Arc::clone(batch.column(i)))
            .collect();
        let encoded = self.keys.convert_columns(&key_columns)?;
        // Rows by key, keys in order of first appearance (borrowed bytes:
        // nothing allocated per row).
        let mut by_key: HashMap<&[u8], usize> = HashMap::new();
        let mut groups: Vec<(&[u8], Vec<u32>)> = vec![];
        for (i, r) in encoded.iter().enumerate() {
            let at = *by_key.entry(r.data()).or_insert_with(|| {
                groups.push((r.data(), vec![]));
                groups.len() - 1
            });
            groups[at].1.push(i as u32);
        }
        let mut emitted = vec![];
        for (key, rows) in groups {
            let fresh = arrow::compute::take_record_batch(batch, &UInt32Array::from(rows))?;
            let old = self.kept.get(key);
            let all = match old {
                Some(o) => concat_batches(&self.input_schema, [o, &fresh])?,
                None => fresh,
            };
            let new = self.best(&all)?;
            if self.changelog {
                self.changes(old, &new, &mut emitted)?;
            }
            self.kept.insert(key.into(), new);
        }
        for b in emitted {
            out.collect(b)?;
        }
        Ok(())
    }
}

impl Operator for TopNOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.process(&batch, out)
            .map_err(|e| WeirError::Execution(format!("{}: {e}", self.name)))
    }

    fn finish(&mut self, out: &mut dyn Output) -> Result<()> {
        if self.changelog {
            return Ok(());
        }
        for rows in self.kept.values() {
            let numbers: Vec<u64> = (1..=rows.num_rows() as u64).collect();
            out.collect(self.output(rows, &numbers, None)?)?;
        }
        Ok(())
    }

    fn metrics(&self) -> Vec<(String, u64)> {
        vec![("keys".into(), self.kept.len() as u64)]
    }

    fn snapshot_state(&mut self, _checkpoint: u64) -> Result<Vec<StateTable>> {
        let batch = concat_batches(&self.input_schema, self.kept.values())?;
        Ok(vec![
            StateTable::new("rows", batch).keyed(self.key_indices.iter().copied()),
        ])
    }

    fn restore_state(&mut self, tables: Vec<StateTable>) -> Result<()> {
        for t in tables {
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
                let r = self.process(&batch, &mut ignore);
                self.changelog = saved;
                r?;
            }
        }
        Ok(())
    }
}
