//! `COUNT(DISTINCT x)` of the updating aggregation, kept incrementally.
//!
//! DataFusion's distinct count keeps its state as a list of the values seen;
//! the updating aggregation stores states between batches, so every batch
//! that touched a key re-read, re-hashed and re-wrote that key's whole list:
//! one busy key (Nexmark q15 groups by day) made the work grow with the
//! square of the input. Here each key has a hash set of values that lives
//! across batches: a batch costs its own rows, and each count is kept as
//! values arrive. Integer, date and time values are held as themselves
//! (i64, hashed by a multiply), others row-encoded (hashed by xxh3).
//!
//! The distinct counts of one column share their sets, as Flink's distinct
//! aggregates over one field share one map state: `COUNT(DISTINCT bidder)`,
//! `COUNT(DISTINCT bidder) FILTER (WHERE price < 10000)` and so on (Nexmark
//! q15, q16) hold each value once, with a bit per count that has seen it,
//! so a row costs one lookup per column instead of one per count. A FILTER
//! column leaves out the rows where it is not true. Checkpoints still hold
//! DataFusion's list state per count (`a{i}_…` columns), so snapshots read
//! the same either way.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, GenericListArray, Int64Array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Int64Type};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use datafusion_expr::EmitTo;
use datafusion_expr::GroupsAccumulator;
use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use weir_core::Result;
use xxhash_rust::xxh3::xxh3_64;

/// At most this many counts share one column's sets (a bit each).
const MEMBERS: usize = 64;

/// One distinct count: its place among the operator's aggregates and its
/// FILTER column in the input (BOOLEAN), if any.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Member {
    pub(crate) position: usize,
    pub(crate) filter: Option<usize>,
}

/// The distinct counts of one aggregation, by column.
pub(crate) struct DistinctCounts {
    columns: Vec<DistinctSets>,
    /// Per distinct count in position order: (position, column set, bit).
    order: Vec<(usize, usize, usize)>,
}

impl DistinctCounts {
    /// The counts `(member, column, type)`; counts of one column (up to
    /// [`MEMBERS`]) share their sets.
    pub(crate) fn new(counts: Vec<(Member, usize, DataType)>) -> Result<Self> {
        let mut columns: Vec<DistinctSets> = Vec::new();
        let mut order = Vec::new();
        for (member, column, data_type) in counts {
            let at = match columns.iter().position(|s| {
                s.column == column && s.data_type == data_type && s.members.len() < MEMBERS
            }) {
                Some(at) => at,
                None => {
                    columns.push(DistinctSets::new(column, &data_type)?);
                    columns.len() - 1
                }
            };
            order.push((member.position, at, columns[at].members.len()));
            columns[at].members.push(member);
        }
        order.sort_unstable();
        Ok(Self { columns, order })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The aggregates' positions, ascending.
    pub(crate) fn positions(&self) -> impl Iterator<Item = usize> + '_ {
        self.order.iter().map(|&(p, _, _)| p)
    }

    /// Whether the aggregate at `position` is one of these counts.
    pub(crate) fn has(&self, position: usize) -> bool {
        self.order.iter().any(|&(p, _, _)| p == position)
    }

    fn find(&self, position: usize) -> Option<(usize, usize)> {
        self.order
            .iter()
            .find(|&&(p, _, _)| p == position)
            .map(|&(_, s, m)| (s, m))
    }

    /// The counts of keys `ids`, one column per count in position order.
    pub(crate) fn counts(&self, ids: &[usize]) -> Vec<ArrayRef> {
        self.order
            .iter()
            .map(|&(_, s, m)| self.columns[s].counts(m, ids))
            .collect()
    }

    /// Forget key `id`'s values (a key that starts afresh).
    pub(crate) fn clear(&mut self, id: usize) {
        self.columns.iter_mut().for_each(|s| s.clear(id));
    }

    /// Add the rows of `batch` (the operator's input) to the sets of
    /// `ids` (one per row).
    pub(crate) fn insert(&mut self, batch: &RecordBatch, ids: &[usize]) -> Result<()> {
        for s in &mut self.columns {
            let masks = s.masks(batch);
            s.insert(batch.column(s.column), &masks, ids)?;
        }
        Ok(())
    }

    /// The sets in the order of `order` (old ids at their new places).
    pub(crate) fn renumber(&mut self, order: &[usize]) {
        self.columns.iter_mut().for_each(|s| s.renumber(order));
    }

    /// DataFusion's state columns of the count at `position` for keys
    /// `ids`, made by its own accumulator (`fresh`) from the values.
    pub(crate) fn state(
        &self,
        position: usize,
        ids: &[usize],
        fresh: Box<dyn GroupsAccumulator>,
    ) -> Result<Vec<ArrayRef>> {
        let (s, m) = self.find(position).expect("a distinct count's position");
        self.columns[s].state(m, ids, fresh)
    }

    /// Take in DataFusion's list state of the count at `position` (one
    /// list per key) for keys `ids`.
    pub(crate) fn restore(
        &mut self,
        position: usize,
        state: &ArrayRef,
        ids: &[usize],
    ) -> Result<()> {
        let (s, m) = self.find(position).expect("a distinct count's position");
        self.columns[s].restore(m, state, ids)
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.columns.iter().map(DistinctSets::bytes).sum()
    }
}

/// The sets of one column's distinct counts: per key id, each value seen
/// with a bit per count ([`Member`]) that has seen it.
struct DistinctSets {
    /// The argument's column in the input.
    column: usize,
    data_type: DataType,
    members: Vec<Member>,
    values: Values,
    /// Per key id, per member: how many values it has seen
    /// (`id * members + member`).
    sizes: Vec<u64>,
    bytes: usize,
}

/// A value and the members that have seen it (a bit each).
type Seen<T> = (T, u64);

/// The sets of one column, by how its values are held.
enum Values {
    /// Integers, dates, times and timestamps (at most 64 bits, signed or
    /// fitting in a signed 64-bit value): the values themselves, as i64,
    /// cast back to the column's type for the state.
    Ints { sets: Vec<HashTable<Seen<i64>>> },
    /// Anything else: row-encoded values.
    Rows {
        converter: RowConverter,
        sets: Vec<HashTable<Seen<Box<[u8]>>>>,
    },
}

/// Bytes a held value costs beyond its own and its bits: the table's
/// control byte and slack, and for row-encoded values their box.
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

/// One more value for each member whose bit is in `bits`.
#[inline]
fn count_in(sizes: &mut [u64], mut bits: u64) {
    while bits != 0 {
        sizes[bits.trailing_zeros() as usize] += 1;
        bits &= bits - 1;
    }
}

/// Record that the members of `mask` have seen the value of `entry`: the
/// bits of those that had not.
#[inline]
fn see<T>(entry: Entry<'_, Seen<T>>, value: impl FnOnce() -> T, mask: u64) -> (u64, bool) {
    match entry {
        Entry::Occupied(mut e) => {
            let seen = &mut e.get_mut().1;
            let new = mask & !*seen;
            *seen |= new;
            (new, false)
        }
        Entry::Vacant(e) => {
            e.insert((value(), mask));
            (mask, true)
        }
    }
}

impl DistinctSets {
    fn new(column: usize, data_type: &DataType) -> Result<Self> {
        let values = if held_as_int(data_type) {
            Values::Ints { sets: Vec::new() }
        } else {
            Values::Rows {
                converter: RowConverter::new(vec![SortField::new(data_type.clone())])?,
                sets: Vec::new(),
            }
        };
        Ok(Self {
            column,
            data_type: data_type.clone(),
            members: Vec::new(),
            values,
            sizes: Vec::new(),
            bytes: 0,
        })
    }

    /// Per row of `batch`, the members that count it: its value is not
    /// NULL and the member's FILTER is true.
    fn masks(&self, batch: &RecordBatch) -> Vec<u64> {
        let n = batch.num_rows();
        let all = self
            .members
            .iter()
            .enumerate()
            .fold(0u64, |all, (m, member)| {
                all | u64::from(member.filter.is_none()) << m
            });
        let mut masks = vec![all; n];
        for (m, member) in self.members.iter().enumerate() {
            if let Some(f) = member.filter {
                let f = batch.column(f).as_boolean();
                let holds = match f.nulls() {
                    Some(valid) => f.values() & valid.inner(),
                    None => f.values().clone(),
                };
                for r in holds.set_indices() {
                    masks[r] |= 1 << m;
                }
            }
        }
        if let Some(valid) = batch.column(self.column).nulls() {
            for (mask, valid) in masks.iter_mut().zip(valid.iter()) {
                if !valid {
                    *mask = 0;
                }
            }
        }
        masks
    }

    /// Add `values` (one per row) to the sets of `ids`, each row seen by
    /// the members of its mask.
    fn insert(&mut self, values: &ArrayRef, masks: &[u64], ids: &[usize]) -> Result<()> {
        let k = self.members.len();
        let Self {
            values: held,
            sizes,
            bytes,
            ..
        } = self;
        if let Some(&most) = ids.iter().max()
            && sizes.len() < (most + 1) * k
        {
            sizes.resize((most + 1) * k, 0);
        }
        match held {
            Values::Ints { sets } => {
                if let Some(&most) = ids.iter().max() {
                    grow(sets, most);
                }
                let ints = cast(values, &DataType::Int64)?;
                let ints = ints.as_primitive::<Int64Type>().values();
                for (r, &id) in ids.iter().enumerate() {
                    let mask = masks[r];
                    if mask == 0 {
                        continue;
                    }
                    let v = ints[r];
                    let entry = sets[id].entry(mix(v), |e| e.0 == v, |e| mix(e.0));
                    let (new, added) = see(entry, || v, mask);
                    *bytes += usize::from(added) * (16 + OVERHEAD);
                    count_in(&mut sizes[id * k..(id + 1) * k], new);
                }
            }
            Values::Rows { converter, sets } => {
                if let Some(&most) = ids.iter().max() {
                    grow(sets, most);
                }
                let rows = converter.convert_columns(std::slice::from_ref(values))?;
                for (r, &id) in ids.iter().enumerate() {
                    let mask = masks[r];
                    if mask == 0 {
                        continue;
                    }
                    let row = rows.row(r);
                    let v = row.as_ref();
                    let entry = sets[id].entry(xxh3_64(v), |e| *e.0 == *v, |e| xxh3_64(&e.0));
                    let (new, added) = see(entry, || v.into(), mask);
                    *bytes += usize::from(added) * (v.len() + 8 + OVERHEAD);
                    count_in(&mut sizes[id * k..(id + 1) * k], new);
                }
            }
        }
        Ok(())
    }

    /// Forget key `id`'s values.
    fn clear(&mut self, id: usize) {
        let freed = match &mut self.values {
            Values::Ints { sets } => sets.get_mut(id).map_or(0, |set| {
                let n = set.len() * (16 + OVERHEAD);
                *set = HashTable::new();
                n
            }),
            Values::Rows { sets, .. } => sets.get_mut(id).map_or(0, |set| {
                let n = set.iter().map(|v| v.0.len() + 8 + OVERHEAD).sum::<usize>();
                *set = HashTable::new();
                n
            }),
        };
        self.bytes -= freed;
        let k = self.members.len();
        if let Some(sizes) = self.sizes.get_mut(id * k..(id + 1) * k) {
            sizes.fill(0);
        }
    }

    /// Member `m`'s counts of keys `ids`.
    fn counts(&self, m: usize, ids: &[usize]) -> ArrayRef {
        let k = self.members.len();
        Arc::new(Int64Array::from_iter_values(ids.iter().map(|&id| {
            self.sizes.get(id * k + m).copied().unwrap_or(0) as i64
        })))
    }

    /// The sets in the order of `order` (old ids at their new places).
    fn renumber(&mut self, order: &[usize]) {
        fn reorder<T>(sets: &mut Vec<HashTable<T>>, order: &[usize]) {
            let mut old = std::mem::take(sets);
            *sets = order
                .iter()
                .map(|&i| old.get_mut(i).map(std::mem::take).unwrap_or_default())
                .collect();
        }
        let k = self.members.len();
        let old = std::mem::take(&mut self.sizes);
        self.sizes = order
            .iter()
            .flat_map(|&i| match old.get(i * k..(i + 1) * k) {
                Some(s) => s.to_vec(),
                None => vec![0; k],
            })
            .collect();
        self.bytes = match &mut self.values {
            Values::Ints { sets } => {
                reorder(sets, order);
                sets.iter().map(|s| s.len() * (16 + OVERHEAD)).sum()
            }
            Values::Rows { sets, .. } => {
                reorder(sets, order);
                sets.iter()
                    .flatten()
                    .map(|v| v.0.len() + 8 + OVERHEAD)
                    .sum()
            }
        };
    }

    /// DataFusion's state columns of member `m` for keys `ids`, made by
    /// its own accumulator (`fresh`) from the values it has seen.
    fn state(
        &self,
        m: usize,
        ids: &[usize],
        mut fresh: Box<dyn GroupsAccumulator>,
    ) -> Result<Vec<ArrayRef>> {
        let bit = 1u64 << m;
        let mut groups = Vec::new();
        let values = match &self.values {
            Values::Ints { sets } => {
                let mut ints = Vec::new();
                for (g, &id) in ids.iter().enumerate() {
                    if let Some(set) = sets.get(id) {
                        ints.extend(set.iter().filter(|e| e.1 & bit != 0).map(|e| e.0));
                        groups.resize(ints.len(), g);
                    }
                }
                cast(
                    &(Arc::new(Int64Array::from(ints)) as ArrayRef),
                    &self.data_type,
                )?
            }
            Values::Rows { converter, sets } => {
                let mut rows = converter.empty_rows(0, 0);
                for (g, &id) in ids.iter().enumerate() {
                    if let Some(set) = sets.get(id) {
                        for v in set.iter().filter(|e| e.1 & bit != 0) {
                            rows.push(converter.parser().parse(&v.0));
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

    /// Take in member `m`'s list state (DataFusion's, one list per key)
    /// for keys `ids`.
    fn restore(&mut self, m: usize, state: &ArrayRef, ids: &[usize]) -> Result<()> {
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
        let values = values.slice(from, to - from);
        let masks: Vec<u64> = match values.nulls() {
            Some(valid) => valid.iter().map(|v| u64::from(v) << m).collect(),
            None => vec![1 << m; to - from],
        };
        self.insert(&values, &masks, &owners[from..to])
    }

    /// Bytes held.
    fn bytes(&self) -> usize {
        self.bytes
            + self.sizes.len() * 8
            + match &self.values {
                Values::Ints { sets } => sets.len() * std::mem::size_of::<HashTable<Seen<i64>>>(),
                Values::Rows { sets, .. } => {
                    sets.len() * std::mem::size_of::<HashTable<Seen<Box<[u8]>>>>()
                }
            }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use arrow::array::{BooleanArray, StringArray, TimestampMillisecondArray};
    use arrow::datatypes::{Field, Schema};
    use datafusion_physical_expr::aggregate::AggregateExprBuilder;
    use datafusion_physical_expr::expressions::Column;

    use super::*;

    /// A fresh DataFusion distinct-count accumulator over `t`.
    fn fresh(t: &DataType) -> Box<dyn GroupsAccumulator> {
        let schema = Schema::new(vec![Field::new("v", t.clone(), true)]);
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

    /// Column 0 the values, columns 1.. the filters.
    fn batch(values: &ArrayRef, filters: &[BooleanArray]) -> RecordBatch {
        let mut fields = vec![Field::new("v", values.data_type().clone(), true)];
        let mut columns = vec![Arc::clone(values)];
        for (i, f) in filters.iter().enumerate() {
            fields.push(Field::new(format!("f{i}"), DataType::Boolean, true));
            columns.push(Arc::new(f.clone()) as ArrayRef);
        }
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
    }

    fn ints(a: &ArrayRef) -> Vec<i64> {
        a.as_primitive::<Int64Type>().values().to_vec()
    }

    /// Rows over keys 0..3 with repeats and NULL values, counted by five
    /// distinct counts of one column (no filter, and filters true, false
    /// or NULL in different patterns), at positions out of order: every
    /// count is that of a plain set of the rows its filter keeps, over
    /// integers (held as i64), timestamps (cast there and back) and
    /// strings (row-encoded). The counts share one column's sets, survive
    /// a round trip through each count's own list state, renumbering and
    /// clearing.
    #[test]
    fn shared_counts_follow_nulls_and_their_filters_for_every_value_kind() {
        let n = 500usize;
        let ids: Vec<usize> = (0..n).map(|r| (r * 7) % 3).collect();
        let raw: Vec<Option<i64>> = (0..n)
            .map(|r| (r % 11 != 0).then_some(((r * 13) % 40) as i64 - 20))
            .collect();
        let filters: Vec<BooleanArray> = [5usize, 3, 7, 4]
            .iter()
            .map(|&p| {
                (0..n)
                    .map(|r| match (r * p / 2) % p {
                        0 => None,
                        1 => Some(false),
                        _ => Some(r % 2 == 0 || p == 3),
                    })
                    .collect()
            })
            .collect();
        // (position, filter column): no filter at position 3.
        let members = [
            (3, None),
            (0, Some(1)),
            (4, Some(2)),
            (1, Some(3)),
            (2, Some(4)),
        ];
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(raw.clone())),
            Arc::new(TimestampMillisecondArray::from(raw.clone())),
            Arc::new(StringArray::from_iter(
                raw.iter().map(|v| v.map(|v| format!("s{v}"))),
            )),
        ];
        for values in columns {
            let t = values.data_type().clone();
            let input = batch(&values, &filters);
            // Per position, the counts of keys 0..3.
            let mut want = vec![vec![]; members.len()];
            for &(p, f) in &members {
                let mut sets = vec![HashSet::new(); 3];
                for r in 0..n {
                    let keep = f.is_none_or(|f: usize| {
                        let f = &filters[f - 1];
                        f.is_valid(r) && f.value(r)
                    });
                    if raw[r].is_some() && keep {
                        sets[ids[r]].insert(raw[r]);
                    }
                }
                want[p] = sets.iter().map(|s| s.len() as i64).collect::<Vec<_>>();
            }
            let spec = || {
                members
                    .iter()
                    .map(|&(position, filter)| (Member { position, filter }, 0, t.clone()))
                    .collect::<Vec<_>>()
            };
            let mut counts = DistinctCounts::new(spec()).unwrap();
            assert_eq!(counts.columns.len(), 1, "one column's counts share sets");
            assert_eq!(counts.positions().collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
            // In two batches, the second adding to the first's sets.
            let half = n / 2;
            counts.insert(&input.slice(0, half), &ids[..half]).unwrap();
            counts
                .insert(&input.slice(half, n - half), &ids[half..])
                .unwrap();
            let got: Vec<Vec<i64>> = counts.counts(&[0, 1, 2]).iter().map(ints).collect();
            assert_eq!(got, want, "{t}");
            // Each count's list state, and back.
            let mut back = DistinctCounts::new(spec()).unwrap();
            for p in 0..members.len() {
                let state = counts.state(p, &[0, 1, 2], fresh(&t)).unwrap();
                back.restore(p, &state[0], &[0, 1, 2]).unwrap();
            }
            let again: Vec<Vec<i64>> = back.counts(&[0, 1, 2]).iter().map(ints).collect();
            assert_eq!(again, want, "{t} after a state round trip");
            assert_eq!(back.bytes(), counts.bytes());
            // Renumbered: key 2 first, key 0 dropped.
            counts.renumber(&[2, 1]);
            let moved: Vec<Vec<i64>> = counts.counts(&[0, 1]).iter().map(ints).collect();
            let kept: Vec<Vec<i64>> = want.iter().map(|w| vec![w[2], w[1]]).collect();
            assert_eq!(moved, kept);
            counts.clear(0);
            let cleared: Vec<i64> = counts.counts(&[0]).iter().map(|c| ints(c)[0]).collect();
            assert_eq!(cleared, vec![0; members.len()]);
            // A cleared key counts afresh.
            counts.insert(&input.slice(1, 1), &[0]).unwrap();
            let first: Vec<i64> = counts.counts(&[0]).iter().map(|c| ints(c)[0]).collect();
            let masks = counts.columns[0].masks(&input.slice(1, 1))[0];
            assert_ne!(masks, 0);
            let by_position: Vec<i64> = (0..members.len())
                .map(|p| {
                    let m = members.iter().position(|&(q, _)| q == p).unwrap();
                    i64::from(masks & (1 << m) != 0)
                })
                .collect();
            assert_eq!(first, by_position);
        }
    }

    /// Counts of different columns, or more than 64 of one, keep
    /// separate sets.
    #[test]
    fn sets_are_shared_by_column_up_to_64_counts() {
        let t = DataType::Int64;
        let two = DistinctCounts::new(vec![
            (
                Member {
                    position: 0,
                    filter: None,
                },
                0,
                t.clone(),
            ),
            (
                Member {
                    position: 1,
                    filter: None,
                },
                1,
                t.clone(),
            ),
            (
                Member {
                    position: 2,
                    filter: Some(2),
                },
                0,
                t.clone(),
            ),
        ])
        .unwrap();
        assert_eq!(two.columns.len(), 2);
        let many = DistinctCounts::new(
            (0..65)
                .map(|p| {
                    (
                        Member {
                            position: p,
                            filter: None,
                        },
                        0,
                        t.clone(),
                    )
                })
                .collect(),
        )
        .unwrap();
        assert_eq!(many.columns.len(), 2);
        assert_eq!(many.columns[0].members.len(), MEMBERS);
    }
}
