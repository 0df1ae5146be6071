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
//! A window Top-N (the key includes the window end) emits no changelog:
//! each window's kept rows leave once, numbered, when the watermark passes
//! `window_end - 1`, and rows of a window already emitted are dropped as
//! late (counted in `num_late_records_dropped`), as Flink's
//! WindowRankOperator does.
//!
//! Snapshots: table `rows` (every kept row, keyed by the key columns); a
//! window Top-N also `meta` (its watermark, as the window operators).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, RecordBatch, StringArray, UInt32Array, UInt64Array};
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
    /// Window Top-N: the window-end column (a key column).
    window_end: Option<usize>,
    /// The last watermark (window Top-N).
    watermark: i64,
    late: u64,
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
            window_end: spec
                .window_end
                .as_ref()
                .map(|c| input.index_of(c))
                .transpose()?,
            watermark: i64::MIN,
            late: 0,
        })
    }

    /// The window ends of `rows` (a window Top-N's), in milliseconds.
    fn window_ends(&self, rows: &RecordBatch, column: usize) -> Result<Vec<Option<i64>>> {
        let ends = arrow::compute::cast(
            rows.column(column),
            &arrow::datatypes::DataType::Timestamp(arrow::datatypes::TimeUnit::Millisecond, None),
        )?;
        let ends = ends.as_primitive::<arrow::datatypes::TimestampMillisecondType>();
        Ok(ends.iter().collect())
    }

    /// Window Top-N: the rows of `batch` whose window is still open.
    fn open_windows(&mut self, batch: RecordBatch) -> Result<RecordBatch> {
        let Some(column) = self.window_end else {
            return Ok(batch);
        };
        let watermark = self.watermark;
        let open: arrow::array::BooleanArray = self
            .window_ends(&batch, column)?
            .into_iter()
            .map(|end| Some(end.is_some_and(|e| e - 1 > watermark)))
            .collect();
        let kept = arrow::compute::filter_record_batch(&batch, &open)?;
        self.late += (batch.num_rows() - kept.num_rows()) as u64;
        Ok(kept)
    }

    /// Window Top-N: emit and forget every window the watermark closed.
    fn close_windows(&mut self, out: &mut dyn Output) -> Result<()> {
        let Some(column) = self.window_end else {
            return Ok(());
        };
        let mut closed = vec![];
        for (key, rows) in &self.kept {
            let end = self.window_ends(&rows.slice(0, 1.min(rows.num_rows())), column)?;
            if end
                .first()
                .copied()
                .flatten()
                .is_none_or(|e| e - 1 <= self.watermark)
            {
                closed.push((end.first().copied().flatten(), key.clone()));
            }
        }
        // Earlier windows first.
        closed.sort();
        for (_, key) in closed {
            if let Some(rows) = self.kept.remove(&key) {
                let numbers: Vec<u64> = (1..=rows.num_rows() as u64).collect();
                out.collect(self.output(&rows, &numbers, None)?)?;
            }
        }
        Ok(())
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
        let batch = self.open_windows(batch)?;
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.process(&batch, out)
            .map_err(|e| WeirError::Execution(format!("{}: {e}", self.name)))
    }

    fn on_watermark(
        &mut self,
        watermark: weir_core::message::Watermark,
        out: &mut dyn Output,
    ) -> Result<Option<weir_core::message::Watermark>> {
        if self.window_end.is_some() {
            self.watermark = self.watermark.max(watermark.0);
            self.close_windows(out)?;
        }
        Ok(Some(watermark))
    }

    fn finish(&mut self, out: &mut dyn Output) -> Result<()> {
        // Streaming Top-N emitted its changes; a window Top-N emits at the
        // final watermark, and windows still open at a stop with a
        // savepoint stay in its state.
        if self.changelog || self.window_end.is_some() {
            return Ok(());
        }
        for rows in self.kept.values() {
            let numbers: Vec<u64> = (1..=rows.num_rows() as u64).collect();
            out.collect(self.output(rows, &numbers, None)?)?;
        }
        Ok(())
    }

    fn metrics(&self) -> Vec<(String, u64)> {
        let mut m = vec![("keys".into(), self.kept.len() as u64)];
        if self.window_end.is_some() {
            m.push(("num_late_records_dropped".into(), self.late));
        }
        m
    }

    fn snapshot_state(&mut self, _checkpoint: u64) -> Result<Vec<StateTable>> {
        let batch = concat_batches(&self.input_schema, self.kept.values())?;
        let mut tables =
            vec![StateTable::new("rows", batch).keyed(self.key_indices.iter().copied())];
        if self.window_end.is_some() {
            tables.push(crate::window::meta_table(self.watermark)?);
        }
        Ok(tables)
    }

    fn restore_state(&mut self, tables: Vec<StateTable>) -> Result<()> {
        let mut watermark = None;
        for t in tables {
            if t.name == "meta" && self.window_end.is_some() {
                crate::window::restore_meta(&self.name, &t.batch, &mut watermark)?;
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
                let r = self.process(&batch, &mut ignore);
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

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, TimestampMillisecondArray};
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use weir_core::config::WeirConfig;
    use weir_core::keys::KeyGroupRange;
    use weir_core::message::Watermark;

    fn input() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new(
                "window_end",
                DataType::Timestamp(TimeUnit::Millisecond, None),
                false,
            ),
            Field::new("v", DataType::Int64, false),
        ]))
    }

    fn window_top_2() -> TopNOperator {
        let spec = TopNSpec {
            keys: vec!["window_end".into()],
            order: vec![("v".into(), true, false)],
            later_wins_ties: false,
            limit: 2,
            row_number: Some("rn".into()),
            input_schema: input(),
            changelog: false,
            window_end: Some("window_end".into()),
        };
        let mut fields: Vec<Field> = input().fields().iter().map(|f| (**f).clone()).collect();
        fields.push(Field::new("rn", DataType::UInt64, false));
        let ctx = OperatorContext {
            task_name: "top".into(),
            subtask: 0,
            parallelism: 1,
            key_groups: KeyGroupRange::for_subtask(0, 1, 128),
            config: WeirConfig::default(),
            connectors: Default::default(),
        };
        TopNOperator::try_new("top".into(), &spec, Arc::new(Schema::new(fields)), &ctx).unwrap()
    }

    fn rows(ends: &[i64], values: &[i64]) -> RecordBatch {
        RecordBatch::try_new(
            input(),
            vec![
                Arc::new(TimestampMillisecondArray::from(ends.to_vec())),
                Arc::new(Int64Array::from(values.to_vec())),
            ],
        )
        .unwrap()
    }

    /// (window end, value, rank) of the emitted rows.
    fn emitted(out: &[RecordBatch]) -> Vec<(i64, i64, u64)> {
        out.iter()
            .flat_map(|b| {
                let e = b
                    .column(0)
                    .as_primitive::<arrow::datatypes::TimestampMillisecondType>();
                let v = b.column(1).as_primitive::<arrow::datatypes::Int64Type>();
                let r = b.column(2).as_primitive::<arrow::datatypes::UInt64Type>();
                (0..b.num_rows())
                    .map(|i| (e.value(i), v.value(i), r.value(i)))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn window_top_n_emits_each_window_once_when_it_closes() {
        let mut op = window_top_2();
        let mut out: Vec<RecordBatch> = vec![];
        op.process_batch(rows(&[10, 10, 20, 10], &[5, 9, 1, 7]), &mut out)
            .unwrap();
        assert!(out.is_empty(), "nothing before the window closes");
        // Not yet: window 10 closes once the watermark reaches 9.
        op.on_watermark(Watermark(8), &mut out).unwrap();
        assert!(out.is_empty());
        op.on_watermark(Watermark(9), &mut out).unwrap();
        assert_eq!(emitted(&out), [(10, 9, 1), (10, 7, 2)]);
        // A late row of the closed window is dropped; the open one ranks.
        out.clear();
        op.process_batch(rows(&[10, 20], &[100, 3]), &mut out)
            .unwrap();
        let snapshot = op.snapshot_state(1).unwrap();
        let mut restored = window_top_2();
        restored.restore_state(snapshot).unwrap();
        for op in [&mut op, &mut restored] {
            let mut out: Vec<RecordBatch> = vec![];
            op.on_watermark(Watermark(30), &mut out).unwrap();
            assert_eq!(emitted(&out), [(20, 3, 1), (20, 1, 2)]);
            assert!(op.kept.is_empty());
        }
        assert_eq!(op.metrics()[1], ("num_late_records_dropped".into(), 1));
        // The restored watermark drops the late row as well.
        let mut out: Vec<RecordBatch> = vec![];
        restored.process_batch(rows(&[10], &[1]), &mut out).unwrap();
        assert!(restored.kept.is_empty());
    }
}
