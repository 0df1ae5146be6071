//! The event-time temporal join: SQL's `JOIN v FOR SYSTEM_TIME AS OF
//! l.rowtime` against a versioned table, as Flink's
//! `TemporalRowTimeJoinOperator` runs it.
//!
//! The right input's rows are versions: per key (row-encoded), a list
//! sorted by the version's event time of the right rows in Arrow's row
//! format — a later row at the same time replaces the earlier, a `-D` row
//! is a tombstone from its time on, `-U` rows are skipped (Flink feeds the
//! join updates without them). Left rows wait until the watermark passes
//! their time; then each joins the latest version of its key not after it,
//! found by binary search. A watermark's ready rows are worked as one
//! batch: their keys are encoded in one call, the residual condition runs
//! over all found pairs at once, and the output is gathered column-wise
//! (`take` for the left, one row-format decode for the right). Afterwards
//! every key with more than one version drops those the watermark has
//! made unreachable — all but the latest not after it — and a key whose
//! only remaining version is a tombstone is dropped.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch};
use arrow::compute::concat_batches;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{RowConverter, Rows, SortField};
use datafusion_physical_expr::PhysicalExpr;
use weir_core::message::Watermark;
use weir_core::spec::{JoinKind, TemporalJoinSpec};
use weir_core::{Result, WeirError};

use crate::join_side::decode_picks;
use crate::regular_join::Kind;
use crate::window::timestamps;
use crate::{Operator, OperatorContext, Output, StateTable};

/// One version of a key: the right row from `time` on.
struct Version {
    time: i64,
    row: Box<[u8]>,
    deleted: bool,
}

/// The temporal join of one subtask.
pub struct TemporalJoinOperator {
    name: String,
    kind: JoinKind,
    left_keys: Vec<usize>,
    right_keys: Vec<usize>,
    left_time: (usize, String),
    right_time: (usize, String),
    /// Data columns of the right input (without its row kind).
    right_width: usize,
    right_changelog: bool,
    key_converter: RowConverter,
    row_converter: RowConverter,
    right_data: SchemaRef,
    left_schema: SchemaRef,
    versions: HashMap<Box<[u8]>, Vec<Version>>,
    version_count: usize,
    /// Keys with more than one version or a tombstone: what a watermark
    /// may clean.
    dirty: HashSet<Box<[u8]>>,
    /// Left rows the watermark has not passed.
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    watermark: i64,
    residual: Option<Arc<dyn PhysicalExpr>>,
    output_schema: SchemaRef,
    batch_size: usize,
    filter: crate::KeyGroupFilter,
    versions_max: u64,
}

impl TemporalJoinOperator {
    /// Build the operator for one subtask.
    pub fn try_new(
        name: String,
        spec: &TemporalJoinSpec,
        output_schema: SchemaRef,
        ctx: &OperatorContext,
    ) -> Result<Self> {
        spec.validate()?;
        let left_keys = crate::column_indices(&spec.left_schema, &spec.left_keys)?;
        let right_keys = crate::column_indices(&spec.right_schema, &spec.right_keys)?;
        let key_converter = RowConverter::new(
            left_keys
                .iter()
                .map(|&i| SortField::new(spec.left_schema.field(i).data_type().clone()))
                .collect(),
        )?;
        let right_data = Arc::new(Schema::new(weir_core::join_spec::data_fields(
            &spec.right_schema,
        )));
        let row_converter = RowConverter::new(
            right_data
                .fields()
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )?;
        Ok(Self {
            name,
            kind: spec.kind,
            left_time: (
                spec.left_schema.index_of(&spec.left_rowtime)?,
                spec.left_rowtime.clone(),
            ),
            right_time: (
                spec.right_schema.index_of(&spec.right_rowtime)?,
                spec.right_rowtime.clone(),
            ),
            left_keys,
            right_keys,
            right_width: right_data.fields().len(),
            right_changelog: weir_core::spec::is_changelog_schema(&spec.right_schema),
            key_converter,
            row_converter,
            right_data,
            left_schema: Arc::clone(&spec.left_schema),
            versions: HashMap::new(),
            version_count: 0,
            dirty: HashSet::new(),
            pending: Vec::new(),
            pending_rows: 0,
            watermark: i64::MIN,
            residual: spec.residual.clone(),
            output_schema,
            batch_size: ctx.config.batch_size.max(1),
            filter: crate::KeyGroupFilter::new(ctx),
            versions_max: 0,
        })
    }

    /// Versions kept, over all keys.
    pub fn kept_versions(&self) -> usize {
        self.version_count
    }

    fn encode_keys(&self, batch: &RecordBatch, keys: &[usize]) -> Result<(Rows, Vec<bool>)> {
        let columns: Vec<ArrayRef> = keys.iter().map(|&i| Arc::clone(batch.column(i))).collect();
        let rows = self.key_converter.convert_columns(&columns)?;
        // Rows with a NULL key match nothing: one pass only over key
        // columns that have NULLs.
        let mut null = vec![false; batch.num_rows()];
        for c in columns.iter().filter(|c| c.null_count() > 0) {
            for (r, n) in null.iter_mut().enumerate() {
                *n |= c.is_null(r);
            }
        }
        Ok((rows, null))
    }

    /// New versions from a batch of the right input (`deleted` per row
    /// given for restored tombstones).
    fn add_versions(&mut self, batch: &RecordBatch, deleted: Option<&BooleanArray>) -> Result<()> {
        let (keys, null) = self.encode_keys(batch, &self.right_keys)?;
        let rows = self
            .row_converter
            .convert_columns(&batch.columns()[..self.right_width])?;
        let times = timestamps(batch.column(self.right_time.0), &self.right_time.1)?;
        let kinds = if self.right_changelog && deleted.is_none() {
            let ops = weir_core::changelog::row_kinds(batch)
                .map_err(|e| WeirError::Execution(format!("{}: {e}", self.name)))?;
            Some(ops)
        } else {
            None
        };
        for (i, &time) in times.iter().enumerate() {
            if null[i] {
                continue;
            }
            let tombstone = match (kinds, deleted) {
                (Some(ops), _) => {
                    match Kind::from_i8(ops.value(i))
                        .map_err(|e| WeirError::Execution(format!("{}: {e}", self.name)))?
                    {
                        Kind::UpdateBefore => continue,
                        k => !k.is_addition(),
                    }
                }
                (None, Some(d)) => d.value(i),
                (None, None) => false,
            };
            let key = keys.row(i);
            let version = Version {
                time,
                row: rows.row(i).as_ref().into(),
                deleted: tombstone,
            };
            let list = match self.versions.get_mut(key.as_ref()) {
                Some(l) => l,
                None => self.versions.entry(key.as_ref().into()).or_default(),
            };
            let at = list.partition_point(|v| v.time < time);
            if list.get(at).is_some_and(|v| v.time == time) {
                list[at] = version;
            } else {
                list.insert(at, version);
                self.version_count += 1;
            }
            if list.len() > 1 || tombstone {
                self.dirty.insert(key.as_ref().into());
            }
        }
        self.versions_max = self.versions_max.max(self.version_count as u64);
        Ok(())
    }

    /// Join the left rows the watermark `wm` has passed.
    fn emit_ready(&mut self, wm: i64, out: &mut dyn Output) -> Result<()> {
        if self.pending_rows == 0 {
            return Ok(());
        }
        let time = (self.left_time.0, self.left_time.1.as_str());
        let ready = crate::window::take_ready(&mut self.pending, &self.left_schema, time, wm)?;
        self.pending_rows = self.pending.iter().map(RecordBatch::num_rows).sum();
        let Some(batch) = ready else {
            return Ok(());
        };
        let times = timestamps(batch.column(self.left_time.0), &self.left_time.1)?;
        let (keys, null) = self.encode_keys(&batch, &self.left_keys)?;
        // Each row's version, if its key had a live one at its time.
        let mut picks: Vec<Option<&[u8]>> = (0..batch.num_rows())
            .map(|i| {
                if null[i] {
                    return None;
                }
                let list = self.versions.get(keys.row(i).as_ref())?;
                let at = list.partition_point(|v| v.time <= times[i]);
                let v = list.get(at.checked_sub(1)?)?;
                (!v.deleted).then_some(&*v.row)
            })
            .collect();
        if let Some(residual) = &self.residual {
            let found: Vec<u32> = (0..picks.len() as u32)
                .filter(|&i| picks[i as usize].is_some())
                .collect();
            if !found.is_empty() {
                let pairs = pairs_batch(
                    &self.output_schema,
                    &batch,
                    &found,
                    decode_picks(
                        &self.row_converter,
                        found.iter().map(|&i| picks[i as usize]),
                    )?,
                )?;
                let keep = residual.evaluate(&pairs)?.into_array(pairs.num_rows())?;
                let keep = keep.as_boolean_opt().ok_or_else(|| {
                    WeirError::Execution(format!(
                        "{}: the join condition is not BOOLEAN",
                        self.name
                    ))
                })?;
                for (j, &i) in found.iter().enumerate() {
                    if !(keep.is_valid(j) && keep.value(j)) {
                        picks[i as usize] = None;
                    }
                }
            }
        }
        let rows: Vec<u32> = match self.kind {
            JoinKind::Left => (0..picks.len() as u32).collect(),
            _ => (0..picks.len() as u32)
                .filter(|&i| picks[i as usize].is_some())
                .collect(),
        };
        if rows.is_empty() {
            return Ok(());
        }
        let right = decode_picks(&self.row_converter, rows.iter().map(|&i| picks[i as usize]))?;
        let output = pairs_batch(&self.output_schema, &batch, &rows, right)?;
        crate::pane_buffer::emit_sliced(&output, self.batch_size, out)
    }

    /// Drop the versions no left row at or after `wm` can reach.
    fn clean(&mut self, wm: i64) {
        let (versions, count) = (&mut self.versions, &mut self.version_count);
        self.dirty.retain(|key| {
            let Some(list) = versions.get_mut(key) else {
                return false;
            };
            let reachable = list.partition_point(|v| v.time <= wm).saturating_sub(1);
            list.drain(..reachable);
            *count -= reachable;
            if list.len() == 1 && list[0].deleted && list[0].time <= wm {
                versions.remove(key);
                *count -= 1;
                return false;
            }
            list.len() > 1 || list.iter().any(|v| v.deleted)
        });
    }

    fn state_schema(&self) -> SchemaRef {
        let mut fields: Vec<Field> = self
            .right_data
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new("__deleted", DataType::Boolean, false));
        Arc::new(Schema::new(fields))
    }
}

/// Output rows: the left batch's `rows`, then the right columns.
fn pairs_batch(
    schema: &SchemaRef,
    left: &RecordBatch,
    rows: &[u32],
    right: Vec<ArrayRef>,
) -> Result<RecordBatch> {
    let mut columns = crate::regular_join::gather_this(left, left.num_columns(), rows)?;
    columns.extend(right);
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

impl Operator for TemporalJoinOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        self.process_input(0, batch, out)
    }

    fn process_input(
        &mut self,
        input: usize,
        batch: RecordBatch,
        _out: &mut dyn Output,
    ) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if input == 0 {
            // A left row waits for the watermark, even one already behind
            // it: it joins at the next one (as Flink's timers fire).
            self.pending_rows += batch.num_rows();
            self.pending.push(batch);
            Ok(())
        } else {
            self.add_versions(&batch, None)
        }
    }

    fn on_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut dyn Output,
    ) -> Result<Option<Watermark>> {
        if watermark.0 <= self.watermark {
            return Ok(None);
        }
        self.watermark = watermark.0;
        self.emit_ready(watermark.0, out)?;
        self.clean(watermark.0);
        Ok(Some(watermark))
    }

    fn finish(&mut self, out: &mut dyn Output) -> Result<()> {
        self.emit_ready(i64::MAX, out)
    }

    /// Tables `left` (rows waiting for the watermark, keyed by the join
    /// key), `right` (every kept version: the right input's data columns
    /// and `__deleted`, true for a tombstone) and `meta` (the watermark).
    fn snapshot_state(&mut self, _checkpoint: u64) -> Result<Vec<StateTable>> {
        let left = concat_batches(&self.left_schema, &self.pending)?;
        let all: Vec<&Version> = self.versions.values().flatten().collect();
        let mut columns = decode_picks(&self.row_converter, all.iter().map(|v| Some(&*v.row)))?;
        columns.push(Arc::new(BooleanArray::from_iter(
            all.iter().map(|v| Some(v.deleted)),
        )));
        let right = RecordBatch::try_new(self.state_schema(), columns)?;
        Ok(vec![
            StateTable::new("left", left).keyed(self.left_keys.iter().copied()),
            StateTable::new("right", right).keyed(self.right_keys.iter().copied()),
            crate::window::meta_table(self.watermark)?,
        ])
    }

    fn restore_state(&mut self, tables: Vec<StateTable>) -> Result<()> {
        let keys = [self.left_keys.clone(), self.right_keys.clone()];
        let (rows, watermark) =
            crate::restore_two_inputs(&self.name, tables, [&keys[0], &keys[1]], self.filter)?;
        for (input, batch) in rows {
            if input == 0 {
                self.pending_rows += batch.num_rows();
                self.pending.push(batch);
                continue;
            }
            let deleted = (batch.num_columns() == self.right_width + 1)
                .then(|| batch.column(self.right_width).as_boolean_opt().cloned())
                .flatten()
                .ok_or_else(|| {
                    WeirError::Execution(format!(
                        "{}: state table 'right' has columns ({}), expected ({})",
                        self.name,
                        weir_core::time::column_list(&batch.schema()),
                        weir_core::time::column_list(&self.state_schema())
                    ))
                })?;
            self.add_versions(&batch, Some(&deleted))?;
        }
        if let Some(w) = watermark {
            self.watermark = w;
        }
        Ok(())
    }

    fn metrics(&self) -> Vec<(String, u64)> {
        vec![
            ("versions_max".into(), self.versions_max),
            ("buffered_rows".into(), self.pending_rows as u64),
        ]
    }
}

#[cfg(test)]
#[path = "temporal_join_tests.rs"]
mod tests;
