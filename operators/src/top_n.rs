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
//! Final rows ([`FinalRows`]) emit no changelog. A window Top-N (the key
//! includes the window end): each window's kept rows leave once, numbered,
//! when the watermark passes `window_end - 1`, and rows of a window already
//! emitted are late, as Flink's WindowRankOperator does. Keep-first
//! deduplication by rowtime: a key's earliest row leaves when the watermark
//! reaches its rowtime, rows behind the watermark are late, and an emitted
//! key drops every later row, as Flink's RowTimeDeduplicateKeepFirstRow-
//! Function does. Late rows are counted in `num_late_records_dropped`.
//!
//! Snapshots: table `rows` (every kept row, keyed by the key columns); with
//! final rows also `meta` (the watermark, as the window operators) and, for
//! keep-first, `emitted` (the key columns of every key emitted).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, RecordBatch, UInt32Array, UInt64Array};
use arrow::compute::{SortColumn, SortOptions, concat_batches, lexsort_to_indices};
use arrow::datatypes::SchemaRef;
use arrow::row::{OwnedRow, RowConverter, SortField};
use weir_core::changelog::RowKind;
use weir_core::spec::{FinalRows, TopNSpec};
use weir_core::{Result, WeirError};

use crate::process::now_ms;
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
    /// Bytes of `kept` (keys and batches), kept up to date as it changes:
    /// summing it for each metrics read visited every key.
    kept_bytes: usize,
    /// Encodes whole input rows, to compare old and new kept rows.
    rows: RowConverter,
    key_groups: KeyGroupFilter,
    /// Rows final once the watermark passes a time column (its index).
    final_rows: Option<Final>,
    /// The last watermark (final rows).
    watermark: i64,
    late: u64,
    /// Restored input rows the disk backend held back.
    replay: crate::spill::Replay,
    /// Keep-first by rowtime: the keys emitted (row-encoded), with when
    /// (processing time, ms).
    emitted: HashMap<Box<[u8]>, i64>,
    /// `table.exec.state.ttl` (ms), for every kind but window Top-N (whose
    /// windows leave with the watermark): a key not written for this long
    /// is forgotten, without output, as Flink's state TTL.
    ttl: Option<i64>,
    /// With a TTL: when each kept key was last written (ms).
    written: HashMap<Box<[u8]>, i64>,
    last_sweep: i64,
    /// The latest processing time seen (ms): when keys are emitted.
    clock: i64,
}

#[derive(Clone, Copy)]
enum Final {
    WindowEnd(usize),
    FirstByRowtime(usize),
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
            kept_bytes: 0,
            rows: RowConverter::new(
                input
                    .fields()
                    .iter()
                    .map(|f| SortField::new(f.data_type().clone()))
                    .collect(),
            )?,
            key_groups: KeyGroupFilter::new(ctx),
            final_rows: match &spec.final_rows {
                None => None,
                Some(FinalRows::WindowEnd(c)) => Some(Final::WindowEnd(input.index_of(c)?)),
                Some(FinalRows::FirstByRowtime(c)) => {
                    Some(Final::FirstByRowtime(input.index_of(c)?))
                }
            },
            watermark: i64::MIN,
            replay: Default::default(),
            late: 0,
            emitted: HashMap::new(),
            ttl: ctx
                .config
                .state
                .ttl
                .filter(|_| !matches!(spec.final_rows, Some(FinalRows::WindowEnd(_))))
                .map(|t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX)),
            written: HashMap::new(),
            last_sweep: now_ms(),
            clock: now_ms(),
        })
    }

    /// The times in `column` of `rows`, in milliseconds.
    fn times(&self, rows: &RecordBatch, column: usize) -> Result<Vec<Option<i64>>> {
        let ends = arrow::compute::cast(
            rows.column(column),
            &arrow::datatypes::DataType::Timestamp(arrow::datatypes::TimeUnit::Millisecond, None),
        )?;
        let ends = ends.as_primitive::<arrow::datatypes::TimestampMillisecondType>();
        Ok(ends.iter().collect())
    }

    /// Final rows: the rows of `batch` that are neither late (counted) nor
    /// of a key already emitted (keep-first; not counted).
    fn drop_late(&mut self, batch: RecordBatch) -> Result<RecordBatch> {
        let watermark = self.watermark;
        let (column, on_time): (usize, fn(i64, i64) -> bool) = match self.final_rows {
            None => return Ok(batch),
            Some(Final::WindowEnd(c)) => (c, |end, w| end - 1 > w),
            Some(Final::FirstByRowtime(c)) => (c, |t, w| t >= w),
        };
        let emitted = |this: &Self| -> Result<Option<Vec<bool>>> {
            if this.emitted.is_empty() {
                return Ok(None);
            }
            let keys = this.keys.convert_columns(&this.key_columns(&batch))?;
            Ok(Some(
                keys.iter()
                    .map(|k| this.emitted.contains_key(k.data()))
                    .collect(),
            ))
        };
        let done = emitted(self)?;
        let mut keep = Vec::with_capacity(batch.num_rows());
        for (i, t) in self.times(&batch, column)?.into_iter().enumerate() {
            let fresh = t.is_some_and(|t| on_time(t, watermark));
            self.late += u64::from(!fresh);
            keep.push(fresh && !done.as_ref().is_some_and(|d| d[i]));
        }
        let keep = arrow::array::BooleanArray::from(keep);
        Ok(arrow::compute::filter_record_batch(&batch, &keep)?)
    }

    fn key_columns(&self, batch: &RecordBatch) -> Vec<ArrayRef> {
        self.key_indices
            .iter()
            .map(|&i| Arc::clone(batch.column(i)))
            .collect()
    }

    /// Final rows: emit and forget every key the watermark made final —
    /// a closed window's rows, or a key's first row (remembered as
    /// emitted).
    fn emit_final(&mut self, out: &mut dyn Output) -> Result<()> {
        let Some(mode) = self.final_rows else {
            return Ok(());
        };
        let mut due = vec![];
        for (key, rows) in &self.kept {
            let first = rows.slice(0, 1.min(rows.num_rows()));
            let time = match mode {
                Final::WindowEnd(c) => self.times(&first, c)?[0].map(|e| e - 1),
                Final::FirstByRowtime(c) => self.times(&first, c)?[0],
            };
            if time.is_none_or(|t| t <= self.watermark) {
                due.push((time, key.clone()));
            }
        }
        // Earlier times first, all in one batch.
        due.sort();
        let mut batches = vec![];
        for (_, key) in due {
            if let Some(rows) = self.kept.remove(&key) {
                self.kept_bytes -= key.len() + rows.get_array_memory_size();
                let numbers: Vec<u64> = (1..=rows.num_rows() as u64).collect();
                batches.push(self.output(&rows, &numbers, None)?);
                if matches!(mode, Final::FirstByRowtime(_)) {
                    self.written.remove(&key);
                    self.emitted.insert(key, self.clock);
                }
            }
        }
        if !batches.is_empty() {
            out.collect(concat_batches(&self.schema, &batches)?)?;
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
        kinds: Option<&[RowKind]>,
    ) -> Result<RecordBatch> {
        let mut columns: Vec<ArrayRef> = rows.columns().to_vec();
        if self.row_number {
            columns.push(Arc::new(UInt64Array::from(numbers.to_vec())));
        }
        if let Some(kinds) = kinds {
            columns.push(weir_core::changelog::row_kind_array(kinds.iter().copied()));
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

    /// Deduplication keeping the last row (by the order column, ties to
    /// the later arrival) of one key's rows `all` (its kept row first when
    /// `has_old`), row by row in arrival order: every replacement is sent
    /// as `-U`/`+U`, as Flink's deduplicate function does — a batch does not
    /// fold a key's versions into one (an event-time temporal join reads
    /// each). Returns the row kept.
    fn keep_last_changes(
        &self,
        all: &RecordBatch,
        has_old: bool,
        out: &mut Vec<RecordBatch>,
    ) -> Result<RecordBatch> {
        let (column, options) = self.order[0];
        let order = all.column(column);
        let cmp = arrow::array::make_comparator(order.as_ref(), order.as_ref(), options)?;
        let mut current = has_old.then_some(0usize);
        let mut picks: Vec<u32> = vec![];
        let mut kinds: Vec<RowKind> = vec![];
        for r in usize::from(has_old)..all.num_rows() {
            match current {
                Some(c) if cmp(r, c) == std::cmp::Ordering::Greater => continue,
                Some(c) => {
                    picks.extend([c as u32, r as u32]);
                    kinds.extend([RowKind::UpdateBefore, RowKind::UpdateAfter]);
                }
                None => {
                    picks.push(r as u32);
                    kinds.push(RowKind::Insert);
                }
            }
            current = Some(r);
        }
        if !picks.is_empty() {
            let rows = arrow::compute::take_record_batch(all, &UInt32Array::from(picks))?;
            let numbers = vec![1; rows.num_rows()];
            out.push(self.output(&rows, &numbers, Some(&kinds))?);
        }
        let kept = current.unwrap_or(0) as u32;
        Ok(arrow::compute::take_record_batch(
            all,
            &UInt32Array::from(vec![kept]),
        )?)
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
        // A rank whose row changed is updated in place when ranks are
        // numbered or there is one (deduplication), as Flink's rank and
        // deduplicate functions send -U/+U for it.
        let at_rank = self.row_number || self.limit == 1;
        let emit = |rows: &RecordBatch,
                    at: &[usize],
                    kind: &dyn Fn(usize) -> RowKind,
                    out: &mut Vec<RecordBatch>|
         -> Result<()> {
            if at.is_empty() {
                return Ok(());
            }
            let index = UInt32Array::from_iter_values(at.iter().map(|&i| i as u32));
            let picked = arrow::compute::take_record_batch(rows, &index)?;
            let numbers: Vec<u64> = at.iter().map(|&i| i as u64 + 1).collect();
            let kinds: Vec<RowKind> = at.iter().map(|&i| kind(i)).collect();
            out.push(self.output(&picked, &numbers, Some(&kinds))?);
            Ok(())
        };
        emit(
            old,
            &removed,
            &|i| {
                if new_content.contains(&old_content[i]) || (at_rank && added.contains(&i)) {
                    RowKind::UpdateBefore
                } else {
                    RowKind::Delete
                }
            },
            out,
        )?;
        emit(
            new,
            &added,
            &|i| {
                if old_content.contains(&new_content[i]) || (at_rank && removed.contains(&i)) {
                    RowKind::UpdateAfter
                } else {
                    RowKind::Insert
                }
            },
            out,
        )?;
        Ok(())
    }

    fn process(&mut self, batch: &RecordBatch, now: i64, out: &mut dyn Output) -> Result<()> {
        self.clock = self.clock.max(now);
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
            if self.ttl.is_some() {
                self.written.insert(key.into(), now);
            }
            if self.changelog && self.limit == 1 && self.later_wins_ties {
                let new = self.keep_last_changes(&all, old.is_some(), &mut emitted)?;
                self.keep(key, new);
                continue;
            }
            let new = self.best(&all)?;
            if self.changelog {
                self.changes(old, &new, &mut emitted)?;
            }
            self.keep(key, new);
        }
        // One output batch for the input batch, not one per key touched:
        // downstream pays per batch, and a batch of new keys emitted as
        // many one-row batches.
        let emitted: Vec<RecordBatch> = emitted.into_iter().filter(|b| b.num_rows() > 0).collect();
        match emitted.len() {
            0 => {}
            1 => out.collect(emitted.into_iter().next().expect("one batch"))?,
            _ => out.collect(concat_batches(&self.schema, &emitted)?)?,
        }
        Ok(())
    }

    /// Keep `rows` as the rows of `key`.
    fn keep(&mut self, key: &[u8], rows: RecordBatch) {
        self.kept_bytes += key.len() + rows.get_array_memory_size();
        if let Some(old) = self.kept.insert(key.into(), rows) {
            self.kept_bytes -= key.len() + old.get_array_memory_size();
        }
    }

    /// Forget keys (kept rows, and keys emitted by keep-first) not written
    /// within the TTL, at most every tenth of it.
    fn sweep(&mut self, now: i64) {
        let Some(ttl) = self.ttl else { return };
        if now - self.last_sweep < (ttl / 10).max(10) {
            return;
        }
        self.last_sweep = now;
        self.clock = self.clock.max(now);
        let cutoff = now.saturating_sub(ttl);
        let written = &mut self.written;
        let bytes = &mut self.kept_bytes;
        self.kept.retain(|k, rows| match written.get(k) {
            Some(&t) if t < cutoff => {
                written.remove(k);
                *bytes -= k.len() + rows.get_array_memory_size();
                false
            }
            _ => true,
        });
        self.emitted.retain(|_, t| *t >= cutoff);
        if self.kept.capacity() / 4 > self.kept.len() {
            self.kept.shrink_to_fit();
            self.written.shrink_to_fit();
        }
        if self.emitted.capacity() / 4 > self.emitted.len() {
            self.emitted.shrink_to_fit();
        }
    }
}

impl TopNOperator {
    /// Restored pending rows first: their changes go out before the next
    /// input's.
    fn put_through_replay(&mut self, out: &mut dyn Output) -> Result<()> {
        for (_, batch) in self.replay.drain() {
            let now = now_ms();
            self.process(&batch, now, out)
                .map_err(|e| WeirError::Execution(format!("{}: {e}", self.name)))?;
        }
        Ok(())
    }
}

impl Operator for TopNOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        self.put_through_replay(out)?;
        let batch = self.drop_late(batch)?;
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let now = now_ms();
        self.sweep(now);
        self.process(&batch, now, out)
            .map_err(|e| WeirError::Execution(format!("{}: {e}", self.name)))
    }

    /// A streaming Top-N (and keep-last deduplication) spills by its key;
    /// final rows wait on the watermark, so they stay in memory.
    fn spill_keys(&self) -> Option<Vec<Vec<usize>>> {
        (self.changelog && self.final_rows.is_none()).then(|| vec![self.key_indices.clone()])
    }

    fn next_processing_timer(&self) -> Option<i64> {
        // With a TTL, sweep while no input comes too.
        self.ttl.map(|t| self.last_sweep + (t / 10).max(10))
    }

    fn on_processing_time(&mut self, now: i64, _out: &mut dyn Output) -> Result<()> {
        self.sweep(now);
        Ok(())
    }

    fn on_watermark(
        &mut self,
        watermark: weir_core::message::Watermark,
        out: &mut dyn Output,
    ) -> Result<Option<weir_core::message::Watermark>> {
        self.put_through_replay(out)?;
        if self.final_rows.is_some() {
            self.watermark = self.watermark.max(watermark.0);
            self.emit_final(out)?;
        }
        Ok(Some(watermark))
    }

    fn finish(&mut self, out: &mut dyn Output) -> Result<()> {
        self.put_through_replay(out)?;
        // Streaming Top-N emitted its changes; final rows leave at the
        // final watermark, and rows not final at a stop with a savepoint
        // stay in its state.
        if self.changelog || self.final_rows.is_some() {
            return Ok(());
        }
        for rows in self.kept.values() {
            let numbers: Vec<u64> = (1..=rows.num_rows() as u64).collect();
            out.collect(self.output(rows, &numbers, None)?)?;
        }
        Ok(())
    }

    fn metrics(&self) -> Vec<(String, u64)> {
        let bytes = self.kept_bytes;
        let mut m = vec![
            ("keys".into(), self.kept.len() as u64),
            ("state_bytes".into(), bytes as u64),
        ];
        if self.final_rows.is_some() {
            m.push(("num_late_records_dropped".into(), self.late));
        }
        m
    }

    fn snapshot_state(&mut self, _checkpoint: u64) -> Result<Vec<StateTable>> {
        let batch = concat_batches(&self.input_schema, self.kept.values())?;
        let mut tables =
            vec![StateTable::new("rows", batch).keyed(self.key_indices.iter().copied())];
        if self.final_rows.is_some() {
            tables.push(crate::window::meta_table(self.watermark)?);
        }
        if matches!(self.final_rows, Some(Final::FirstByRowtime(_))) {
            let parser = self.keys.parser();
            let keys = self
                .keys
                .convert_rows(self.emitted.keys().map(|k| parser.parse(k)))?;
            let fields: Vec<arrow::datatypes::FieldRef> = self
                .key_indices
                .iter()
                .map(|&i| Arc::clone(&self.input_schema.fields()[i]))
                .collect();
            let schema = Arc::new(arrow::datatypes::Schema::new(fields));
            let batch = RecordBatch::try_new_with_options(
                schema,
                keys,
                &arrow::array::RecordBatchOptions::new().with_row_count(Some(self.emitted.len())),
            )?;
            tables.push(StateTable::new("emitted", batch).keyed(0..self.key_indices.len()));
        }
        tables.extend(self.replay.tables(&[&self.key_indices]));
        Ok(tables)
    }

    fn restore_state(&mut self, tables: Vec<StateTable>) -> Result<()> {
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
                let keys = self.keys.convert_columns(batch.columns())?;
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
        top(2, FinalRows::WindowEnd("window_end".into()))
    }

    /// Keep-first deduplication by the first column (as rowtime), keyed by
    /// `v`.
    fn keep_first() -> TopNOperator {
        let spec = TopNSpec {
            keys: vec!["v".into()],
            order: vec![("window_end".into(), false, false)],
            later_wins_ties: false,
            limit: 1,
            row_number: Some("rn".into()),
            input_schema: input(),
            changelog: false,
            final_rows: Some(FinalRows::FirstByRowtime("window_end".into())),
        };
        operator(&spec)
    }

    fn top(limit: usize, final_rows: FinalRows) -> TopNOperator {
        let spec = TopNSpec {
            keys: vec!["window_end".into()],
            order: vec![("v".into(), true, false)],
            later_wins_ties: false,
            limit,
            row_number: Some("rn".into()),
            input_schema: input(),
            changelog: false,
            final_rows: Some(final_rows),
        };
        operator(&spec)
    }

    fn operator(spec: &TopNSpec) -> TopNOperator {
        operator_with(spec, WeirConfig::default())
    }

    fn operator_with(spec: &TopNSpec, config: WeirConfig) -> TopNOperator {
        let mut fields: Vec<Field> = input().fields().iter().map(|f| (**f).clone()).collect();
        fields.push(Field::new("rn", DataType::UInt64, false));
        let ctx = OperatorContext {
            task_name: "top".into(),
            subtask: 0,
            parallelism: 1,
            key_groups: KeyGroupRange::for_subtask(0, 1, 128),
            config,
            connectors: Default::default(),
            memory: Default::default(),
        };
        TopNOperator::try_new("top".into(), spec, Arc::new(Schema::new(fields)), &ctx).unwrap()
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
    fn keep_first_forgets_emitted_keys_past_the_state_ttl() {
        let mut config = WeirConfig::default();
        config.state.ttl = Some(std::time::Duration::from_millis(1000));
        let spec = TopNSpec {
            keys: vec!["v".into()],
            order: vec![("window_end".into(), false, false)],
            later_wins_ties: false,
            limit: 1,
            row_number: Some("rn".into()),
            input_schema: input(),
            changelog: false,
            final_rows: Some(FinalRows::FirstByRowtime("window_end".into())),
        };
        let mut op = operator_with(&spec, config);
        let mut biggest = 0;
        // Steady churn: 100 new keys per second of processing time for a
        // minute; each key's first row is emitted and remembered.
        let start = now_ms() + 10_000;
        for second in 0..60i64 {
            let now = start + second * 1000;
            let keys: Vec<i64> = (second * 100..(second + 1) * 100).collect();
            let mut out = vec![];
            op.process(&rows(&vec![second * 10; 100], &keys), now, &mut out)
                .unwrap();
            op.on_watermark(Watermark(second * 10), &mut out).unwrap();
            assert_eq!(emitted(&out).len(), 100);
            op.sweep(now + 500);
            biggest = biggest.max(op.emitted.len() + op.kept.len());
        }
        // A second and a half of keys at most, not a minute's.
        assert!(biggest <= 200, "keep-first held {biggest} keys");
        // An expired key's next row is emitted again (its state is gone).
        let mut out = vec![];
        op.process(&rows(&[700], &[0]), start + 70_000, &mut out)
            .unwrap();
        op.on_watermark(Watermark(700), &mut out).unwrap();
        assert_eq!(emitted(&out), [(700, 0, 1)]);
    }

    #[test]
    fn keep_last_sends_every_replacement_of_a_batch_in_arrival_order() {
        // Keyed by `v`, the last row by the first column (as rowtime).
        let spec = TopNSpec {
            keys: vec!["v".into()],
            order: vec![("window_end".into(), true, false)],
            later_wins_ties: true,
            limit: 1,
            row_number: Some("rn".into()),
            input_schema: input(),
            changelog: true,
            final_rows: None,
        };
        let mut fields: Vec<Field> = input().fields().iter().map(|f| (**f).clone()).collect();
        fields.push(Field::new("rn", DataType::UInt64, false));
        fields.push(weir_core::spec::row_kind_field());
        let ctx = OperatorContext {
            task_name: "dedup".into(),
            subtask: 0,
            parallelism: 1,
            key_groups: KeyGroupRange::for_subtask(0, 1, 128),
            config: WeirConfig::default(),
            connectors: Default::default(),
            memory: Default::default(),
        };
        let mut op =
            TopNOperator::try_new("dedup".into(), &spec, Arc::new(Schema::new(fields)), &ctx)
                .unwrap();
        let changes = |out: &[RecordBatch]| -> Vec<(String, i64)> {
            out.iter()
                .flat_map(|b| {
                    let t = b
                        .column(0)
                        .as_primitive::<arrow::datatypes::TimestampMillisecondType>();
                    let k = weir_core::changelog::row_kinds(b).unwrap();
                    (0..b.num_rows())
                        .map(|i| {
                            (
                                RowKind::from_i8(k.value(i)).unwrap().to_string(),
                                t.value(i),
                            )
                        })
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        let mut out: Vec<RecordBatch> = vec![];
        // An older row is ignored; an equal time replaces (later wins).
        op.process_batch(rows(&[10, 5, 20, 20], &[1, 1, 1, 1]), &mut out)
            .unwrap();
        assert_eq!(
            changes(&out),
            [
                ("+I".into(), 10),
                ("-U".into(), 10),
                ("+U".into(), 20),
                ("-U".into(), 20),
                ("+U".into(), 20)
            ]
        );
        out.clear();
        op.process_batch(rows(&[15, 30], &[1, 1]), &mut out)
            .unwrap();
        assert_eq!(changes(&out), [("-U".into(), 20), ("+U".into(), 30)]);
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
        assert!(
            op.metrics()
                .contains(&("num_late_records_dropped".into(), 1))
        );
        // The restored watermark drops the late row as well.
        let mut out: Vec<RecordBatch> = vec![];
        restored.process_batch(rows(&[10], &[1]), &mut out).unwrap();
        assert!(restored.kept.is_empty());
    }

    #[test]
    fn keep_first_emits_each_keys_earliest_row_once_the_watermark_reaches_it() {
        let mut op = keep_first();
        let mut out: Vec<RecordBatch> = vec![];
        // Key 1 arrives at 50, then earlier at 40 (which replaces it);
        // key 2 at 70.
        op.process_batch(rows(&[50, 70, 40], &[1, 2, 1]), &mut out)
            .unwrap();
        op.on_watermark(Watermark(39), &mut out).unwrap();
        assert!(out.is_empty());
        op.on_watermark(Watermark(40), &mut out).unwrap();
        assert_eq!(emitted(&out), [(40, 1, 1)]);
        out.clear();
        // Key 1 is done: a later row of it is ignored (not late); a row
        // behind the watermark is late.
        op.process_batch(rows(&[45, 30], &[1, 3]), &mut out)
            .unwrap();
        assert!(
            op.metrics()
                .contains(&("num_late_records_dropped".into(), 1))
        );
        let mut restored = keep_first();
        restored
            .restore_state(op.snapshot_state(1).unwrap())
            .unwrap();
        for op in [&mut op, &mut restored] {
            let mut out: Vec<RecordBatch> = vec![];
            op.process_batch(rows(&[80], &[1]), &mut out).unwrap();
            op.on_watermark(Watermark(100), &mut out).unwrap();
            assert_eq!(emitted(&out), [(70, 2, 1)], "key 1 stays emitted");
        }
    }
}
