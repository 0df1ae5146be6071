//! `MATCH_RECOGNIZE`: row pattern recognition per partition (Flink's CEP
//! in SQL).
//!
//! Ordered by event time, rows wait until the watermark passes them; then
//! every waiting row it passed is taken at once, its partition keys
//! interned in one call and sorted by (partition, time, arrival) with one
//! lexicographic sort. Each partition's run goes through the automaton of
//! [`crate::match_nfa`], continuing the partial matches of earlier runs:
//!
//! * DEFINE conditions that read only the current row (and `PREV`) are
//!   evaluated once over the partition's whole run, as one batch;
//! * conditions that read the rows a partial match has taken (`LAST`,
//!   `FIRST`, aggregates of a variable) are evaluated per row for all the
//!   partial matches that ask, as one batch;
//! * the matches a release reports are measured together: each measure's
//!   navigations become columns (gathered with `take`, aggregates through
//!   DataFusion accumulators) and the measure is evaluated over them.
//!
//! A partition keeps the rows its partial matches (and `PREV`) still need.
//! Ordered by processing time, rows are matched as they arrive.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch, UInt32Array, UInt64Array};
use arrow::compute::{concat_batches, take};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion_common::ScalarValue;
use datafusion_physical_expr::PhysicalExpr;
use datafusion_physical_plan::aggregates::group_values::{GroupValues, new_group_values};
use datafusion_physical_plan::aggregates::order::GroupOrdering;
use weir_core::match_spec::{MatchExpr, MatchRecognizeSpec, NavAggregate, NavKind, Navigation};
use weir_core::message::Watermark;
use weir_core::spec::AggregateSpec;
use weir_core::{Result, WeirError};

use crate::match_nfa::{Found, Nfa, Run, Thread};
use crate::process::now_ms;
use crate::window::{Aggregates, timestamps};
use crate::{Operator, OperatorContext, Output, StateTable};

/// A DEFINE condition or a measure, ready to evaluate.
struct Compiled {
    expr: Arc<dyn PhysicalExpr>,
    schema: SchemaRef,
    navigations: Vec<Navigation>,
    /// Per navigation that is an aggregate: its DataFusion aggregate.
    aggregates: Vec<Option<Aggregates>>,
    /// Whether it reads only the current row and `PREV`.
    per_row: bool,
}

impl Compiled {
    fn new(name: &str, m: &MatchExpr, input: &SchemaRef, with_row: bool) -> Result<Self> {
        let schema = m.schema(input, with_row)?;
        let expr = m.expr.to_physical(&schema)?;
        let aggregates = m
            .navigations
            .iter()
            .map(|n| match n.kind {
                NavKind::Aggregate(a) => {
                    let c = n.column.as_deref().unwrap_or_default();
                    let spec = match a {
                        NavAggregate::Count => AggregateSpec::count(c),
                        NavAggregate::CountRows => AggregateSpec::count_star(),
                        NavAggregate::Sum => AggregateSpec::sum(c),
                        NavAggregate::Min => AggregateSpec::min(c),
                        NavAggregate::Max => AggregateSpec::max(c),
                    };
                    Aggregates::build(name, &[], &[spec], input, None).map(Some)
                }
                _ => Ok(None),
            })
            .collect::<Result<Vec<_>>>()?;
        let per_row = m.navigations.iter().all(|n| n.kind == NavKind::Prev);
        Ok(Self {
            expr,
            schema,
            navigations: m.navigations.clone(),
            aggregates,
            per_row,
        })
    }
}

/// The rows a navigation reads for one case: the rows of a (partial)
/// match and, in a DEFINE, the current row as the variable being defined.
struct Case<'a> {
    rows: &'a [(u64, u16)],
    current: Option<(u64, u16)>,
}

impl Case<'_> {
    fn rows_of(&self, var: Option<usize>) -> impl DoubleEndedIterator<Item = u64> + '_ {
        self.rows
            .iter()
            .chain(self.current.as_ref())
            .filter(move |r| var.is_none_or(|v| r.1 as usize == v))
            .map(|r| r.0)
    }
}

/// One partition's rows and matching state.
struct Partition {
    /// Its key (one-row arrays), for snapshots.
    key: Vec<ArrayRef>,
    /// Rows still needed, sequence numbers `base..next`.
    rows: Option<RecordBatch>,
    base: u64,
    next: u64,
    run: Run,
}

/// Matches of one release, measured per partition, output at the end.
struct Measured {
    keys: Vec<Vec<ArrayRef>>,
    /// Per measure, its navigation columns per partition.
    navs: Vec<Vec<Vec<ArrayRef>>>,
}

/// The `MATCH_RECOGNIZE` of one subtask.
pub struct MatchRecognizeOperator {
    name: String,
    nfa: Nfa,
    rowtime: Option<(usize, String)>,
    keyed: Aggregates,
    keys: Box<dyn GroupValues>,
    partitions: Vec<Partition>,
    defines: Vec<Option<Compiled>>,
    measures: Vec<Compiled>,
    /// Rows before the current one that `PREV` reads.
    max_prev: u64,
    waiting: Vec<RecordBatch>,
    watermark: i64,
    input_schema: SchemaRef,
    output_schema: SchemaRef,
    batch_size: usize,
    late_dropped: u64,
    filter: crate::KeyGroupFilter,
    key_ids: Vec<usize>,
}

/// `take` with absent rows as NULL.
fn gather(column: &ArrayRef, at: &[Option<u32>]) -> Result<ArrayRef> {
    Ok(take(
        column.as_ref(),
        &UInt32Array::from(at.to_vec()),
        None,
    )?)
}

impl MatchRecognizeOperator {
    /// Build the operator for one subtask.
    pub fn try_new(
        name: String,
        spec: &MatchRecognizeSpec,
        output_schema: SchemaRef,
        ctx: &OperatorContext,
    ) -> Result<Self> {
        spec.validate()?;
        let nfa = Nfa::new(
            &spec.pattern,
            spec.variables.len(),
            spec.skip,
            spec.within_ms,
        )
        .map_err(|e| WeirError::plan(format!("{name}: {e}")))?;
        let input = &spec.input_schema;
        let defines = spec
            .defines
            .iter()
            .map(|d| {
                d.as_ref()
                    .map(|d| Compiled::new(&name, d, input, true))
                    .transpose()
            })
            .collect::<Result<Vec<_>>>()?;
        let measures = spec
            .measures
            .iter()
            .map(|(m, _)| Compiled::new(&name, m, input, false))
            .collect::<Result<Vec<_>>>()?;
        let max_prev = defines
            .iter()
            .flatten()
            .flat_map(|d| &d.navigations)
            .filter(|n| n.kind == NavKind::Prev)
            .map(|n| n.offset as u64)
            .max()
            .unwrap_or(0);
        let keyed = Aggregates::build(&name, &spec.keys, &[], input, None)?;
        let rowtime = match &spec.rowtime {
            Some(rt) => Some((input.index_of(rt)?, rt.clone())),
            None => None,
        };
        Ok(Self {
            keys: new_group_values(Arc::clone(&keyed.key_schema), &GroupOrdering::None)?,
            name,
            nfa,
            rowtime,
            keyed,
            partitions: vec![],
            defines,
            measures,
            max_prev,
            waiting: vec![],
            watermark: i64::MIN,
            input_schema: Arc::clone(input),
            output_schema,
            batch_size: ctx.config.batch_size.max(1),
            late_dropped: 0,
            filter: crate::KeyGroupFilter::new(ctx),
            key_ids: vec![],
        })
    }

    /// Intern the partition keys of `keys` into `self.key_ids`, creating
    /// new partitions.
    fn intern(&mut self, keys: &[ArrayRef]) -> Result<()> {
        let mut ids = std::mem::take(&mut self.key_ids);
        self.keys.intern(keys, &mut ids)?;
        for (row, &id) in ids.iter().enumerate() {
            while self.partitions.len() <= id {
                self.partitions.push(Partition {
                    key: keys.iter().map(|k| k.slice(row, 1)).collect(),
                    rows: None,
                    base: 0,
                    next: 0,
                    run: Run::default(),
                });
            }
        }
        self.key_ids = ids;
        Ok(())
    }

    /// Sort `batch` by (partition, time, arrival) and match each
    /// partition's run; `ts` are the rows' times.
    fn work(&mut self, batch: RecordBatch, ts: Vec<i64>, out: &mut dyn Output) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let keys = self.keyed.keys(&batch);
        self.intern(&keys)?;
        let order = crate::window::partition_order(&self.key_ids, &ts);
        let sorted = arrow::compute::take_record_batch(&batch, &order)?;
        let pids: Vec<usize> = order
            .values()
            .iter()
            .map(|&i| self.key_ids[i as usize])
            .collect();
        let ts: Vec<i64> = order.values().iter().map(|&i| ts[i as usize]).collect();
        let mut measured = Measured {
            keys: vec![],
            navs: vec![vec![]; self.measures.len()],
        };
        let mut i = 0;
        while i < pids.len() {
            let mut j = i + 1;
            while j < pids.len() && pids[j] == pids[i] {
                j += 1;
            }
            self.match_partition(pids[i], sorted.slice(i, j - i), &ts[i..j], &mut measured)?;
            i = j;
        }
        self.output(measured, out)
    }

    /// Take `new` rows (times `ts`) into partition `pid`.
    fn match_partition(
        &mut self,
        pid: usize,
        new: RecordBatch,
        ts: &[i64],
        measured: &mut Measured,
    ) -> Result<()> {
        let p = &mut self.partitions[pid];
        let first_new = (p.next - p.base) as usize;
        let chunk = match p.rows.take() {
            Some(old) => concat_batches(&self.input_schema, [&old, &new])?,
            None => new,
        };
        let base = p.base;
        p.next += ts.len() as u64;
        // Conditions on the row alone, over the whole run at once.
        let per_row = self
            .defines
            .iter()
            .map(|d| match d {
                Some(d) if d.per_row => {
                    let all: Vec<u64> = (0..chunk.num_rows() as u64).map(|r| base + r).collect();
                    let cases: Vec<Case> = all
                        .iter()
                        .map(|&s| Case {
                            rows: &[],
                            current: Some((s, 0)),
                        })
                        .collect();
                    evaluate(d, &chunk, base, &cases).map(Some)
                }
                _ => Ok(None),
            })
            .collect::<Result<Vec<_>>>()?;
        let mut found = vec![];
        let defines = &self.defines;
        for (k, &t) in ts.iter().enumerate() {
            let r = first_new + k;
            let seq = base + r as u64;
            let accepts = |threads: &[Thread], asks: &[(usize, usize)]| -> Result<Vec<bool>> {
                let mut answers = vec![true; asks.len()];
                for (v, define) in defines.iter().enumerate() {
                    let Some(d) = define else { continue };
                    if let Some(rows) = &per_row[v] {
                        for (a, &(_, var)) in answers.iter_mut().zip(asks) {
                            if var == v {
                                *a = rows.value(r);
                            }
                        }
                        continue;
                    }
                    let at: Vec<usize> = (0..asks.len()).filter(|&a| asks[a].1 == v).collect();
                    if at.is_empty() {
                        continue;
                    }
                    let cases: Vec<Case> = at
                        .iter()
                        .map(|&a| Case {
                            rows: &threads[asks[a].0].rows,
                            current: Some((seq, v as u16)),
                        })
                        .collect();
                    let ok = evaluate(d, &chunk, base, &cases)?;
                    for (n, &a) in at.iter().enumerate() {
                        answers[a] = ok.value(n);
                    }
                }
                Ok(answers)
            };
            self.nfa.step(&mut p.run, seq, t, accepts, &mut found)?;
        }
        measure(&self.measures, &chunk, base, &found, p, measured)?;
        // Keep what partial matches and PREV still need.
        let keep_from = p
            .run
            .first_needed()
            .unwrap_or(p.next)
            .min(p.next.saturating_sub(self.max_prev))
            .max(base);
        let skip = (keep_from - base) as usize;
        p.base = keep_from;
        p.rows = (skip < chunk.num_rows()).then(|| chunk.slice(skip, chunk.num_rows() - skip));
        Ok(())
    }

    /// Evaluate the measures of a release and emit its rows.
    fn output(&self, measured: Measured, out: &mut dyn Output) -> Result<()> {
        if measured.keys.is_empty() {
            return Ok(());
        }
        let key_count = self.output_schema.fields().len() - self.measures.len();
        let mut columns = vec![];
        for c in 0..key_count {
            let parts: Vec<&dyn Array> = measured.keys.iter().map(|k| k[c].as_ref()).collect();
            columns.push(arrow::compute::concat(&parts)?);
        }
        let rows = columns.first().map_or(0, |c| c.len());
        for (m, navs) in self.measures.iter().zip(&measured.navs) {
            let nav_columns = (0..m.navigations.len())
                .map(|n| {
                    let parts: Vec<&dyn Array> = navs.iter().map(|p| p[n].as_ref()).collect();
                    Ok(arrow::compute::concat(&parts)?)
                })
                .collect::<Result<Vec<_>>>()?;
            let batch = RecordBatch::try_new_with_options(
                Arc::clone(&m.schema),
                nav_columns,
                &arrow::array::RecordBatchOptions::new().with_row_count(Some(rows)),
            )?;
            let value = m.expr.evaluate(&batch)?.into_array(rows)?;
            let want = self.output_schema.field(columns.len()).data_type();
            columns.push(crate::cast_to(value, want)?);
        }
        let batch = RecordBatch::try_new(Arc::clone(&self.output_schema), columns)
            .map_err(|e| WeirError::Execution(format!("{}: {e}", self.name)))?;
        crate::pane_buffer::emit_sliced(&batch, self.batch_size, out)
    }

    /// Rows the watermark `w` passed, matched; later ones keep waiting.
    fn release(&mut self, w: i64, out: &mut dyn Output) -> Result<()> {
        let Some((at, name)) = self.rowtime.clone() else {
            return Ok(());
        };
        if let Some(ready) =
            crate::window::take_ready(&mut self.waiting, &self.input_schema, (at, &name), w)?
        {
            let ts = timestamps(ready.column(at), &name)?.to_vec();
            self.work(ready, ts, out)?;
        }
        if self.nfa.within().is_none() {
            return Ok(());
        }
        // WITHIN: partial matches the watermark timed out.
        let mut measured = Measured {
            keys: vec![],
            navs: vec![vec![]; self.measures.len()],
        };
        for pid in 0..self.partitions.len() {
            let p = &mut self.partitions[pid];
            let mut found = vec![];
            self.nfa.advance(&mut p.run, w, &mut found);
            if let (false, Some(chunk)) = (found.is_empty(), p.rows.clone()) {
                measure(&self.measures, &chunk, p.base, &found, p, &mut measured)?;
            }
        }
        self.output(measured, out)
    }
}

/// The column of navigation `n` for each case, over the partition rows
/// `chunk` (sequence numbers from `base`).
fn navigation(
    n: &Navigation,
    aggregate: Option<&Aggregates>,
    chunk: &RecordBatch,
    base: u64,
    cases: &[Case],
    field: &Field,
) -> Result<ArrayRef> {
    let index = |s: u64| -> Option<u32> {
        (s >= base && s - base < chunk.num_rows() as u64).then(|| (s - base) as u32)
    };
    if let Some(agg) = aggregate {
        let f = &agg.functions[0];
        let values = cases
            .iter()
            .map(|c| {
                // Only the case's rows: an argument over the whole chunk
                // per case would be quadratic.
                let at: Vec<u32> = c.rows_of(n.var).filter_map(index).collect();
                let rows = arrow::compute::take_record_batch(chunk, &UInt32Array::from(at))?;
                let arg = agg.arguments[0][0]
                    .evaluate(&rows)?
                    .into_array(rows.num_rows())?;
                let mut acc = f.create_accumulator()?;
                acc.update_batch(&[arg])?;
                Ok(acc.evaluate()?)
            })
            .collect::<Result<Vec<ScalarValue>>>()?;
        let array = if values.is_empty() {
            arrow::array::new_empty_array(field.data_type())
        } else {
            ScalarValue::iter_to_array(values)?
        };
        return crate::cast_to(array, field.data_type());
    }
    let column = chunk
        .column_by_name(n.column.as_deref().unwrap_or_default())
        .ok_or_else(|| WeirError::Execution(format!("navigation column {:?} missing", n.column)))?;
    let at: Vec<Option<u32>> = cases
        .iter()
        .map(|c| {
            let offset = n.offset as usize;
            match n.kind {
                NavKind::Prev => c
                    .current
                    .and_then(|(s, _)| s.checked_sub(n.offset as u64))
                    .and_then(index),
                NavKind::First => c.rows_of(n.var).nth(offset).and_then(index),
                _ => c.rows_of(n.var).rev().nth(offset).and_then(index),
            }
        })
        .collect();
    gather(column, &at)
}

/// Evaluate `c` for each case; NULL is false.
fn evaluate(c: &Compiled, chunk: &RecordBatch, base: u64, cases: &[Case]) -> Result<BooleanArray> {
    let mut columns: Vec<ArrayRef> = vec![];
    {
        let at: Vec<Option<u32>> = cases
            .iter()
            .map(|k| k.current.map(|(s, _)| (s - base) as u32))
            .collect();
        for col in chunk.columns() {
            columns.push(gather(col, &at)?);
        }
    }
    let width = columns.len();
    for (i, (n, a)) in c.navigations.iter().zip(&c.aggregates).enumerate() {
        let field = c.schema.field(width + i);
        columns.push(navigation(n, a.as_ref(), chunk, base, cases, field)?);
    }
    let batch = RecordBatch::try_new_with_options(
        Arc::clone(&c.schema),
        columns,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(cases.len())),
    )?;
    let value = c.expr.evaluate(&batch)?.into_array(cases.len())?;
    let value = value
        .as_boolean_opt()
        .ok_or_else(|| WeirError::Execution(format!("DEFINE {} is not BOOLEAN", c.expr)))?;
    // NULL does not accept.
    Ok(match value.nulls() {
        Some(nulls) => arrow::compute::and(value, &BooleanArray::new(nulls.inner().clone(), None))?,
        None => value.clone(),
    })
}

/// The navigation columns of each measure for the matches `found` of
/// partition `p`, and their keys.
fn measure(
    measures: &[Compiled],
    chunk: &RecordBatch,
    base: u64,
    found: &[Found],
    p: &Partition,
    measured: &mut Measured,
) -> Result<()> {
    if found.is_empty() {
        return Ok(());
    }
    let cases: Vec<Case> = found
        .iter()
        .map(|f| Case {
            rows: &f.rows,
            current: None,
        })
        .collect();
    let zeros = UInt32Array::from(vec![0u32; found.len()]);
    measured.keys.push(
        p.key
            .iter()
            .map(|k| Ok(take(k.as_ref(), &zeros, None)?))
            .collect::<Result<Vec<_>>>()?,
    );
    for (m, navs) in measures.iter().zip(measured.navs.iter_mut()) {
        let columns = m
            .navigations
            .iter()
            .zip(&m.aggregates)
            .enumerate()
            .map(|(i, (n, a))| navigation(n, a.as_ref(), chunk, base, &cases, m.schema.field(i)))
            .collect::<Result<Vec<_>>>()?;
        navs.push(columns);
    }
    Ok(())
}

impl Operator for MatchRecognizeOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        let Some((at, name)) = self.rowtime.clone() else {
            // Processing time: in arrival order, now.
            let ts = vec![now_ms(); batch.num_rows()];
            return self.work(batch, ts, out);
        };
        let ts = timestamps(batch.column(at), &name)?.to_vec();
        let batch = crate::window::drop_late(batch, &ts, self.watermark, &mut self.late_dropped)?;
        if batch.num_rows() > 0 {
            self.waiting.push(batch);
        }
        Ok(())
    }

    fn on_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut dyn Output,
    ) -> Result<Option<Watermark>> {
        if watermark.0 > self.watermark {
            self.watermark = watermark.0;
            self.release(watermark.0, out)?;
        }
        Ok(Some(watermark))
    }

    /// Tables `waiting` (rows the watermark has not passed), `meta` (the
    /// watermark), `rows` (each partition's rows still needed, with their
    /// sequence number `__seq`) and `matches` (per partition key, each
    /// partial match — `__pc` its place in the pattern — and each match
    /// waiting to be reported — `__pc` NULL — with its first row
    /// `__start`/`__start_ts`, `__order`, and its rows `__rows`, a JSON
    /// list of [sequence number, variable]).
    fn snapshot_state(&mut self, _checkpoint: u64) -> Result<Vec<StateTable>> {
        let waiting = concat_batches(&self.input_schema, &self.waiting)?;
        let key_indices = self.keyed.key_indices.clone();
        let mut fields: Vec<Field> = self
            .input_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new("__seq", DataType::UInt64, false));
        let rows_schema = Arc::new(Schema::new(fields));
        let mut rows = vec![];
        for p in &self.partitions {
            if let Some(r) = &p.rows {
                let mut columns = r.columns().to_vec();
                columns.push(Arc::new(UInt64Array::from_iter_values(
                    p.base..p.base + r.num_rows() as u64,
                )));
                rows.push(RecordBatch::try_new(Arc::clone(&rows_schema), columns)?);
            }
        }
        let rows = concat_batches(&rows_schema, &rows)?;
        Ok(vec![
            StateTable::new("waiting", waiting).keyed(key_indices.clone()),
            crate::window::meta_table(self.watermark)?,
            StateTable::new("rows", rows).keyed(key_indices),
            self.matches_table()?,
        ])
    }

    fn restore_state(&mut self, tables: Vec<StateTable>) -> Result<()> {
        let mut matches = vec![];
        for t in tables {
            match t.name.as_str() {
                "meta" => {
                    let mut w = None;
                    crate::window::restore_meta(&self.name, &t.batch, &mut w)?;
                    if let Some(w) = w {
                        self.watermark = w;
                    }
                }
                "waiting" => {
                    let rows = self.filter.keep(t.batch, &self.keyed.key_indices)?;
                    if rows.num_rows() > 0 {
                        self.waiting.push(rows);
                    }
                }
                "rows" => self.restore_rows(t.batch)?,
                "matches" => matches.push(t.batch),
                other => {
                    return Err(WeirError::Execution(format!(
                        "{}: unknown state table '{other}'",
                        self.name
                    )));
                }
            }
        }
        for m in matches {
            self.restore_matches(m)?;
        }
        Ok(())
    }

    fn metrics(&self) -> Vec<(String, u64)> {
        let kept = || self.partitions.iter().filter_map(|p| p.rows.as_ref());
        let waiting = || self.waiting.iter();
        let rows: usize = kept().chain(waiting()).map(RecordBatch::num_rows).sum();
        let bytes: usize = kept()
            .chain(waiting())
            .map(RecordBatch::get_array_memory_size)
            .sum();
        vec![
            ("num_late_records_dropped".into(), self.late_dropped),
            ("state_rows".into(), rows as u64),
            ("state_bytes".into(), bytes as u64),
        ]
    }
}

#[path = "match_state.rs"]
mod state;
