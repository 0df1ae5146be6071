//! Count windows: every `size` rows of a key, in arrival order.
//!
//! Each key's open window is a group id in one set of `GroupsAccumulator`s;
//! a batch is assigned to groups in one pass over its key ids and
//! aggregated with one call per aggregate. When windows complete, the
//! accumulators' intermediate state is drained once and re-grouped: the
//! completed windows into their results, the open ones into compact fresh
//! accumulators — the same move the session windows make.

use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion_expr::{EmitTo, GroupsAccumulator};
use weir_core::process::KeyId;
use weir_core::spec::WindowAggregateSpec;
use weir_core::time::WindowAssigner;
use weir_core::{Result, WeirError};

use crate::pane_buffer::emit_sliced;
use crate::process::KeyTable;
use crate::window::{Aggregates, drain_states, regroup};
use crate::{Operator, OperatorContext, Output};

/// Keyed count windows with incremental aggregation.
pub struct CountWindowOperator {
    name: String,
    aggregates: Aggregates,
    size: u64,
    output_schema: SchemaRef,
    batch_size: usize,
    keys: KeyTable,
    /// Per key id: rows in its open window, and the window's group.
    pending: Vec<(u64, Option<usize>)>,
    /// Per group: the key id it belongs to.
    group_key: Vec<KeyId>,
    accumulators: Vec<Box<dyn GroupsAccumulator>>,
    ids: Vec<usize>,
    windows_fired: u64,
    filter: crate::KeyGroupFilter,
}

impl CountWindowOperator {
    /// Build the operator for one subtask.
    pub fn try_new(
        name: String,
        spec: &WindowAggregateSpec,
        output_schema: SchemaRef,
        ctx: &OperatorContext,
    ) -> Result<Self> {
        let WindowAssigner::Count { size } = spec.assigner else {
            return Err(WeirError::plan(format!("{name}: not a count window")));
        };
        let aggregates = Aggregates::try_new(&name, spec)?;
        let fresh = aggregates.new_accumulation()?;
        Ok(Self {
            keys: KeyTable::new(aggregates.key_schema())?,
            name,
            size: size as u64,
            output_schema,
            batch_size: ctx.config.batch_size,
            pending: Vec::new(),
            group_key: Vec::new(),
            accumulators: fresh.accumulators,
            ids: Vec::new(),
            windows_fired: 0,
            filter: crate::KeyGroupFilter::new(ctx),
            aggregates,
        })
    }

    /// Emit the completed groups and continue the open ones in fresh,
    /// compact accumulators.
    fn complete(&mut self, completed: &[usize], out: &mut dyn Output) -> Result<()> {
        let groups = self.group_key.len();
        let states = drain_states(&mut self.accumulators)?;
        let mut closed_target = vec![None; groups];
        for (i, &g) in completed.iter().enumerate() {
            closed_target[g] = Some(i);
        }
        let mut results = self.aggregates.new_accumulation()?.accumulators;
        regroup(&states, &closed_target, &mut results, completed.len())?;
        let closed_keys: Vec<KeyId> = completed.iter().map(|&g| self.group_key[g]).collect();
        let mut columns: Vec<ArrayRef> =
            self.aggregates.output_keys(self.keys.values(&closed_keys)?);
        for a in &mut results {
            columns.push(a.evaluate(EmitTo::All)?);
        }
        let batch = RecordBatch::try_new(Arc::clone(&self.output_schema), columns)
            .map_err(|e| WeirError::Execution(format!("{}: {e}", self.name)))?;
        self.windows_fired += completed.len() as u64;
        emit_sliced(&batch, self.batch_size, out)?;

        // Open windows: renumber densely.
        let mut open_target = vec![None; groups];
        let mut group_key = Vec::new();
        for (key, (_, group)) in self.pending.iter_mut().enumerate() {
            if let Some(g) = group {
                open_target[*g] = Some(group_key.len());
                *group = Some(group_key.len());
                group_key.push(key as KeyId);
            }
        }
        let mut fresh = self.aggregates.new_accumulation()?.accumulators;
        regroup(&states, &open_target, &mut fresh, group_key.len())?;
        self.accumulators = fresh;
        self.group_key = group_key;
        Ok(())
    }
}

impl Operator for CountWindowOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        let keys = self.aggregates.keys(&batch);
        let mut ids = std::mem::take(&mut self.ids);
        self.keys.intern(&keys, &mut ids)?;
        if self.pending.len() < self.keys.len() {
            self.pending.resize(self.keys.len(), (0, None));
        }
        let mut row_groups = Vec::with_capacity(ids.len());
        let mut completed = Vec::new();
        for &k in &ids {
            let (count, group) = &mut self.pending[k];
            let g = *group.get_or_insert_with(|| {
                self.group_key.push(k as KeyId);
                self.group_key.len() - 1
            });
            row_groups.push(g);
            *count += 1;
            if *count == self.size {
                completed.push(g);
                *count = 0;
                *group = None;
            }
        }
        self.ids = ids;
        let total = self.group_key.len();
        self.aggregates
            .update(&mut self.accumulators, &batch, &row_groups, total)?;
        if !completed.is_empty() {
            self.complete(&completed, out)?;
        }
        Ok(())
    }

    /// Table `windows`: one row per key with an open window — the key
    /// columns, `count` (rows in it so far), then each aggregate's
    /// intermediate state.
    fn snapshot_state(&mut self, _checkpoint: u64) -> Result<Vec<crate::StateTable>> {
        let groups = self.group_key.len();
        // Reading the state empties the accumulators: read, then merge back.
        let states = drain_states(&mut self.accumulators)?;
        let ids: Vec<usize> = (0..groups).collect();
        let mut fresh = self.aggregates.new_accumulation()?.accumulators;
        for (a, state) in fresh.iter_mut().zip(&states) {
            a.merge_batch(state, &ids, groups)?;
        }
        self.accumulators = fresh;
        let panes = self.aggregates.snapshot_schema()?;
        let keys = self.aggregates.key_schema().fields().len();
        let mut fields: Vec<arrow::datatypes::Field> = panes.fields()[1..1 + keys]
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(arrow::datatypes::Field::new(
            "count",
            arrow::datatypes::DataType::UInt64,
            false,
        ));
        fields.extend(
            panes.fields()[1 + keys..]
                .iter()
                .map(|f| f.as_ref().clone()),
        );
        let mut columns = if groups == 0 {
            fields[..keys]
                .iter()
                .map(|f| arrow::array::new_empty_array(f.data_type()))
                .collect()
        } else {
            self.keys.values(&self.group_key)?
        };
        columns.push(Arc::new(arrow::array::UInt64Array::from_iter_values(
            self.group_key.iter().map(|&k| self.pending[k as usize].0),
        )));
        columns.extend(states.into_iter().flatten());
        let batch = RecordBatch::try_new(Arc::new(arrow::datatypes::Schema::new(fields)), columns)?;
        Ok(vec![
            crate::StateTable::new("windows", batch).keyed(0..keys),
        ])
    }

    fn restore_state(&mut self, tables: Vec<crate::StateTable>) -> Result<()> {
        use arrow::array::AsArray;
        let keys = self.aggregates.key_schema().fields().len();
        let widths = self.aggregates.state_widths()?;
        for t in tables {
            if t.name != "windows"
                || t.batch.num_columns() != keys + 1 + widths.iter().sum::<usize>()
            {
                return Err(WeirError::Execution(format!(
                    "{}: malformed count window state '{}'",
                    self.name, t.name
                )));
            }
            let b = self.filter.keep(t.batch, &(0..keys).collect::<Vec<_>>())?;
            let mut ids = Vec::new();
            self.keys.intern(&b.columns()[..keys], &mut ids)?;
            if self.pending.len() < self.keys.len() {
                self.pending.resize(self.keys.len(), (0, None));
            }
            let counts = b
                .column(keys)
                .as_primitive_opt::<arrow::datatypes::UInt64Type>()
                .ok_or_else(|| WeirError::Execution(format!("{}: malformed counts", self.name)))?;
            let mut groups = Vec::with_capacity(ids.len());
            for (row, &k) in ids.iter().enumerate() {
                let g = self.group_key.len();
                self.group_key.push(k as KeyId);
                self.pending[k] = (counts.value(row), Some(g));
                groups.push(g);
            }
            let total = self.group_key.len();
            let mut at = keys + 1;
            for (a, &w) in self.accumulators.iter_mut().zip(&widths) {
                a.merge_batch(&b.columns()[at..at + w], &groups, total)?;
                at += w;
            }
        }
        Ok(())
    }

    fn metrics(&self) -> Vec<(String, u64)> {
        vec![("windows_fired".into(), self.windows_fired)]
    }
}
