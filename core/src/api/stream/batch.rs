//! Batch-mode operators: aggregation in two phases and sorting.

use std::sync::Arc;

use arrow::datatypes::Schema;

use super::{DataStream, group_aggregate_fields};
use crate::config::RuntimeMode;
use crate::error::{Result, WeirError};
use crate::graph::TransformationKind;
use crate::spec::{AggregatePhase, AggregateSpec, GroupAggregateSpec, OperatorSpec, SortSpec};
use crate::time::column_list;

impl DataStream {
    /// Batch mode: aggregate per key in two phases, as Flink's and
    /// DataFusion's batch planners do. A local phase, chained to this
    /// stream at its parallelism, aggregates what each subtask reads into
    /// intermediate states; only those cross the hash exchange by `keys`,
    /// to a global phase that merges them. The output is
    /// [`KeyedStream::group_aggregate`]'s in batch mode. Needs an
    /// insert-only input and aggregates that split
    /// ([`AggregateSpec::splits_into_phases`]).
    pub fn two_phase_group_aggregate(
        &self,
        keys: &[&str],
        aggregates: Vec<AggregateSpec>,
    ) -> Result<DataStream> {
        if self.env.config().runtime_mode != RuntimeMode::Batch {
            return Err(WeirError::plan(
                "a two-phase group aggregation runs in batch mode only",
            ));
        }
        if self.changelog_mode().is_updating() {
            return Err(WeirError::plan(
                "a two-phase group aggregation needs an insert-only input",
            ));
        }
        if let Some(a) = aggregates.iter().find(|a| !a.splits_into_phases()) {
            return Err(WeirError::plan(format!(
                "{a} does not split into a local and a global phase"
            )));
        }
        let key_names: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        let fields = group_aggregate_fields(&key_names, &aggregates, &self.schema, false)?;
        let partial = GroupAggregateSpec::partial_schema(&key_names, &aggregates, &self.schema)?;
        let local = GroupAggregateSpec {
            keys: key_names.clone(),
            aggregates: aggregates.clone(),
            input_schema: Arc::clone(&self.schema),
            changelog: false,
            retractions: false,
            upsert: false,
            phase: AggregatePhase::Local,
        };
        let local = self.derive(
            format!("{:?}", OperatorSpec::GroupAggregate(local.clone())),
            TransformationKind::Operator(OperatorSpec::GroupAggregate(local)),
            Arc::clone(&partial),
            None,
        );
        let keyed = local.key_by(keys)?;
        let global = GroupAggregateSpec {
            input_schema: partial,
            phase: AggregatePhase::Global {
                rows: Arc::clone(&self.schema),
            },
            keys: key_names,
            aggregates,
            changelog: false,
            retractions: false,
            upsert: false,
        };
        Ok(keyed.stream.derive(
            format!("{:?}", OperatorSpec::GroupAggregate(global.clone())),
            TransformationKind::Operator(OperatorSpec::GroupAggregate(global)),
            Arc::new(Schema::new(fields)),
            None,
        ))
    }

    /// Batch mode: every row in `order` (column, descending, nulls first),
    /// or only the `fetch` rows after the first `offset` (SQL's `ORDER BY
    /// … LIMIT … OFFSET`; with no ordering, the first rows to arrive). One
    /// subtask sorts the whole input once it has ended, as Flink's batch
    /// planner runs a global sort; to keep the order, what follows it must
    /// run at parallelism 1 too (the SQL planner sees to that).
    pub fn sort(
        &self,
        order: Vec<(String, bool, bool)>,
        offset: usize,
        fetch: Option<usize>,
    ) -> Result<DataStream> {
        if self.env.config().runtime_mode != RuntimeMode::Batch {
            return Err(WeirError::plan(
                "a sort runs in batch mode only (a stream never ends); keep the first rows per key with top_n",
            ));
        }
        if self.changelog_mode().is_updating() {
            return Err(WeirError::plan("a sort needs an insert-only input"));
        }
        for (c, _, _) in &order {
            if self.schema.field_with_name(c).is_err() {
                return Err(self.in_context(WeirError::plan(format!(
                    "sort: '{c}' is not a column; available columns: {}",
                    column_list(&self.schema)
                ))));
            }
        }
        let spec = SortSpec {
            order,
            offset,
            fetch,
            input_schema: Arc::clone(&self.schema),
        };
        let out = self.derive(
            spec.to_string(),
            TransformationKind::Operator(OperatorSpec::Sort(spec)),
            Arc::clone(&self.schema),
            self.rowtime.clone(),
        );
        out.env.update(out.id, |t| t.parallelism = Some(1));
        Ok(out)
    }
}
