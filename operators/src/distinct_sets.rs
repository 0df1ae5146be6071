//! `COUNT(DISTINCT x)` of the updating aggregation, kept incrementally.
//!
//! DataFusion's distinct count keeps its state as a list of the values seen;
//! the updating aggregation stores states between batches, so every batch
//! that touched a key re-read, re-hashed and re-wrote that key's whole list:
//! one busy key (Nexmark q15 groups by day) made the work grow with the
//! square of the input. Here each key has its own hash set of values that
//! lives across batches: a batch costs its own rows, and the count is the
//! set's size. Integer, date and time values are held as themselves (i64,
//! hashed by a multiply), others row-encoded (hashed by xxh3); a FILTER
//! column leaves out the rows where it is not true. Checkpoints still hold DataFusion's list state
//! (`a{i}_…` columns), so snapshots read the same either way.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, GenericListArray, Int64Array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Int64Type};
use arrow::row::{RowConverter, SortField};
use datafusion_expr::EmitTo;
use datafusion_expr::GroupsAccumulator;
use hashbrown::HashTable;
use weir_core::Result;
use xxhash_rust::xxh3::xxh3_64;

/// One distinct count: per key id, the values seen.
pub(crate) struct DistinctSets {
    /// The aggregate's place among the operator's aggregates.
    pub(crate) position: usize,
    /// The argument's column in the input.
    pub(crate) column: usize,
    /// The FILTER column in the input (BOOLEAN), if any.
    pub(crate) filter: Option<usize>,
    values: Values,
    bytes: usize,
}

/// The sets of one distinct count, by how its values are held.
enum Values {
    /// Integers, dates, times and timestamps (at most 64 bits, signed or
    /// fitting in a signed 64-bit value): the values themselves, as i64,
    /// cast back to `data_type` for the state.
    Ints {
        data_type: DataType,
        sets: Vec<HashTable<i64>>,
    },
    /// Anything else: row-encoded values.
    Rows {
        converter: RowConverter,
        sets: Vec<HashTable<Box<[u8]>>>,
    },
}

/// Bytes a held value costs beyond its own: the table's control byte and
/// slack, and for row-encoded values their box.
const OVERHEAD: usize = 16;

/// Whether values of `t` are held as i64 (an exact round trip by `cast`).
fn held_as_int(t: &DataType) -> bool {
    use DataType::*;
    matches!(
        t,
        Int8 | Int16
            | Int32
            | Int64
            | UInt8
            | UInt16
            | UInt32
            | Date32
            | Date64
            | Time32(_)
            | Time64(_)
            | Timestamp(_, None)
            | Duration(_)
    )
}

/// A 64-bit mix of an integer for the hash table (a folded multiply: both
/// the high bits hashbrown tags with and the low bits it indexes by
/// depend on every input bit).
fn mix(v: i64) -> u64 {
    let p = u128::from(v as u64 ^ 0x243f_6a88_85a3_08d3) * 0x9e37_79b9_7f4a_7c15;
    (p as u64) ^ ((p >> 64) as u64)
}

fn grow<T>(sets: &mut Vec<HashTable<T>>, id: usize) {
    if sets.len() <= id {
        sets.resize_with(id + 1, HashTable::new);
    }
}

/// Whether row `r` counts: not NULL, and the aggregate's FILTER holds.
fn counts_row(values: &dyn Array, filter: Option<&BooleanArray>, r: usize) -> bool {
    !values.is_null(r) && filter.is_none_or(|f| f.is_valid(r) && f.value(r))
}

impl DistinctSets {
    pub(crate) fn new(
        position: usize,
        (column, filter): (usize, Option<usize>),
        data_type: &DataType,
    ) -> Result<Self> {
        let values = if held_as_int(data_type) {
            Values::Ints {
                data_type: data_type.clone(),
                sets: Vec::new(),
            }
        } else {
            Values::Rows {
                converter: RowConverter::new(vec![SortField::new(data_type.clone())])?,
                sets: Vec::new(),
            }
        };
        Ok(Self {
            position,
            column,
            filter,
            values,
            bytes: 0,
        })
    }

    /// Forget key `id`'s values (a key that starts afresh).
    pub(crate) fn clear(&mut self, id: usize) {
        let freed = match &mut self.values {
            Values::Ints { sets, .. } => sets.get_mut(id).map_or(0, |set| {
                let n = set.len() * (8 + OVERHEAD);
                *set = HashTable::new();
                n
            }),
            Values::Rows { sets, .. } => sets.get_mut(id).map_or(0, |set| {
                let n = set.iter().map(|v| v.len() + OVERHEAD).sum::<usize>();
                *set = HashTable::new();
                n
            }),
        };
        self.bytes -= freed;
    }

    /// Add `values` (one per row, NULLs skipped, and with a `filter` only
    /// the rows where it is true) to the sets of `ids`.
    pub(crate) fn insert(
        &mut self,
        values: &ArrayRef,
        filter: Option<&BooleanArray>,
        ids: &[usize],
    ) -> Result<()> {
        let most = ids.iter().max().copied();
        match &mut self.values {
            Values::Ints { sets, .. } => {
                if let Some(most) = most {
                    grow(sets, most);
                }
                let ints = cast(values, &DataType::Int64)?;
                let ints = ints.as_primitive::<Int64Type>();
                let plain = values.null_count() == 0 && filter.is_none();
                for (r, &id) in ids.iter().enumerate() {
                    if !plain && !counts_row(values.as_ref(), filter, r) {
                        continue;
                    }
                    let v = ints.value(r);
                    let hash = mix(v);
                    let set = &mut sets[id];
                    if set.find(hash, |&x| x == v).is_none() {
                        set.insert_unique(hash, v, |&x| mix(x));
                        self.bytes += 8 + OVERHEAD;
                    }
                }
            }
            Values::Rows { converter, sets } => {
                if let Some(most) = most {
                    grow(sets, most);
                }
                let rows = converter.convert_columns(std::slice::from_ref(values))?;
                for (r, &id) in ids.iter().enumerate() {
                    if !counts_row(values.as_ref(), filter, r) {
                        continue;
                    }
                    let row = rows.row(r);
                    let bytes = row.as_ref();
                    let hash = xxh3_64(bytes);
                    let set = &mut sets[id];
                    if set.find(hash, |v| **v == *bytes).is_none() {
                        set.insert_unique(hash, bytes.into(), |v| xxh3_64(v));
                        self.bytes += bytes.len() + OVERHEAD;
                    }
                }
            }
        }
        Ok(())
    }

    fn len_of(&self, id: usize) -> usize {
        match &self.values {
            Values::Ints { sets, .. } => sets.get(id).map_or(0, HashTable::len),
            Values::Rows { sets, .. } => sets.get(id).map_or(0, HashTable::len),
        }
    }

    /// The counts of keys `ids`.
    pub(crate) fn counts(&self, ids: &[usize]) -> ArrayRef {
        Arc::new(Int64Array::from_iter_values(
            ids.iter().map(|&id| self.len_of(id) as i64),
        ))
    }

    /// The sets in the order of `order` (old ids at their new places).
    pub(crate) fn renumber(&mut self, order: &[usize]) {
        fn reorder<T>(sets: &mut Vec<HashTable<T>>, order: &[usize]) {
            let mut old = std::mem::take(sets);
            *sets = order
                .iter()
                .map(|&i| old.get_mut(i).map(std::mem::take).unwrap_or_default())
                .collect();
        }
        self.bytes = match &mut self.values {
            Values::Ints { sets, .. } => {
                reorder(sets, order);
                sets.iter().map(|s| s.len() * (8 + OVERHEAD)).sum()
            }
            Values::Rows { sets, .. } => {
                reorder(sets, order);
                sets.iter().flatten().map(|v| v.len() + OVERHEAD).sum()
            }
        };
    }

    /// DataFusion's state columns of the distinct count for keys `ids`,
    /// made by its own accumulator (`fresh`) from the values.
    pub(crate) fn state(
        &self,
        ids: &[usize],
        mut fresh: Box<dyn GroupsAccumulator>,
    ) -> Result<Vec<ArrayRef>> {
        let mut groups = Vec::new();
        let values = match &self.values {
            Values::Ints { data_type, sets } => {
                let mut ints = Vec::new();
                for (g, &id) in ids.iter().enumerate() {
                    if let Some(set) = sets.get(id) {
                        ints.extend(set.iter().copied());
                        groups.resize(ints.len(), g);
                    }
                }
                cast(&(Arc::new(Int64Array::from(ints)) as ArrayRef), data_type)?
            }
            Values::Rows { converter, sets } => {
                let mut rows = converter.empty_rows(0, 0);
                for (g, &id) in ids.iter().enumerate() {
                    if let Some(set) = sets.get(id) {
                        for v in set.iter() {
                            rows.push(converter.parser().parse(v));
                            groups.push(g);
                        }
                    }
                }
                converter.convert_rows(&rows)?.remove(0)
            }
        };
        let values = [values];
        fresh.update_batch(&values, &groups, None, ids.len())?;
        Ok(fresh.state(EmitTo::All)?)
    }

    /// Take in DataFusion's list state (one list per key) for keys `ids`.
    pub(crate) fn restore(&mut self, state: &ArrayRef, ids: &[usize]) -> Result<()> {
        let (values, offsets): (ArrayRef, Vec<usize>) =
            if let Some(list) = state.as_any().downcast_ref::<GenericListArray<i32>>() {
                let o = list.value_offsets().iter().map(|&o| o as usize).collect();
                (Arc::clone(list.values()), o)
            } else if let Some(list) = state.as_any().downcast_ref::<GenericListArray<i64>>() {
                let o = list.value_offsets().iter().map(|&o| o as usize).collect();
                (Arc::clone(list.values()), o)
            } else {
                return Err(weir_core::WeirError::Execution(format!(
                    "a distinct count's state is a list, not {}",
                    state.data_type()
                )));
            };
        let mut owners = vec![0; values.len()];
        for (r, &id) in ids.iter().enumerate() {
            for o in &mut owners[offsets[r]..offsets[r + 1]] {
                *o = id;
            }
        }
        let from = offsets.first().copied().unwrap_or(0);
        let to = offsets.last().copied().unwrap_or(0);
        self.insert(&values.slice(from, to - from), None, &owners[from..to])
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
            + match &self.values {
                Values::Ints { sets, .. } => sets.len() * std::mem::size_of::<HashTable<i64>>(),
                Values::Rows { sets, .. } => {
                    sets.len() * std::mem::size_of::<HashTable<Box<[u8]>>>()
                }
            }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use arrow::array::{StringArray, TimestampMillisecondArray};
    use datafusion_physical_expr::aggregate::AggregateExprBuilder;
    use datafusion_physical_expr::expressions::Column;

    use super::*;

    /// A fresh DataFusion distinct-count accumulator over `t`.
    fn fresh(t: &DataType) -> Box<dyn GroupsAccumulator> {
        let schema =
            arrow::datatypes::Schema::new(vec![arrow::datatypes::Field::new("v", t.clone(), true)]);
        let expr = AggregateExprBuilder::new(
            datafusion_functions_aggregate::count::count_udaf(),
            vec![Arc::new(Column::new("v", 0))],
        )
        .schema(Arc::new(schema))
        .alias("n")
        .with_distinct(true)
        .build()
        .unwrap();
        let f = Arc::new(expr);
        Box::new(datafusion_physical_expr::GroupsAccumulatorAdapter::new(
            move || f.create_accumulator(),
        ))
    }

    /// Rows over keys 0..3 with repeats, NULL values and a filter that is
    /// true, false or NULL: the counts are those of plain sets, over
    /// integers (held as i64), timestamps (cast there and back) and strings
    /// (row-encoded), and survive a state round trip.
    #[test]
    fn counts_follow_nulls_and_the_filter_for_every_value_kind() {
        let n = 500usize;
        let ids: Vec<usize> = (0..n).map(|r| (r * 7) % 3).collect();
        let raw: Vec<Option<i64>> = (0..n)
            .map(|r| (r % 11 != 0).then_some(((r * 13) % 40) as i64 - 20))
            .collect();
        let filter: BooleanArray = (0..n)
            .map(|r| match r % 5 {
                0 => None,
                1 | 2 => Some(false),
                _ => Some(true),
            })
            .collect();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(raw.clone())),
            Arc::new(TimestampMillisecondArray::from(raw.clone())),
            Arc::new(StringArray::from_iter(
                raw.iter().map(|v| v.map(|v| format!("s{v}"))),
            )),
        ];
        for values in columns {
            for filtered in [false, true] {
                let f = filtered.then_some(&filter);
                let mut want = vec![HashSet::new(); 3];
                for r in 0..n {
                    if raw[r].is_some() && f.is_none_or(|f| f.is_valid(r) && f.value(r)) {
                        want[ids[r]].insert(raw[r]);
                    }
                }
                let want: Vec<i64> = want.iter().map(|s| s.len() as i64).collect();
                let mut sets = DistinctSets::new(0, (0, None), values.data_type()).unwrap();
                // In two batches, the second adding to the first's sets.
                let half = n / 2;
                sets.insert(
                    &values.slice(0, half),
                    f.map(|f| f.slice(0, half)).as_ref(),
                    &ids[..half],
                )
                .unwrap();
                sets.insert(
                    &values.slice(half, n - half),
                    f.map(|f| f.slice(half, n - half)).as_ref(),
                    &ids[half..],
                )
                .unwrap();
                let got = sets.counts(&[0, 1, 2]);
                assert_eq!(
                    got.as_primitive::<Int64Type>().values().to_vec(),
                    want,
                    "{}",
                    values.data_type()
                );
                // DataFusion's list state, and back.
                let state = sets.state(&[0, 1, 2], fresh(values.data_type())).unwrap();
                let mut back = DistinctSets::new(0, (0, None), values.data_type()).unwrap();
                back.restore(&state[0], &[0, 1, 2]).unwrap();
                let again = back.counts(&[0, 1, 2]);
                assert_eq!(again.as_primitive::<Int64Type>().values().to_vec(), want);
                assert_eq!(back.bytes(), sets.bytes());
                // Renumbered: key 2 first, key 0 dropped.
                sets.renumber(&[2, 1]);
                let moved = sets.counts(&[0, 1]);
                assert_eq!(
                    moved.as_primitive::<Int64Type>().values().to_vec(),
                    vec![want[2], want[1]]
                );
                sets.clear(0);
                assert_eq!(sets.counts(&[0]).as_primitive::<Int64Type>().value(0), 0);
            }
        }
    }
}
