//! Stateless operators: filter, projection and user batch functions.

use std::sync::Arc;

use arrow::compute::filter_record_batch;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion_physical_expr::PhysicalExpr;
use weir_core::graph::StreamNode;
use weir_core::spec::{BatchFn, OperatorSpec};
use weir_core::{Result, WeirError};

use crate::count_window::CountWindowOperator;
use crate::decimal_arith::accelerate;
use crate::join::IntervalJoinOperator;
use crate::process::KeyedProcessOperator;
use crate::session::SessionWindowOperator;
use crate::session_join::SessionJoinOperator;
use crate::session_process::SessionProcessOperator;
use crate::window::WindowAggregateOperator;
use crate::window_join::WindowJoinOperator;
use crate::window_process::WindowProcessOperator;
use crate::{Operator, OperatorContext, Output};
use weir_core::time::WindowAssigner;

pub(crate) fn create(
    node: &StreamNode,
    spec: &OperatorSpec,
    ctx: &OperatorContext,
) -> Result<Box<dyn Operator>> {
    let op = create_in_memory(node, spec, ctx)?;
    if ctx.memory.backend() != weir_core::state_config::StateBackend::Disk {
        return Ok(op);
    }
    // The disk backend runs an operator that can spill as partitions of
    // itself, in memory each, their memory counted by the spilling one.
    let Some(keys) = op.spill_keys() else {
        return Ok(op);
    };
    let mut inner = ctx.clone();
    inner.memory = crate::memory::StateMemory::default();
    let (node_, spec_) = (node.clone(), spec.clone());
    let make = Box::new(move || create_in_memory(&node_, &spec_, &inner));
    Ok(Box::new(crate::spill::SpillingKeyed::try_new(
        node.name.clone(),
        make,
        keys,
        ctx,
    )?))
}

/// The in-memory operator of `spec`.
fn create_in_memory(
    node: &StreamNode,
    spec: &OperatorSpec,
    ctx: &OperatorContext,
) -> Result<Box<dyn Operator>> {
    let name = node.name.clone();
    Ok(match spec {
        OperatorSpec::Filter {
            predicate,
            input_schema,
        } => Box::new(FilterOperator {
            name,
            conjuncts: crate::filter_parts::parts(predicate, input_schema)
                .iter()
                .map(|p| accelerate(p, input_schema))
                .collect(),
        }),
        OperatorSpec::Project {
            exprs,
            input_schema,
        } => Box::new(ProjectOperator {
            name,
            exprs: exprs
                .iter()
                .map(|(e, _)| accelerate(e, input_schema))
                .collect(),
            schema: Arc::clone(&node.schema),
        }),
        OperatorSpec::GroupAggregate(g) if g.phase == weir_core::spec::AggregatePhase::Local => {
            Box::new(crate::local_aggregate::LocalAggregateOperator::try_new(
                name,
                g,
                Arc::clone(&node.schema),
                ctx.config.batch_size,
            )?)
        }
        OperatorSpec::GroupAggregate(g) => {
            Box::new(crate::group_aggregate::GroupAggregateOperator::try_new(
                name,
                g,
                Arc::clone(&node.schema),
                ctx,
            )?)
        }
        OperatorSpec::WindowAssign(w) => Box::new(WindowAssignOperator {
            name,
            time: w.input_schema.index_of(&w.time_column)?,
            assigner: w.assigner,
            schema: Arc::clone(&node.schema),
            windows: vec![],
        }),
        OperatorSpec::LookupJoin(l) => Box::new(crate::lookup_join::LookupJoinOperator::try_new(
            name,
            l,
            Arc::clone(&node.schema),
        )?),
        OperatorSpec::Sort(t) => Box::new(crate::sort::SortOperator::try_new(
            name,
            t,
            ctx.config.batch_size,
        )?),
        OperatorSpec::TopN(t) => Box::new(crate::top_n::TopNOperator::try_new(
            name,
            t,
            Arc::clone(&node.schema),
            ctx,
        )?),
        OperatorSpec::MapBatches(f) => Box::new(MapBatchesOperator {
            name,
            f: Arc::clone(f),
            schema: Arc::clone(&node.schema),
        }),
        OperatorSpec::KeyedProcess(p) => Box::new(KeyedProcessOperator::try_new(
            name,
            p,
            Arc::clone(&node.schema),
            node.side_outputs.clone(),
            ctx,
        )?),
        OperatorSpec::WindowProcess(w) if matches!(w.assigner, WindowAssigner::Session { .. }) => {
            Box::new(SessionProcessOperator::try_new(
                name,
                w,
                Arc::clone(&node.schema),
                ctx,
            )?)
        }
        OperatorSpec::WindowProcess(w) => Box::new(WindowProcessOperator::try_new(
            name,
            w,
            Arc::clone(&node.schema),
            ctx,
        )?),
        OperatorSpec::WindowJoin(j) if matches!(j.assigner, WindowAssigner::Session { .. }) => {
            Box::new(SessionJoinOperator::try_new(
                name,
                j,
                Arc::clone(&node.schema),
                ctx,
            )?)
        }
        OperatorSpec::WindowJoin(j) => Box::new(WindowJoinOperator::try_new(
            name,
            j,
            Arc::clone(&node.schema),
            ctx,
        )?),
        OperatorSpec::MatchRecognize(m) => {
            Box::new(crate::match_recognize::MatchRecognizeOperator::try_new(
                name,
                m,
                Arc::clone(&node.schema),
                ctx,
            )?)
        }
        OperatorSpec::OverAggregate(o) => Box::new(crate::over::OverAggregateOperator::try_new(
            name,
            o,
            Arc::clone(&node.schema),
            ctx,
        )?),
        OperatorSpec::RegularJoin(j) => {
            Box::new(crate::regular_join::RegularJoinOperator::try_new(
                name,
                j,
                Arc::clone(&node.schema),
                ctx,
            )?)
        }
        OperatorSpec::Lateral(l) => Box::new(crate::lateral::LateralOperator::try_new(
            name,
            l,
            Arc::clone(&node.schema),
            ctx,
        )?),
        OperatorSpec::TemporalJoin(j) => {
            Box::new(crate::temporal_join::TemporalJoinOperator::try_new(
                name,
                j,
                Arc::clone(&node.schema),
                ctx,
            )?)
        }
        OperatorSpec::IntervalJoin(j) => Box::new(IntervalJoinOperator::try_new(
            name,
            j,
            Arc::clone(&node.schema),
            ctx,
        )?),
        OperatorSpec::WindowAggregate(w) => {
            let schema = Arc::clone(&node.schema);
            match w.assigner {
                WindowAssigner::Count { .. } => {
                    Box::new(CountWindowOperator::try_new(name, w, schema, ctx)?)
                }
                WindowAssigner::Session { .. } => {
                    Box::new(SessionWindowOperator::try_new(name, w, schema, ctx)?)
                }
                _ => Box::new(WindowAggregateOperator::try_new(name, w, schema, ctx)?),
            }
        }
    })
}

/// Keeps the rows for which a predicate is true, one kernel call per batch.
pub struct FilterOperator {
    name: String,
    /// The predicate, or its conjuncts when each may be evaluated over
    /// every row ([`crate::filter_parts`]).
    conjuncts: Vec<Arc<dyn PhysicalExpr>>,
}

#[cfg(test)]
impl FilterOperator {
    pub(crate) fn for_test(conjuncts: Vec<Arc<dyn PhysicalExpr>>) -> Self {
        Self {
            name: "filter".into(),
            conjuncts,
        }
    }
}

impl Operator for FilterOperator {
    stateless!();

    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        let mut mask: Option<(arrow::array::BooleanArray, usize)> = None;
        for part in &self.conjuncts {
            let m = part.evaluate(&batch)?.into_array(batch.num_rows())?;
            let m = arrow::array::AsArray::as_boolean_opt(m.as_ref()).ok_or_else(|| {
                WeirError::Execution(format!("{}: predicate did not return booleans", self.name))
            })?;
            // A row is kept when every part is TRUE: a NULL drops it as
            // FALSE does.
            let both = match &mask {
                None => m.clone(),
                Some((before, _)) => arrow::compute::and(before, m)?,
            };
            let kept = both.true_count();
            if kept == 0 {
                return Ok(());
            }
            mask = Some((both, kept));
        }
        let Some((mask, kept)) = mask else {
            return out.collect(batch);
        };
        if kept == batch.num_rows() {
            return out.collect(batch);
        }
        let filtered = filter_record_batch(&batch, &mask)?;
        if filtered.num_rows() > 0 {
            out.collect(filtered)?;
        }
        Ok(())
    }
}

/// Computes output columns from expressions.
pub struct ProjectOperator {
    name: String,
    exprs: Vec<Arc<dyn PhysicalExpr>>,
    schema: SchemaRef,
}

impl Operator for ProjectOperator {
    stateless!();

    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        let columns = self
            .exprs
            .iter()
            .map(|e| Ok(e.evaluate(&batch)?.into_array(batch.num_rows())?))
            .collect::<Result<Vec<_>>>()?;
        out.collect(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }
}

/// Applies a user function to whole batches.
pub struct MapBatchesOperator {
    name: String,
    f: BatchFn,
    schema: SchemaRef,
}

impl Operator for MapBatchesOperator {
    stateless!();

    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        for b in (self.f)(batch)? {
            if b.schema().fields() != self.schema.fields() {
                return Err(WeirError::Execution(format!(
                    "{}: function returned a batch with schema {:?}, declared {:?}",
                    self.name,
                    b.schema(),
                    self.schema
                )));
            }
            if b.num_rows() > 0 {
                out.collect(b)?;
            }
        }
        Ok(())
    }
}

/// Repeats each row once per window its event time falls in and appends
/// the window's bounds (all columns gathered with one `take` each).
struct WindowAssignOperator {
    name: String,
    time: usize,
    assigner: WindowAssigner,
    schema: SchemaRef,
    windows: Vec<(i64, i64)>,
}

impl Operator for WindowAssignOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        let times = crate::window::timestamps(batch.column(self.time), &self.name)?;
        let mut rows = Vec::with_capacity(batch.num_rows());
        let (mut starts, mut ends) = (Vec::new(), Vec::new());
        for (i, &ts) in times.iter().enumerate() {
            self.windows.clear();
            self.assigner.windows_of(ts, &mut self.windows);
            for &(s, e) in &self.windows {
                rows.push(i as u32);
                starts.push(s);
                ends.push(e);
            }
        }
        let index = arrow::array::UInt32Array::from(rows);
        let mut columns = batch
            .columns()
            .iter()
            .map(|c| arrow::compute::take(c, &index, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let times: Vec<i64> = ends.iter().map(|e| e - 1).collect();
        for v in [starts, ends, times] {
            columns.push(Arc::new(arrow::array::TimestampMillisecondArray::from(v)));
        }
        out.collect(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }

    fn snapshot_state(&mut self, _checkpoint: u64) -> Result<Vec<crate::StateTable>> {
        Ok(vec![])
    }
}
