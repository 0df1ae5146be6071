//! A group table for one integer key whose values lie in a narrow range
//! (user ids, item ids, small codes — the usual `GROUP BY`): a key's group
//! is found by indexing a vector with `value - base` instead of hashing.
//! When the values spread too wide for that, the table moves its groups, in
//! id order, into DataFusion's hash table and goes on there; ids never
//! change.
//!
//! For accumulations that live across batches (batch mode's aggregations):
//! the vector spans every value seen, so a fresh table per batch would pay
//! for it every time.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Int64Type, SchemaRef};
use datafusion_common::Result;
use datafusion_expr::EmitTo;
use datafusion_physical_plan::aggregates::group_values::{GroupValues, new_group_values};
use datafusion_physical_plan::aggregates::order::GroupOrdering;

/// No group yet for this value.
const NONE: u32 = u32::MAX;
/// The vector may always span this many values (4 MiB of slots)…
const SPAN: i128 = 1 << 20;
/// …and beyond that, up to this many slots per group.
const SLOTS_PER_GROUP: i128 = 8;

/// The group table of one integer key.
pub(crate) struct DenseGroups {
    schema: SchemaRef,
    mode: Mode,
}

enum Mode {
    Dense {
        /// The value of `slots[0]`.
        base: i64,
        /// Per value from `base`, its group id or [`NONE`].
        slots: Vec<u32>,
        /// Per group id, its value (any for the null group).
        values: Vec<i64>,
        null_group: Option<usize>,
    },
    Hash(Box<dyn GroupValues>),
}

fn dense() -> Mode {
    Mode::Dense {
        base: 0,
        slots: Vec::new(),
        values: Vec::new(),
        null_group: None,
    }
}

impl DenseGroups {
    /// A table for `schema`'s keys: dense when it is one integer column,
    /// otherwise [`crate::key_table::new_table`]'s (packed short strings,
    /// or DataFusion's table).
    pub(crate) fn boxed(schema: SchemaRef) -> Result<Box<dyn GroupValues>> {
        let one_integer = schema.fields().len() == 1
            && matches!(
                schema.field(0).data_type(),
                DataType::Int8
                    | DataType::Int16
                    | DataType::Int32
                    | DataType::Int64
                    | DataType::UInt8
                    | DataType::UInt16
                    | DataType::UInt32
            );
        if !one_integer {
            return crate::key_table::new_table(&schema);
        }
        Ok(Box::new(Self {
            schema,
            mode: dense(),
        }))
    }

    /// The groups so far as a key column, in id order.
    fn keys(&self, values: &[i64], null_group: Option<usize>) -> Result<ArrayRef> {
        let array: Int64Array = match null_group {
            None => Int64Array::from(values.to_vec()),
            Some(n) => values
                .iter()
                .enumerate()
                .map(|(i, &v)| (i != n).then_some(v))
                .collect(),
        };
        Ok(cast(&array, self.schema.field(0).data_type())?)
    }

    /// Go on in DataFusion's hash table, with the same ids.
    fn hashed(&mut self) -> Result<&mut Box<dyn GroupValues>> {
        if let Mode::Dense {
            values, null_group, ..
        } = &self.mode
        {
            let keys = self.keys(values, *null_group)?;
            self.mode = Mode::Hash(holding(&self.schema, &[keys])?);
        }
        match &mut self.mode {
            Mode::Hash(table) => Ok(table),
            Mode::Dense { .. } => unreachable!("just replaced"),
        }
    }
}

/// DataFusion's table for `schema` holding `keys` (distinct, one group per
/// row) with the rows' positions as their ids.
pub(crate) fn holding(schema: &SchemaRef, keys: &[ArrayRef]) -> Result<Box<dyn GroupValues>> {
    let mut table = new_group_values(Arc::clone(schema), &GroupOrdering::None)?;
    let rows = keys.first().map_or(0, |k| k.len());
    let mut ids = Vec::new();
    table.intern(keys, &mut ids)?;
    if ids.iter().enumerate().all(|(i, &id)| i == id) {
        return Ok(table);
    }
    // The multi-column table numbers keys whose hashes collide after the
    // others of the same batch: one key per call keeps the order.
    table = new_group_values(Arc::clone(schema), &GroupOrdering::None)?;
    for row in 0..rows {
        let key: Vec<ArrayRef> = keys.iter().map(|k| k.slice(row, 1)).collect();
        table.intern(&key, &mut ids)?;
    }
    Ok(table)
}

impl GroupValues for DenseGroups {
    fn intern(&mut self, cols: &[ArrayRef], groups: &mut Vec<usize>) -> Result<()> {
        let column = cast(&cols[0], &DataType::Int64)?;
        let column = column.as_primitive::<Int64Type>();
        let (lo, hi) = match (arrow::compute::min(column), arrow::compute::max(column)) {
            (Some(lo), Some(hi)) => (lo, hi),
            _ => (i64::MAX, i64::MIN),
        };
        let fits = match &self.mode {
            Mode::Hash(_) => false,
            Mode::Dense {
                base,
                slots,
                values,
                ..
            } => {
                let (lo, hi) = if slots.is_empty() {
                    (lo as i128, hi as i128)
                } else {
                    (
                        (lo as i128).min(*base as i128),
                        (hi as i128).max(*base as i128 + slots.len() as i128 - 1),
                    )
                };
                let span = (hi - lo + 1).max(0);
                span <= SPAN.max(SLOTS_PER_GROUP * (values.len() as i128 + column.len() as i128))
            }
        };
        if !fits {
            return self.hashed()?.intern(cols, groups);
        }
        let Mode::Dense {
            base,
            slots,
            values,
            null_group,
        } = &mut self.mode
        else {
            unreachable!("checked above")
        };
        if lo <= hi {
            if slots.is_empty() {
                *base = lo;
            } else if lo < *base {
                let grow = (*base - lo) as usize;
                slots.splice(0..0, std::iter::repeat_n(NONE, grow));
                *base = lo;
            }
            let needed = (hi - *base) as usize + 1;
            if slots.len() < needed {
                slots.resize(needed, NONE);
            }
        }
        groups.clear();
        groups.reserve(column.len());
        let mut id_of = |v: Option<i64>| match v {
            Some(v) => {
                let slot = &mut slots[(v - *base) as usize];
                if *slot == NONE {
                    *slot = values.len() as u32;
                    values.push(v);
                }
                *slot as usize
            }
            None => *null_group.get_or_insert_with(|| {
                values.push(0);
                values.len() - 1
            }),
        };
        if column.null_count() == 0 {
            groups.extend(column.values().iter().map(|&v| id_of(Some(v))));
        } else {
            groups.extend(column.iter().map(&mut id_of));
        }
        if values.len() >= NONE as usize {
            self.hashed()?;
        }
        Ok(())
    }

    fn size(&self) -> usize {
        match &self.mode {
            Mode::Dense { slots, values, .. } => slots.capacity() * 4 + values.capacity() * 8,
            Mode::Hash(table) => table.size(),
        }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn len(&self) -> usize {
        match &self.mode {
            Mode::Dense { values, .. } => values.len(),
            Mode::Hash(table) => table.len(),
        }
    }

    fn emit(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        if matches!((&self.mode, emit_to), (Mode::Dense { .. }, EmitTo::All)) {
            let Mode::Dense {
                values, null_group, ..
            } = std::mem::replace(&mut self.mode, dense())
            else {
                unreachable!("matched above")
            };
            return Ok(vec![self.keys(&values, null_group)?]);
        }
        self.hashed()?.emit(emit_to)
    }

    fn clear_shrink(&mut self, num_rows: usize) {
        match &mut self.mode {
            Mode::Dense { .. } => self.mode = dense(),
            Mode::Hash(table) => table.clear_shrink(num_rows),
        }
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::Int32Array;
    use arrow::datatypes::{Field, Schema};

    use super::*;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("k", DataType::Int32, true)]))
    }

    /// The ids DataFusion's hash table gives the same batches.
    fn reference(batches: &[Vec<Option<i32>>]) -> (Vec<Vec<usize>>, ArrayRef) {
        let mut table = new_group_values(schema(), &GroupOrdering::None).unwrap();
        let ids = batches
            .iter()
            .map(|b| {
                let mut ids = Vec::new();
                let col: ArrayRef = Arc::new(Int32Array::from(b.clone()));
                table.intern(&[col], &mut ids).unwrap();
                ids
            })
            .collect();
        (ids, table.emit(EmitTo::All).unwrap().remove(0))
    }

    fn check(batches: Vec<Vec<Option<i32>>>, stays_dense: bool) {
        let mut table = DenseGroups::boxed(schema()).unwrap();
        let mut got = vec![];
        for b in &batches {
            let mut ids = Vec::new();
            let col: ArrayRef = Arc::new(Int32Array::from(b.clone()));
            table.intern(&[col], &mut ids).unwrap();
            got.push(ids);
        }
        let (want, keys) = reference(&batches);
        assert_eq!(got, want);
        assert_eq!(table.len(), keys.len());
        let dense = table.size() < 8 << 20 && stays_dense;
        let emitted = table.emit(EmitTo::All).unwrap().remove(0);
        assert_eq!(emitted.as_ref(), keys.as_ref(), "dense {dense}");
        assert!(table.is_empty());
    }

    #[test]
    fn ids_match_the_hash_table() {
        // Narrow values, growing down and up, with nulls.
        check(
            vec![
                vec![Some(5), Some(7), Some(5), None, Some(6)],
                vec![Some(-3), Some(7), None, Some(100)],
                vec![Some(2), Some(2), Some(1000)],
            ],
            true,
        );
        // Values spread wide: it moves to the hash table mid-way.
        check(
            vec![
                vec![Some(1), Some(2), None],
                vec![Some(i32::MAX), Some(i32::MIN), Some(2)],
                vec![Some(3), None, Some(i32::MAX)],
            ],
            false,
        );
        // Only nulls.
        check(vec![vec![None, None], vec![Some(4), None]], true);
    }

    #[test]
    fn emitting_starts_afresh() {
        let mut table = DenseGroups::boxed(schema()).unwrap();
        let mut ids = Vec::new();
        let col: ArrayRef = Arc::new(Int32Array::from(vec![10, 20, 10]));
        table.intern(&[Arc::clone(&col)], &mut ids).unwrap();
        table.emit(EmitTo::All).unwrap();
        let col: ArrayRef = Arc::new(Int32Array::from(vec![20, 30]));
        table.intern(&[col], &mut ids).unwrap();
        assert_eq!(ids, [0, 1]);
        let keys = table.emit(EmitTo::All).unwrap().remove(0);
        assert_eq!(keys.as_ref(), &Int32Array::from(vec![20, 30]) as &dyn Array);
    }
}
