//! The regular join: SQL's `[INNER | LEFT | RIGHT | FULL] JOIN … ON` of any
//! two inputs, append-only or changelogs, as Flink's
//! `StreamingJoinOperator` runs it.
//!
//! Each side keeps its rows per join key ([`crate::join_side`]): a
//! changelog side as a multiset, each distinct row in Arrow's row format
//! with how often it is in the input's table; an append-only side columnar,
//! in its input's batches, each row its own entry; an outer side's rows
//! also count how many rows of the other side they pair. A batch of one
//! side is worked in three vectorized steps and one pass over its rows: its
//! keys are interned into the key table shared by both sides in one call;
//! its rows are taken in at once (encoded in one call, or put in the
//! store); the candidate pairs of the whole batch are gathered (the other
//! side's rows do not change while a batch of this side is worked) and the
//! residual condition is evaluated over them as one batch. The pass then
//! applies each row in arrival order (a row retracted later in the same
//! batch finds itself) and records the output rows, which are gathered
//! column-wise at the end: `take` for this side, one row-format decode or
//! one `interleave` per column for the other.
//!
//! Row kinds follow Flink: an inner join forwards its input's kind; an
//! outer join sends `+I` and `-D` only, retracting a NULL-padded row when
//! its first partner arrives and sending it again when its last one goes.
//! Keys with a NULL never match. With `state_ttl_ms`, a row not written for
//! that long (processing time) is dropped without output, as Flink's state
//! TTL does.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, RecordBatch, UInt32Array};
use arrow::compute::take;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion_physical_plan::aggregates::group_values::GroupValues;
use weir_core::spec::{JoinKind, RegularJoinSpec};
use weir_core::{Result, WeirError};

use crate::join_side::{Arriving, Incoming, Side};
use crate::process::now_ms;
use crate::{Operator, OperatorContext, Output, StateTable};

pub(crate) use weir_core::changelog::RowKind as Kind;

/// The candidate pairs of a batch: `offsets[r]..offsets[r + 1]` index the
/// `(key, entry)` pairs of row `r`.
struct Candidates {
    offsets: Vec<usize>,
    pairs: Vec<(usize, usize)>,
}

/// Where an output row's columns of one side come from.
#[derive(Clone, Copy)]
enum Pick {
    Null,
    /// Row `n` of the batch being worked.
    This(u32),
    /// Entry `e` of key `k` on the other side.
    Other(usize, usize),
}

/// The output rows of one batch, gathered at the end.
#[derive(Default)]
struct Emitted {
    this: Vec<Option<u32>>,
    other: Vec<Option<(usize, usize)>>,
    kinds: Vec<Kind>,
}

impl Emitted {
    fn push(&mut self, this: Pick, other: Pick, kind: Kind, times: u32) {
        for _ in 0..times {
            self.this.push(match this {
                Pick::This(r) => Some(r),
                _ => None,
            });
            self.other.push(match other {
                Pick::Other(k, e) => Some((k, e)),
                _ => None,
            });
            self.kinds.push(kind);
        }
    }
}

/// The regular join operator of one subtask.
pub struct RegularJoinOperator {
    name: String,
    kind: JoinKind,
    sides: [Side; 2],
    keys: Box<dyn GroupValues>,
    /// The key columns' schema (the key table is rebuilt from it).
    key_schema: SchemaRef,
    /// Whether key id `k` has a NULL in it (never matches).
    null_key: Vec<bool>,
    residual: Option<Residual>,
    output_schema: SchemaRef,
    updating: bool,
    /// Batch mode: keep rows, join once at the end of input.
    bounded: bool,
    /// Restored input rows the disk backend held back.
    replay: crate::spill::Replay,
    ttl: Option<i64>,
    last_sweep: i64,
    batch_size: usize,
    key_ids: Vec<usize>,
    filter: crate::KeyGroupFilter,
    state_bytes_max: u64,
    /// Key table size at which to look for keys with no rows left.
    next_compaction: usize,
}

impl RegularJoinOperator {
    /// Build the operator for one subtask.
    pub fn try_new(
        name: String,
        spec: &RegularJoinSpec,
        output_schema: SchemaRef,
        ctx: &OperatorContext,
    ) -> Result<Self> {
        spec.validate()?;
        let timed = spec.state_ttl_ms.is_some();
        let left = Side::new(
            &spec.left_schema,
            &spec.left_keys,
            spec.kind.outer(0),
            timed,
        )?;
        let right = Side::new(
            &spec.right_schema,
            &spec.right_keys,
            spec.kind.outer(1),
            timed,
        )?;
        let key_schema = Arc::new(spec.left_schema.project(&left.key_indices)?);
        let residual = match &spec.residual {
            Some(r) => Some(Residual::new(r, &spec.pair_schema(), left.width)?),
            None => None,
        };
        Ok(Self {
            name,
            kind: spec.kind,
            sides: [left, right],
            keys: crate::key_table::lasting(&key_schema)?,
            key_schema,
            null_key: Vec::new(),
            residual,
            output_schema,
            updating: spec.updating(),
            bounded: spec.bounded,
            replay: Default::default(),
            ttl: spec.state_ttl_ms,
            last_sweep: now_ms(),
            batch_size: ctx.config.batch_size.max(1),
            key_ids: Vec::new(),
            filter: crate::KeyGroupFilter::new(ctx),
            state_bytes_max: 0,
            next_compaction: 0,
        })
    }

    /// Distinct rows kept on the left and on the right.
    pub fn kept_rows(&self) -> (usize, usize) {
        (self.sides[0].entries, self.sides[1].entries)
    }

    /// Intern the keys of `batch` (side `input`) into `self.key_ids`.
    fn intern(&mut self, input: usize, batch: &RecordBatch) -> Result<()> {
        let keys: Vec<ArrayRef> = self.sides[input]
            .key_indices
            .iter()
            .map(|&i| Arc::clone(batch.column(i)))
            .collect();
        let mut ids = std::mem::take(&mut self.key_ids);
        self.keys.intern(&keys, &mut ids)?;
        let n = self.keys.len();
        if self.null_key.len() < n {
            self.null_key.resize(n, false);
        }
        if keys.iter().any(|k| k.null_count() > 0) {
            for (row, &id) in ids.iter().enumerate() {
                if keys.iter().any(|k| k.is_null(row)) {
                    self.null_key[id] = true;
                }
            }
        }
        self.key_ids = ids;
        Ok(())
    }

    /// Pairs of a whole batch: for each row, the other side's entries its
    /// key and the residual condition admit (`offsets` delimit each row's).
    fn candidates(&self, input: usize, batch: &RecordBatch, now: i64) -> Result<Candidates> {
        let other = &self.sides[1 - input];
        let fresh = |p| self.ttl.is_none_or(|t| other.written(p, now) >= now - t);
        let mut offsets = Vec::with_capacity(batch.num_rows() + 1);
        let mut pairs: Vec<(usize, usize)> = Vec::new();
        let mut rows: Vec<u32> = Vec::new();
        offsets.push(0);
        for (row, &k) in self.key_ids.iter().enumerate() {
            if !self.null_key[k] {
                for e in 0..other.len_of(k) {
                    if fresh((k, e)) {
                        pairs.push((k, e));
                        rows.push(row as u32);
                    }
                }
            }
            offsets.push(pairs.len());
        }
        let Some(residual) = &self.residual else {
            return Ok(Candidates { offsets, pairs });
        };
        if pairs.is_empty() {
            return Ok(Candidates { offsets, pairs });
        }
        // The residual over every candidate pair at once, the columns it
        // reads gathered (not every column of both sides: Nexmark q4 and q9
        // compare three timestamps of pairs of wide rows).
        let idx = UInt32Array::from(rows);
        let this_cols = residual.columns[input]
            .iter()
            .map(|&c| take(batch.column(c).as_ref(), &idx, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let other_cols =
            other.gather_columns(pairs.iter().map(|&p| Some(p)), &residual.columns[1 - input])?;
        let columns = if input == 0 {
            [this_cols, other_cols].concat()
        } else {
            [other_cols, this_cols].concat()
        };
        let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(pairs.len()));
        let candidates =
            RecordBatch::try_new_with_options(Arc::clone(&residual.schema), columns, &options)
                .map_err(|e| WeirError::Execution(format!("{}: {e}", self.name)))?;
        let keep = residual
            .expr
            .evaluate(&candidates)?
            .into_array(candidates.num_rows())?;
        let keep = keep.as_boolean_opt().ok_or_else(|| {
            WeirError::Execution(format!("{}: the join condition is not BOOLEAN", self.name))
        })?;
        let mut kept_offsets = Vec::with_capacity(offsets.len());
        let mut kept = Vec::new();
        kept_offsets.push(0);
        for w in offsets.windows(2) {
            for (i, &pair) in pairs.iter().enumerate().take(w[1]).skip(w[0]) {
                if keep.is_valid(i) && keep.value(i) {
                    kept.push(pair);
                }
            }
            kept_offsets.push(kept.len());
        }
        Ok(Candidates {
            offsets: kept_offsets,
            pairs: kept,
        })
    }

    /// Work one batch of input `input` at processing time `now`.
    fn process(
        &mut self,
        input: usize,
        batch: RecordBatch,
        now: i64,
        out: &mut dyn Output,
    ) -> Result<()> {
        crate::two_inputs(&self.name, input)?;
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.sweep(now)?;
        let kinds: Option<Vec<Kind>> = if self.sides[input].changelog {
            let op = weir_core::changelog::row_kinds(&batch)
                .map_err(|e| WeirError::Execution(format!("{}: {e}", self.name)))?;
            Some(
                op.values()
                    .iter()
                    .map(|&k| Kind::from_i8(k))
                    .collect::<Result<_>>()
                    .map_err(|e| WeirError::Execution(format!("{}: {e}", self.name)))?,
            )
        } else {
            None
        };
        self.intern(input, &batch)?;
        let keep: Vec<bool> = self.key_ids.iter().map(|&k| !self.null_key[k]).collect();
        let rows = self.sides[input].take_in(&batch, &keep)?;
        if self.bounded {
            return self.keep(input, &batch, kinds.as_deref(), &rows, now, out);
        }
        let Candidates { offsets, pairs } = self.candidates(input, &batch, now)?;
        let inner = self.kind == JoinKind::Inner;
        let (this_outer, other_outer) = (self.sides[input].outer, self.sides[1 - input].outer);
        let mut emitted = Emitted::default();
        let key_ids = std::mem::take(&mut self.key_ids);
        for (row, &k) in key_ids.iter().enumerate() {
            let kind = kinds.as_ref().map_or(Kind::Insert, |v| v[row]);
            let matched = &pairs[offsets[row]..offsets[row + 1]];
            let me = Pick::This(row as u32);
            let bytes = rows.row(row);
            let (this_side, other_side) = split(&mut self.sides, input);
            let partners: u32 = matched.iter().map(|&p| other_side.count(p)).sum();
            if kind.is_addition() {
                if matched.is_empty() {
                    if this_outer {
                        emitted.push(me, Pick::Null, Kind::Insert, 1);
                    }
                } else {
                    if other_outer {
                        for &(k, e) in matched {
                            let assoc = other_side.assoc((k, e));
                            if assoc == 0 {
                                let times = other_side.count((k, e));
                                emitted.push(Pick::Null, Pick::Other(k, e), Kind::Delete, times);
                            }
                            other_side.set_assoc((k, e), assoc + 1);
                        }
                    }
                    let out_kind = if inner { kind } else { Kind::Insert };
                    for &(k, e) in matched {
                        let times = other_side.count((k, e));
                        emitted.push(me, Pick::Other(k, e), out_kind, times);
                    }
                }
                if !self.null_key[k] {
                    this_side.add(k, bytes, partners, now);
                }
            } else {
                if let (false, Incoming::Bytes(b)) = (self.null_key[k], bytes) {
                    this_side.retract(k, b, now);
                }
                if matched.is_empty() {
                    if this_outer {
                        emitted.push(me, Pick::Null, Kind::Delete, 1);
                    }
                } else {
                    let out_kind = if inner { kind } else { Kind::Delete };
                    for &(k, e) in matched {
                        let times = other_side.count((k, e));
                        emitted.push(me, Pick::Other(k, e), out_kind, times);
                    }
                    if other_outer {
                        for &(k, e) in matched {
                            let assoc = other_side.assoc((k, e));
                            if assoc == 1 {
                                let times = other_side.count((k, e));
                                emitted.push(Pick::Null, Pick::Other(k, e), Kind::Insert, times);
                            }
                            other_side.set_assoc((k, e), assoc.saturating_sub(1));
                        }
                    }
                }
            }
        }
        self.key_ids = key_ids;
        let bytes = (self.sides[0].bytes() + self.sides[1].bytes()) as u64;
        self.state_bytes_max = self.state_bytes_max.max(bytes);
        self.emit(input, &batch, emitted, out)?;
        self.compact_keys()
    }

    /// Batch mode: keep the batch's rows (retractions take rows back); an
    /// outer side's rows with a NULL key can never match and are emitted
    /// padded at once.
    fn keep(
        &mut self,
        input: usize,
        batch: &RecordBatch,
        kinds: Option<&[Kind]>,
        rows: &Arriving,
        now: i64,
        out: &mut dyn Output,
    ) -> Result<()> {
        let mut emitted = Emitted::default();
        let outer = self.sides[input].outer;
        let key_ids = std::mem::take(&mut self.key_ids);
        for (row, &k) in key_ids.iter().enumerate() {
            let accumulates = kinds.is_none_or(|v| v[row].is_addition());
            if self.null_key[k] {
                if outer && accumulates {
                    emitted.push(Pick::This(row as u32), Pick::Null, Kind::Insert, 1);
                }
            } else if accumulates {
                self.sides[input].add(k, rows.row(row), 0, now);
            } else if let Incoming::Bytes(b) = rows.row(row) {
                self.sides[input].retract(k, b, now);
            }
        }
        self.key_ids = key_ids;
        self.emit(input, batch, emitted, out)
    }

    /// Batch mode, both inputs ended: every pair, then the unmatched rows of
    /// outer sides, once.
    fn join_kept(&mut self, out: &mut dyn Output) -> Result<()> {
        let left = &self.sides[0];
        let entries = left.all();
        let repeats: Vec<u32> = entries.iter().map(|&p| left.count(p)).collect();
        let decoded = left.gather(
            entries
                .iter()
                .zip(&repeats)
                .flat_map(|(&p, &n)| std::iter::repeat_n(Some(p), n as usize)),
        )?;
        let total: u32 = repeats.iter().sum();
        let right = &self.sides[1];
        let mut right_matched: Vec<Vec<bool>> = (0..right.key_count())
            .map(|k| vec![false; right.len_of(k)])
            .collect();
        let mut emitted = Emitted::default();
        if total > 0 {
            let batch = RecordBatch::try_new(Arc::clone(&left.schema), decoded)?;
            self.intern(0, &batch)?;
            let now = now_ms();
            let Candidates { offsets, pairs } = self.candidates(0, &batch, now)?;
            for row in 0..batch.num_rows() {
                let matched = &pairs[offsets[row]..offsets[row + 1]];
                for &(k, e) in matched {
                    right_matched[k][e] = true;
                    let times = self.sides[1].count((k, e));
                    emitted.push(
                        Pick::This(row as u32),
                        Pick::Other(k, e),
                        Kind::Insert,
                        times,
                    );
                }
                if matched.is_empty() && self.sides[0].outer {
                    emitted.push(Pick::This(row as u32), Pick::Null, Kind::Insert, 1);
                }
            }
            self.emit(0, &batch, emitted, out)?;
            emitted = Emitted::default();
        }
        if self.sides[1].outer {
            let right = &self.sides[1];
            for (k, e) in right.all() {
                if !right_matched[k][e] {
                    let times = right.count((k, e));
                    emitted.push(Pick::Null, Pick::Other(k, e), Kind::Insert, times);
                }
            }
            let empty = RecordBatch::new_empty(Arc::clone(&self.sides[0].schema));
            self.emit(0, &empty, emitted, out)?;
        }
        Ok(())
    }

    /// Send the output rows `emitted` of `batch` (of input `input`),
    /// gathered a batch's worth at a time: a row matching many (a hot key)
    /// never makes one output batch of all its pairs in memory at once.
    fn emit(
        &self,
        input: usize,
        batch: &RecordBatch,
        emitted: Emitted,
        out: &mut dyn Output,
    ) -> Result<()> {
        let n = emitted.kinds.len();
        let step = self.batch_size.max(1);
        for start in (0..n).step_by(step) {
            let end = (start + step).min(n);
            let this = &emitted.this[start..end];
            let width = self.sides[input].width;
            let this_cols = match this.iter().copied().collect::<Option<Vec<u32>>>() {
                Some(rows) => gather_this(batch, width, &rows)?,
                // NULL rows (an outer join's padding): a gather.
                None => {
                    let idx = UInt32Array::from(this.to_vec());
                    arrow::compute::take_arrays(&batch.columns()[..width], &idx, None)?
                }
            };
            let other_cols = gather_other(
                &self.sides[1 - input],
                emitted.other[start..end].iter().copied(),
            )?;
            let mut columns = if input == 0 {
                [this_cols, other_cols].concat()
            } else {
                [other_cols, this_cols].concat()
            };
            if self.updating {
                columns.push(weir_core::changelog::row_kind_array(
                    emitted.kinds[start..end].iter().copied(),
                ));
            }
            let joined = RecordBatch::try_new(Arc::clone(&self.output_schema), columns)
                .map_err(|e| WeirError::Execution(format!("{}: {e}", self.name)))?;
            out.collect(joined)?;
        }
        Ok(())
    }

    /// Drop rows past the state TTL, at most every tenth of it.
    fn sweep(&mut self, now: i64) -> Result<()> {
        let Some(ttl) = self.ttl else { return Ok(()) };
        if now - self.last_sweep < (ttl / 10).max(10) {
            return Ok(());
        }
        self.last_sweep = now;
        for side in &mut self.sides {
            side.expire(now - ttl);
        }
        self.compact_keys()
    }

    /// Drop keys with no rows left on either side from the key table, so
    /// it cannot grow forever as rows are retracted or expire. Looked at
    /// each time the table doubles, rebuilt when the dead keys outnumber
    /// the live ones: amortized O(1) per key.
    fn compact_keys(&mut self) -> Result<()> {
        let total = self.keys.len();
        if total < self.next_compaction {
            return Ok(());
        }
        let live: Vec<bool> = (0..total)
            .map(|k| self.sides.iter().any(|s| s.len_of(k) > 0))
            .collect();
        let n = live.iter().filter(|&&l| l).count();
        if crate::key_table::due(total, n) {
            let moved = crate::key_table::compact(&mut self.keys, &self.key_schema, &live)?;
            for side in &mut self.sides {
                side.renumber(&moved, n);
            }
            let mut null_key = vec![false; n];
            for (old, new) in moved.iter().enumerate() {
                if let Some(new) = new {
                    null_key[*new] = self.null_key.get(old).copied().unwrap_or(false);
                }
            }
            self.null_key = null_key;
        }
        self.next_compaction = (2 * self.keys.len()).max(2 * crate::key_table::MIN_DEAD);
        Ok(())
    }

    fn state_schema(side: &Side) -> SchemaRef {
        let mut fields: Vec<Field> = side
            .schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new("__count", DataType::UInt32, false));
        fields.push(Field::new("__assoc", DataType::UInt32, false));
        fields.push(Field::new("__written", DataType::Int64, false));
        Arc::new(Schema::new(fields))
    }
}

/// The join's residual condition over only the columns it reads.
struct Residual {
    expr: Arc<dyn datafusion_physical_expr::PhysicalExpr>,
    /// Per side, the data columns it reads.
    columns: [Vec<usize>; 2],
    /// Those columns: the left's, then the right's.
    schema: SchemaRef,
}

impl Residual {
    /// `residual` (over `pair`: the left's data columns, `left_width` of
    /// them, then the right's) re-pointed at the columns it reads.
    fn new(
        residual: &Arc<dyn datafusion_physical_expr::PhysicalExpr>,
        pair: &Schema,
        left_width: usize,
    ) -> Result<Self> {
        use datafusion_common::tree_node::{Transformed, TreeNode};
        use datafusion_physical_expr::expressions::Column;
        let mut used: Vec<usize> = datafusion_physical_expr::utils::collect_columns(residual)
            .iter()
            .map(Column::index)
            .collect();
        used.sort_unstable();
        used.dedup();
        let schema = Arc::new(pair.project(&used)?);
        let expr = Arc::clone(residual)
            .transform_up(|e| {
                let Some(c) = e.downcast_ref::<Column>() else {
                    return Ok(Transformed::no(e));
                };
                let at = used.binary_search(&c.index()).unwrap_or_default();
                let c = Arc::new(Column::new(c.name(), at));
                Ok(Transformed::yes(
                    c as Arc<dyn datafusion_physical_expr::PhysicalExpr>,
                ))
            })?
            .data;
        let left = used.iter().copied().filter(|&i| i < left_width).collect();
        let right = used
            .iter()
            .filter(|&&i| i >= left_width)
            .map(|&i| i - left_width)
            .collect();
        Ok(Self {
            expr,
            columns: [left, right],
            schema,
        })
    }
}

/// The two sides as (this, other) for input `input`.
fn split(sides: &mut [Side; 2], input: usize) -> (&mut Side, &mut Side) {
    let (a, b) = sides.split_at_mut(1);
    if input == 0 {
        (&mut a[0], &mut b[0])
    } else {
        (&mut b[0], &mut a[0])
    }
}

/// Columns `..width` of `batch` at `rows`.
pub(crate) fn gather_this(
    batch: &RecordBatch,
    width: usize,
    rows: &[u32],
) -> Result<Vec<ArrayRef>> {
    crate::batch_rows::rows_of(&batch.columns()[..width], batch.num_rows(), rows)
}

/// The other side's columns for each pick (`None`: a NULL row).
fn gather_other(
    side: &Side,
    picks: impl Iterator<Item = Option<(usize, usize)>>,
) -> Result<Vec<ArrayRef>> {
    side.gather(picks)
}

impl RegularJoinOperator {
    /// Restored pending rows first: their changes go out before the next
    /// input's.
    fn put_through_replay(&mut self, out: &mut dyn Output) -> Result<()> {
        for (input, batch) in self.replay.drain() {
            self.process(input, batch, now_ms(), out)?;
        }
        Ok(())
    }
}

impl Operator for RegularJoinOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        self.put_through_replay(out)?;
        self.process(0, batch, now_ms(), out)
    }

    /// A streaming join spills by its keys (a bounded one joins at the end).
    fn spill_keys(&self) -> Option<Vec<Vec<usize>>> {
        (!self.bounded).then(|| self.sides.iter().map(|s| s.key_indices.clone()).collect())
    }

    fn on_watermark(
        &mut self,
        watermark: weir_core::message::Watermark,
        out: &mut dyn Output,
    ) -> Result<Option<weir_core::message::Watermark>> {
        self.put_through_replay(out)?;
        Ok(Some(watermark))
    }

    fn finish(&mut self, out: &mut dyn Output) -> Result<()> {
        self.put_through_replay(out)?;
        if self.bounded {
            self.join_kept(out)?;
        }
        Ok(())
    }

    fn process_input(
        &mut self,
        input: usize,
        batch: RecordBatch,
        out: &mut dyn Output,
    ) -> Result<()> {
        self.put_through_replay(out)?;
        self.process(input, batch, now_ms(), out)
    }

    /// Tables `left` and `right`: each side's distinct rows (its data
    /// columns) with `__count` (how often the row is in the input's table),
    /// `__assoc` (partners, for an outer side) and `__written` (ms since
    /// the epoch, for the state TTL), keyed by the join key.
    fn snapshot_state(&mut self, _checkpoint: u64) -> Result<Vec<StateTable>> {
        let mut tables = Vec::new();
        for (side, name) in self.sides.iter().zip(["left", "right"]) {
            let entries = side.all();
            let mut columns = side.gather(entries.iter().map(|&p| Some(p)))?;
            columns.push(Arc::new(UInt32Array::from_iter_values(
                entries.iter().map(|&p| side.count(p)),
            )));
            columns.push(Arc::new(UInt32Array::from_iter_values(
                entries.iter().map(|&p| side.assoc(p)),
            )));
            // Without a TTL, write times are not kept: a row counts as
            // written when the checkpoint is taken.
            let now = now_ms();
            columns.push(Arc::new(Int64Array::from_iter_values(
                entries.iter().map(|&p| side.written(p, now)),
            )));
            let batch = RecordBatch::try_new(Self::state_schema(side), columns)?;
            tables.push(StateTable::new(name, batch).keyed(side.key_indices.iter().copied()));
        }
        let keys = [
            &self.sides[0].key_indices[..],
            &self.sides[1].key_indices[..],
        ];
        tables.extend(self.replay.tables(&keys));
        Ok(tables)
    }

    fn restore_state(&mut self, tables: Vec<StateTable>) -> Result<()> {
        for t in tables {
            let keys = [
                self.sides[0].key_indices.clone(),
                self.sides[1].key_indices.clone(),
            ];
            let Some(t) = self
                .replay
                .take_table(t, &[&keys[0], &keys[1]], &self.filter)?
            else {
                continue;
            };
            let input = match t.name.as_str() {
                "left" => 0,
                "right" => 1,
                other => {
                    return Err(WeirError::Execution(format!(
                        "{}: unknown state table '{other}'",
                        self.name
                    )));
                }
            };
            let want = Self::state_schema(&self.sides[input]);
            if t.batch.schema().fields().len() != want.fields().len() {
                return Err(WeirError::Execution(format!(
                    "{}: state table '{}' has columns ({}), expected ({})",
                    self.name,
                    t.name,
                    weir_core::time::column_list(&t.batch.schema()),
                    weir_core::time::column_list(&want)
                )));
            }
            let batch = self
                .filter
                .keep(t.batch, &self.sides[input].key_indices.clone())?;
            if batch.num_rows() == 0 {
                continue;
            }
            let width = self.sides[input].width;
            let malformed = || {
                WeirError::Execution(format!("{}: malformed state table '{}'", self.name, t.name))
            };
            let count = batch
                .column(width)
                .as_primitive_opt::<arrow::datatypes::UInt32Type>();
            let assoc = batch
                .column(width + 1)
                .as_primitive_opt::<arrow::datatypes::UInt32Type>();
            let written = batch
                .column(width + 2)
                .as_primitive_opt::<arrow::datatypes::Int64Type>();
            let (Some(count), Some(assoc), Some(written)) = (count, assoc, written) else {
                return Err(malformed());
            };
            // An append-only side's entries are one row each: a row kept
            // `count` times becomes `count` rows (`source`: each row's row
            // in the table, `times`: how often it is added).
            let changelog = self.sides[input].changelog;
            let n = batch.num_rows();
            let (batch, source, times): (RecordBatch, Vec<usize>, Vec<u32>) =
                if changelog || count.values().iter().all(|&c| c == 1) {
                    let times = if changelog {
                        count.values().to_vec()
                    } else {
                        vec![1; n]
                    };
                    (batch.clone(), (0..n).collect(), times)
                } else {
                    let repeat: Vec<u32> = (0..n as u32)
                        .flat_map(|r| std::iter::repeat_n(r, count.value(r as usize) as usize))
                        .collect();
                    let idx = UInt32Array::from(repeat);
                    let columns = batch
                        .columns()
                        .iter()
                        .map(|c| take(c.as_ref(), &idx, None))
                        .collect::<std::result::Result<Vec<_>, _>>()?;
                    let source = idx.values().iter().map(|&r| r as usize).collect();
                    let times = vec![1; idx.len()];
                    (
                        RecordBatch::try_new(batch.schema(), columns)?,
                        source,
                        times,
                    )
                };
            self.intern(input, &batch)?;
            let keep: Vec<bool> = self.key_ids.iter().map(|&k| !self.null_key[k]).collect();
            let rows = self.sides[input].take_in(&batch, &keep)?;
            let key_ids = std::mem::take(&mut self.key_ids);
            let side = &mut self.sides[input];
            for (i, &k) in key_ids.iter().enumerate() {
                if !keep[i] {
                    continue;
                }
                let r = source[i];
                for _ in 0..times[i] {
                    side.add(k, rows.row(i), assoc.value(r), written.value(r));
                }
            }
            self.key_ids = key_ids;
        }
        Ok(())
    }

    fn metrics(&self) -> Vec<(String, u64)> {
        vec![
            ("state_bytes_max".into(), self.state_bytes_max),
            (
                "state_bytes".into(),
                (self.sides[0].bytes() + self.sides[1].bytes()) as u64,
            ),
            (
                "kept_rows".into(),
                (self.sides[0].entries + self.sides[1].entries) as u64,
            ),
        ]
    }
}

#[cfg(test)]
#[path = "regular_join_tests.rs"]
mod tests;
