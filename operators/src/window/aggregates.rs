//! The aggregates of a window operator and the pieces the pane, session
//! and count-window operators share: state tables, key groups, regrouping.

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, BooleanArray};
use arrow::compute::{filter, filter_record_batch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion_common::ScalarValue;
use datafusion_expr::{EmitTo, GroupsAccumulator};
use datafusion_physical_expr::PhysicalExpr;
use datafusion_physical_expr::aggregate::{AggregateExprBuilder, AggregateFunctionExpr};
use datafusion_physical_expr::expressions::{Column, Literal, cast};
use datafusion_physical_expr::{GroupsAccumulatorAdapter, PhysicalSortExpr};
use datafusion_physical_plan::aggregates::group_values::GroupValues;
use weir_core::spec::WindowAggregateSpec;
use weir_core::{Result, WeirError};

use super::timestamps;
use crate::StateTable;

/// Keys and accumulators of one set of groups.
pub(crate) struct Accumulation {
    pub(crate) groups: Box<dyn GroupValues>,
    pub(crate) accumulators: Vec<Box<dyn GroupsAccumulator>>,
}

/// The aggregates of a window operator: functions, their (coerced) argument
/// expressions and the key schema. Shared by the pane and session operators.
pub(crate) struct Aggregates {
    pub(crate) key_indices: Vec<usize>,
    pub(crate) key_schema: SchemaRef,
    pub(crate) functions: Vec<Arc<AggregateFunctionExpr>>,
    /// Arguments of each function: the value, then (ordered functions) the
    /// event time they are ordered by.
    pub(crate) arguments: Vec<Vec<Arc<dyn PhysicalExpr>>>,
    /// Each function's FILTER column (BOOLEAN; rows where it is not true
    /// are skipped), if it has one.
    pub(crate) filters: Vec<Option<usize>>,
}

impl Aggregates {
    pub(crate) fn try_new(name: &str, spec: &WindowAggregateSpec) -> Result<Self> {
        Self::build(
            name,
            &spec.keys,
            &spec.aggregates,
            &spec.input_schema,
            Some(spec.rowtime.as_deref()),
        )
    }

    /// The aggregates over `input` grouped by `keys`. `rowtime`: `Some` when
    /// FIRST_VALUE / LAST_VALUE follow event time (then it must name the
    /// column), `None` when they follow arrival order.
    pub(crate) fn build(
        name: &str,
        keys: &[String],
        aggregates: &[weir_core::spec::AggregateSpec],
        input: &SchemaRef,
        rowtime: Option<Option<&str>>,
    ) -> Result<Self> {
        let key_indices = crate::column_indices(input, keys)?;
        // A non-keyed (all-window) aggregation groups by one constant.
        let key_schema = if key_indices.is_empty() {
            Arc::new(arrow::datatypes::Schema::new(vec![
                arrow::datatypes::Field::new("__all", DataType::Int8, false),
            ]))
        } else {
            Arc::new(input.project(&key_indices)?)
        };
        let mut functions = Vec::new();
        let mut arguments = Vec::new();
        let mut filters = Vec::new();
        for a in aggregates {
            filters.push(a.filter_index(input)?);
            let mut arg: Arc<dyn PhysicalExpr> = match &a.column {
                Some(c) => Arc::new(Column::new(c, input.index_of(c)?)),
                None => Arc::new(Literal::new(ScalarValue::Int64(Some(1)))),
            };
            let coerced = a.argument_field(input)?;
            if arg.data_type(input)? != *coerced.data_type() {
                arg = cast(arg, input, coerced.data_type().clone())?;
            }
            let mut builder = AggregateExprBuilder::new(a.function.udaf(), vec![Arc::clone(&arg)])
                .schema(Arc::clone(input))
                .alias(a.alias.clone())
                .with_distinct(a.function.is_distinct());
            let mut args = vec![arg];
            if let (true, Some(rowtime)) = (a.function.is_ordered(), rowtime) {
                // FIRST_VALUE / LAST_VALUE follow event time, not arrival order.
                let rowtime = rowtime.ok_or_else(|| {
                    WeirError::plan(format!("{name}: {a} needs an event-time window"))
                })?;
                let ts: Arc<dyn PhysicalExpr> =
                    Arc::new(Column::new(rowtime, input.index_of(rowtime)?));
                builder = builder.order_by(vec![PhysicalSortExpr::new_default(Arc::clone(&ts))]);
                args.push(ts);
            }
            let expr = builder
                .build()
                .map_err(|e| WeirError::plan(format!("{name}: aggregate {a}: {e}")))?;
            functions.push(Arc::new(expr));
            arguments.push(args);
        }
        Ok(Self {
            key_indices,
            key_schema,
            functions,
            arguments,
            filters,
        })
    }

    /// A fresh accumulation: string keys that are short codes are grouped
    /// packed ([`crate::short_strings`]), others in DataFusion's table.
    pub(crate) fn new_accumulation(&self) -> Result<Accumulation> {
        Ok(Accumulation {
            groups: crate::key_table::new_table(&self.key_schema)?,
            accumulators: self.new_accumulators()?,
        })
    }

    /// As [`Self::new_accumulation`], for an accumulation that lives
    /// across batches: one integer key is grouped by its value's offset
    /// ([`crate::dense_groups`]) while its values lie close together.
    pub(crate) fn new_lasting_accumulation(&self) -> Result<Accumulation> {
        Ok(Accumulation {
            groups: crate::dense_groups::DenseGroups::boxed(Arc::clone(&self.key_schema))?,
            accumulators: self.new_accumulators()?,
        })
    }

    /// One fresh accumulator per aggregate, for callers that number the
    /// groups themselves.
    pub(crate) fn new_accumulators(&self) -> Result<Vec<Box<dyn GroupsAccumulator>>> {
        Ok(self
            .functions
            .iter()
            .map(
                |a| -> datafusion_common::Result<Box<dyn GroupsAccumulator>> {
                    if let Some(short) = crate::short_min_max::ShortMinMax::for_function(a) {
                        Ok(Box::new(short))
                    } else if a.groups_accumulator_supported() {
                        a.create_groups_accumulator()
                    } else {
                        // Any aggregate works: one row accumulator per group.
                        let f = Arc::clone(a);
                        Ok(Box::new(GroupsAccumulatorAdapter::new(move || {
                            f.create_accumulator()
                        })))
                    }
                },
            )
            .collect::<datafusion_common::Result<Vec<_>>>()?)
    }

    /// The key column of an all-window (no key), `rows` long: one constant.
    pub(crate) fn constant_key(&self, rows: usize) -> Vec<ArrayRef> {
        vec![Arc::new(arrow::array::Int8Array::from(vec![0i8; rows]))]
    }

    /// The key columns of `batch`'s rows (the constant for an all-window).
    pub(crate) fn keys(&self, batch: &RecordBatch) -> Vec<ArrayRef> {
        if self.key_indices.is_empty() {
            return self.constant_key(batch.num_rows());
        }
        self.key_indices
            .iter()
            .map(|&i| Arc::clone(batch.column(i)))
            .collect()
    }

    /// The schema of a pane snapshot: `pane_start`, the key columns, then
    /// every accumulator's intermediate state columns, named `a{i}_{field}`.
    pub(crate) fn snapshot_schema(&self) -> Result<SchemaRef> {
        let mut fields = vec![Field::new("pane_start", DataType::Int64, false)];
        fields.extend(self.key_schema.fields().iter().map(|f| f.as_ref().clone()));
        for (i, f) in self.functions.iter().enumerate() {
            for state in f.state_fields()? {
                fields.push(
                    state
                        .as_ref()
                        .clone()
                        .with_name(format!("a{i}_{}", state.name()))
                        .with_nullable(true),
                );
            }
        }
        Ok(Arc::new(Schema::new(fields)))
    }

    /// The schema of a session snapshot: the key columns, `session_start`,
    /// `session_end`, `fired`, then the accumulators' state columns.
    pub(crate) fn session_snapshot_schema(&self) -> Result<SchemaRef> {
        let panes = self.snapshot_schema()?;
        let keys = self.key_schema.fields().len();
        let mut fields: Vec<Field> = panes.fields()[1..1 + keys]
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new("session_start", DataType::Int64, false));
        fields.push(Field::new("session_end", DataType::Int64, false));
        fields.push(Field::new("fired", DataType::Boolean, false));
        fields.extend(
            panes.fields()[1 + keys..]
                .iter()
                .map(|f| f.as_ref().clone()),
        );
        Ok(Arc::new(Schema::new(fields)))
    }

    /// Number of state columns of each accumulator.
    pub(crate) fn state_widths(&self) -> Result<Vec<usize>> {
        self.functions
            .iter()
            .map(|f| Ok(f.state_fields()?.len()))
            .collect()
    }

    /// Whether each aggregate's value is its one state column as it is:
    /// COUNT, MIN and MAX, and SUM of integers or doubles (DataFusion's
    /// accumulators evaluate those to their state). A group's value is then
    /// read from its stored state without an accumulator.
    pub(crate) fn values_are_states(&self) -> Result<Vec<bool>> {
        self.functions
            .iter()
            .map(|f| {
                let states = f.state_fields()?;
                let ty = f.field().data_type().clone();
                let plain = match f.fun().name() {
                    "count" | "min" | "max" => true,
                    "sum" => matches!(ty, DataType::Int64 | DataType::UInt64 | DataType::Float64),
                    _ => false,
                };
                Ok(plain && !f.is_distinct() && states.len() == 1 && states[0].data_type() == &ty)
            })
            .collect()
    }

    /// Schema of the grouping key (a constant for all-windows).
    pub(crate) fn key_schema(&self) -> SchemaRef {
        Arc::clone(&self.key_schema)
    }

    /// Key columns as they appear in the output (none for all-windows).
    pub(crate) fn output_keys(&self, keys: Vec<ArrayRef>) -> Vec<ArrayRef> {
        if self.key_indices.is_empty() {
            vec![]
        } else {
            keys
        }
    }

    /// Update `accumulators` with the rows of `batch` assigned to `group_ids`.
    pub(crate) fn update(
        &self,
        accumulators: &mut [Box<dyn GroupsAccumulator>],
        batch: &RecordBatch,
        group_ids: &[usize],
        total_groups: usize,
    ) -> Result<()> {
        for (i, a) in accumulators.iter_mut().enumerate() {
            let values = self.values(i, batch)?;
            a.update_batch(&values, group_ids, self.filter(i, batch), total_groups)?;
        }
        Ok(())
    }

    /// Aggregate `i`'s arguments evaluated over `batch`.
    pub(crate) fn values(&self, i: usize, batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
        self.arguments[i]
            .iter()
            .map(|e| Ok(e.evaluate(batch)?.into_array(batch.num_rows())?))
            .collect()
    }

    /// Aggregate `i`'s FILTER column in `batch`, if it has one.
    pub(crate) fn filter<'a>(&self, i: usize, batch: &'a RecordBatch) -> Option<&'a BooleanArray> {
        self.filters[i].map(|c| batch.column(c).as_boolean())
    }
}

/// The rows of `waiting` that the watermark `w` has passed (event-time
/// column `at`, named `name`), taken out as one batch in arrival order; the
/// others stay, in order.
///
/// A batch wholly before or after the watermark moves or stays as it is;
/// only a batch the watermark cuts is filtered. Concatenating everything
/// waiting and filtering it in two at each watermark copied every row that
/// stayed once per watermark it waited through.
pub(crate) fn take_ready(
    waiting: &mut Vec<RecordBatch>,
    schema: &SchemaRef,
    (at, name): (usize, &str),
    w: i64,
) -> Result<Option<RecordBatch>> {
    let mut ready = Vec::new();
    let mut rest = Vec::with_capacity(waiting.len());
    for batch in waiting.drain(..) {
        let ts = timestamps(batch.column(at), name)?;
        let (low, high) = ts
            .iter()
            .fold((i64::MAX, i64::MIN), |(l, h), &t| (l.min(t), h.max(t)));
        if high <= w {
            ready.push(batch);
        } else if low > w {
            rest.push(batch);
        } else {
            let passed = arrow::buffer::BooleanBuffer::collect_bool(ts.len(), |i| ts[i] <= w);
            let stays = BooleanArray::new(!&passed, None);
            let passed = BooleanArray::new(passed, None);
            ready.push(arrow::compute::filter_record_batch(&batch, &passed)?);
            rest.push(arrow::compute::filter_record_batch(&batch, &stays)?);
        }
    }
    // Pieces left by many cut batches are joined now and then.
    if rest.len() > MAX_WAITING_BATCHES {
        rest = vec![arrow::compute::concat_batches(schema, &rest)?];
    }
    *waiting = rest;
    let ready = match ready.len() {
        0 => return Ok(None),
        1 => ready.pop().expect("one batch"),
        _ => arrow::compute::concat_batches(schema, &ready)?,
    };
    Ok((ready.num_rows() > 0).then_some(ready))
}

/// Batches [`take_ready`] leaves waiting before it joins them into one.
const MAX_WAITING_BATCHES: usize = 256;

/// The rows of `batch` (times `ts`) after the watermark `watermark`; the
/// others are late, counted into `dropped`.
pub(crate) fn drop_late(
    batch: RecordBatch,
    ts: &[i64],
    watermark: i64,
    dropped: &mut u64,
) -> Result<RecordBatch> {
    let late = ts.iter().filter(|&&t| t <= watermark).count();
    if late == 0 {
        return Ok(batch);
    }
    *dropped += late as u64;
    let keep: BooleanArray = ts.iter().map(|&t| Some(t > watermark)).collect();
    Ok(arrow::compute::filter_record_batch(&batch, &keep)?)
}

/// Table `meta`: an operator's event-time clock (`watermark`) at a barrier.
pub(crate) fn meta_table(watermark: i64) -> Result<StateTable> {
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new(
            "watermark",
            DataType::Int64,
            false,
        )])),
        vec![Arc::new(arrow::array::Int64Array::from(vec![watermark]))],
    )?;
    Ok(StateTable::new("meta", batch))
}

/// Fold a restored `meta` table into `watermark`: the smallest of them.
pub(crate) fn restore_meta(
    name: &str,
    batch: &RecordBatch,
    watermark: &mut Option<i64>,
) -> Result<()> {
    let w = batch
        .column_by_name("watermark")
        .and_then(|c| c.as_primitive_opt::<arrow::datatypes::Int64Type>())
        .ok_or_else(|| WeirError::Execution(format!("{name}: malformed meta state")))?;
    for v in w.values() {
        *watermark = Some(watermark.map_or(*v, |m| m.min(*v)));
    }
    Ok(())
}

/// The rows of `batch` whose key (columns `keys`) hashes into `range`.
pub(crate) fn keep_key_groups(
    batch: RecordBatch,
    keys: &[usize],
    range: weir_core::keys::KeyGroupRange,
    max_parallelism: u32,
) -> Result<RecordBatch> {
    let mut groups = Vec::new();
    let columns: Vec<ArrayRef> = keys.iter().map(|&k| Arc::clone(batch.column(k))).collect();
    weir_core::keys::key_groups(&columns, max_parallelism, &mut Vec::new(), &mut groups)?;
    let mask: BooleanArray = groups.iter().map(|g| Some(range.contains(*g))).collect();
    Ok(filter_record_batch(&batch, &mask)?)
}

/// Move groups between accumulators: merge the intermediate `states` of
/// old group `g` (one array per state column, one row per old group) into
/// `into` at group `target[g]`, skipping groups whose target is `None`.
/// Several old groups may share a target (they are merged).
pub(crate) fn regroup(
    states: &[Vec<ArrayRef>],
    target: &[Option<usize>],
    into: &mut [Box<dyn GroupsAccumulator>],
    total_groups: usize,
) -> Result<()> {
    let mask: BooleanArray = target.iter().map(|t| Some(t.is_some())).collect();
    let ids: Vec<usize> = target.iter().flatten().copied().collect();
    for (a, state) in into.iter_mut().zip(states) {
        let state = state
            .iter()
            .map(|s| filter(s.as_ref(), &mask))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        a.merge_batch(&state, &ids, total_groups)?;
    }
    Ok(())
}

/// Drain the intermediate state of every group of `accumulators`.
pub(crate) fn drain_states(
    accumulators: &mut [Box<dyn GroupsAccumulator>],
) -> Result<Vec<Vec<ArrayRef>>> {
    Ok(accumulators
        .iter_mut()
        .map(|a| a.state(EmitTo::All))
        .collect::<datafusion_common::Result<Vec<_>>>()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Decimal128Array, Int64Array, StringArray};
    use weir_core::spec::AggregateSpec;

    /// The aggregates said to evaluate to their state do, on DataFusion's
    /// accumulators (groups with values, with NULLs only, and without
    /// rows), and the others are not said to.
    #[test]
    fn values_are_states_where_datafusion_evaluates_to_the_state() {
        let input = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("n", DataType::Int64, true),
            Field::new("d", DataType::Decimal128(10, 2), true),
            Field::new("s", DataType::Utf8, true),
        ]));
        let list = vec![
            AggregateSpec::count_star().alias("a0"),
            AggregateSpec::count("n").alias("a1"),
            AggregateSpec::sum("n").alias("a2"),
            AggregateSpec::sum("d").alias("a3"),
            AggregateSpec::min("s").alias("a4"),
            AggregateSpec::max("n").alias("a5"),
            AggregateSpec::max("d").alias("a6"),
            AggregateSpec::avg("n").alias("a7"),
            AggregateSpec::count_distinct("n").alias("a8"),
        ];
        let aggregates = Aggregates::build("t", &["k".into()], &list, &input, None).unwrap();
        let plain = aggregates.values_are_states().unwrap();
        assert_eq!(
            plain,
            [true, true, true, false, true, true, true, false, false]
        );
        let batch = RecordBatch::try_new(
            Arc::clone(&input),
            vec![
                Arc::new(StringArray::from(vec!["a", "a", "b", "c"])),
                Arc::new(Int64Array::from(vec![
                    Some(5),
                    Some(-7),
                    None,
                    Some(i64::MAX),
                ])),
                Arc::new(
                    Decimal128Array::from(vec![Some(150), None, None, Some(-3)])
                        .with_precision_and_scale(10, 2)
                        .unwrap(),
                ),
                Arc::new(StringArray::from(vec![
                    Some("x"),
                    Some("w"),
                    None,
                    Some(""),
                ])),
            ],
        )
        .unwrap();
        // Group 3 has no rows.
        for (i, plain) in plain.iter().enumerate() {
            if !plain {
                continue;
            }
            let mut a = aggregates.new_accumulators().unwrap().remove(i);
            let values = aggregates.values(i, &batch).unwrap();
            a.update_batch(&values, &[0, 0, 1, 2], None, 4).unwrap();
            let state = a.state(EmitTo::All).unwrap();
            let mut b = aggregates.new_accumulators().unwrap().remove(i);
            b.update_batch(&values, &[0, 0, 1, 2], None, 4).unwrap();
            let value = b.evaluate(EmitTo::All).unwrap();
            assert_eq!(state[0].as_ref(), value.as_ref(), "{}", list[i]);
        }
    }

    proptest::proptest! {
        /// The rows passed, in arrival order, and the rest, as filtering
        /// everything waiting at once gives them.
        #[test]
        fn take_ready_splits_as_one_filter(
            times in proptest::collection::vec(proptest::collection::vec(0i64..20, 0..12), 0..8),
            w in -1i64..21,
        ) {
            let schema = Arc::new(Schema::new(vec![
                Field::new("t", DataType::Int64, false),
                Field::new("arrival", DataType::Int64, false),
            ]));
            let mut arrival = 0;
            let mut waiting: Vec<RecordBatch> = times
                .iter()
                .map(|ts| {
                    let at = arrow::array::Int64Array::from_iter_values(arrival..arrival + ts.len() as i64);
                    arrival += ts.len() as i64;
                    let t = arrow::array::Int64Array::from(ts.clone());
                    RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(t), Arc::new(at)]).unwrap()
                })
                .collect();
            let all = arrow::compute::concat_batches(&schema, &waiting).unwrap();
            let rows = |b: &RecordBatch| -> Vec<(i64, i64)> {
                let t = b.column(0).as_primitive::<arrow::datatypes::Int64Type>();
                let a = b.column(1).as_primitive::<arrow::datatypes::Int64Type>();
                t.values().iter().copied().zip(a.values().iter().copied()).collect()
            };
            let (want_ready, want_rest): (Vec<_>, Vec<_>) = rows(&all).into_iter().partition(|&(t, _)| t <= w);
            let ready = take_ready(&mut waiting, &schema, (0, "t"), w).unwrap();
            proptest::prop_assert_eq!(ready.map(|b| rows(&b)).unwrap_or_default(), want_ready);
            let rest: Vec<(i64, i64)> = waiting.iter().flat_map(rows).collect();
            proptest::prop_assert_eq!(rest, want_rest);
        }
    }
}
