//! `MIN` and `MAX` of short strings, each group's value packed in 128 bits.
//!
//! DataFusion's `MIN`/`MAX` over strings keeps each group's value as an
//! owned byte string and visits the rows through a per-batch list of
//! candidate locations; each value costs a few hundred instructions. An
//! updating GROUP BY runs it several times per batch (the batch's own
//! accumulation, the merge with the stored states, the evaluation of the
//! new and old results), and Nexmark q16's `max(DATE_FORMAT(dateTime,
//! 'HH:mm'))` spent about a tenth of the query there.
//!
//! Strings of up to 15 bytes pack into a `u128` whose order is the
//! strings' byte order: the bytes big-endian from the top, the length in
//! the lowest byte (so `"ab"` sorts before `"ab\0"`). [`ShortMinMax`] keeps
//! one per group and compares integers. The first longer string hands the
//! groups so far to DataFusion's accumulator, which takes over for good:
//! results, state columns and types are DataFusion's either way.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, StringArray};
use arrow::buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::DataType;
use datafusion_common::Result;
use datafusion_expr::{EmitTo, GroupsAccumulator};
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;

/// Which of the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    Min,
    Max,
}

/// The longest string packed.
const SHORT: usize = 15;

/// `s` packed in order, when it is short.
#[inline]
fn pack(s: &[u8]) -> Option<u128> {
    if s.len() > SHORT {
        return None;
    }
    let mut bytes = [0u8; 16];
    bytes[..s.len()].copy_from_slice(s);
    Some(u128::from_be_bytes(bytes) | s.len() as u128)
}

/// The string of `len` bytes at `start` of `data`, packed: sixteen bytes
/// read at once where the buffer has them, the string's kept.
#[inline]
fn pack_at(data: &[u8], start: usize, len: usize) -> u128 {
    match data.get(start..start + 16) {
        Some(word) => {
            let word = u128::from_be_bytes(word.try_into().expect("sixteen bytes"));
            // The top `len` bytes; the low byte (always past a short
            // string) takes the length.
            let kept = !(u128::MAX >> (8 * len));
            (word & kept) | len as u128
        }
        None => pack(&data[start..start + len]).expect("a short string"),
    }
}

/// The bytes of a packed string, written to `out`: all sixteen written at
/// once, the extra ones cut off.
#[inline]
fn unpack_into(v: u128, out: &mut Vec<u8>) {
    let len = (v & 0xff) as usize;
    let at = out.len();
    out.extend_from_slice(&v.to_be_bytes());
    out.truncate(at + len);
}

/// `MIN` or `MAX` over a `Utf8` column (see the module's documentation).
pub(crate) struct ShortMinMax {
    keep: Keep,
    /// Each group's packed value; `seen` says whether it has one.
    values: Vec<u128>,
    seen: Vec<bool>,
    /// DataFusion's accumulator, once a long string came.
    general: Option<Box<dyn GroupsAccumulator>>,
    /// Makes DataFusion's accumulator.
    function: Arc<AggregateFunctionExpr>,
}

impl ShortMinMax {
    /// The accumulator for `function` when it is `MIN` or `MAX` of a
    /// string column.
    pub(crate) fn for_function(function: &Arc<AggregateFunctionExpr>) -> Option<Self> {
        let keep = match function.fun().name() {
            "min" => Keep::Min,
            "max" => Keep::Max,
            _ => return None,
        };
        if function.field().data_type() != &DataType::Utf8 {
            return None;
        }
        let states = function.state_fields().ok()?;
        if states.len() != 1 || states[0].data_type() != &DataType::Utf8 {
            return None;
        }
        Some(Self {
            keep,
            values: Vec::new(),
            seen: Vec::new(),
            general: None,
            function: Arc::clone(function),
        })
    }

    /// Take in `values` (rows, or states: the same for MIN and MAX) for
    /// `groups`; `false` when a string is too long to pack (nothing taken
    /// then).
    fn take_in(
        &mut self,
        values: &StringArray,
        groups: &[usize],
        filter: Option<&BooleanArray>,
        total: usize,
    ) -> bool {
        // Checked first, so a batch is either taken whole or not at all.
        let offsets = values.value_offsets();
        if offsets.windows(2).any(|w| (w[1] - w[0]) as usize > SHORT) {
            return false;
        }
        self.values.resize(total, 0);
        self.seen.resize(total, false);
        let bytes = values.value_data();
        // Rows to skip: NULL, or not passing the FILTER.
        let skip = match (values.nulls(), filter) {
            (None, None) => None,
            (nulls, filter) => {
                let passes = filter.map(|f| match f.nulls() {
                    Some(n) => f.values() & n.inner(),
                    None => f.values().clone(),
                });
                Some(match (nulls, passes) {
                    (Some(n), Some(p)) => n.inner() & &p,
                    (Some(n), None) => n.inner().clone(),
                    (None, Some(p)) => p,
                    (None, None) => unreachable!("matched above"),
                })
            }
        };
        let max = self.keep == Keep::Max;
        for (r, &g) in groups.iter().enumerate() {
            if skip.as_ref().is_some_and(|taken| !taken.value(r)) {
                continue;
            }
            let start = offsets[r] as usize;
            let v = pack_at(bytes, start, offsets[r + 1] as usize - start);
            let old = self.values[g];
            let better = !self.seen[g] || if max { v > old } else { v < old };
            if better {
                self.values[g] = v;
                self.seen[g] = true;
            }
        }
        true
    }

    /// The groups `emit_to` names, as strings (NULL for a group without a
    /// value); the others stay, renumbered from 0.
    fn emit(&mut self, emit_to: EmitTo) -> ArrayRef {
        let values = emit_to.take_needed(&mut self.values);
        let seen = emit_to.take_needed(&mut self.seen);
        let mut bytes = Vec::with_capacity(values.len() * 8);
        let mut offsets = Vec::with_capacity(values.len() + 1);
        offsets.push(0i32);
        for (&v, &s) in values.iter().zip(&seen) {
            if s {
                unpack_into(v, &mut bytes);
            }
            offsets.push(bytes.len() as i32);
        }
        let nulls = NullBuffer::from(seen);
        let nulls = (nulls.null_count() > 0).then_some(nulls);
        // Offsets grow, and each value is the bytes of a whole string
        // taken in (valid UTF-8).
        Arc::new(StringArray::new(
            OffsetBuffer::new(ScalarBuffer::from(offsets)),
            bytes.into(),
            nulls,
        ))
    }

    /// Hand the groups so far to DataFusion's accumulator.
    fn generalise(&mut self) -> Result<&mut Box<dyn GroupsAccumulator>> {
        if self.general.is_none() {
            let n = self.values.len();
            let mut general = self.function.create_groups_accumulator()?;
            if n > 0 {
                let state = self.emit(EmitTo::All);
                let ids: Vec<usize> = (0..n).collect();
                general.merge_batch(&[state], &ids, n)?;
            }
            self.general = Some(general);
        }
        Ok(self.general.as_mut().expect("set just above"))
    }
}

impl std::fmt::Debug for ShortMinMax {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShortMinMax")
            .field("keep", &self.keep)
            .field("groups", &self.values.len())
            .field("general", &self.general.is_some())
            .finish()
    }
}

impl GroupsAccumulator for ShortMinMax {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        if self.general.is_none()
            && let Some(strings) = values[0].as_string_opt::<i32>()
            && self.take_in(strings, group_indices, opt_filter, total_num_groups)
        {
            return Ok(());
        }
        self.generalise()?
            .update_batch(values, group_indices, opt_filter, total_num_groups)
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        match &mut self.general {
            Some(g) => g.evaluate(emit_to),
            None => Ok(self.emit(emit_to)),
        }
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        match &mut self.general {
            Some(g) => g.state(emit_to),
            None => Ok(vec![self.emit(emit_to)]),
        }
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        if self.general.is_none()
            && let Some(strings) = values[0].as_string_opt::<i32>()
            && self.take_in(strings, group_indices, None, total_num_groups)
        {
            return Ok(());
        }
        self.generalise()?
            .merge_batch(values, group_indices, total_num_groups)
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        // A row's state is its value: DataFusion's rule, from its own.
        self.function
            .create_groups_accumulator()?
            .convert_to_state(values, opt_filter)
    }

    fn size(&self) -> usize {
        match &self.general {
            Some(g) => g.size(),
            None => self.values.capacity() * 16 + self.seen.capacity(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{Field, Schema};
    use datafusion_functions_aggregate::min_max::{max_udaf, min_udaf};
    use datafusion_physical_expr::aggregate::AggregateExprBuilder;
    use datafusion_physical_expr::expressions::Column;
    use proptest::prelude::*;

    fn function(max: bool) -> Arc<AggregateFunctionExpr> {
        let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, true)]));
        let udaf = if max { max_udaf() } else { min_udaf() };
        Arc::new(
            AggregateExprBuilder::new(udaf, vec![Arc::new(Column::new("s", 0))])
                .schema(schema)
                .alias("m")
                .build()
                .unwrap(),
        )
    }

    /// One call on an accumulator.
    #[derive(Debug, Clone)]
    enum Call {
        Update(Vec<(Option<String>, usize, Option<bool>)>),
        Merge(Vec<(Option<String>, usize)>),
        Evaluate(Option<usize>),
        State(Option<usize>),
    }

    fn text() -> impl Strategy<Value = Option<String>> {
        // Short strings sharing prefixes, NUL bytes, non-ASCII; now and
        // then one past 15 bytes.
        prop_oneof![
            2 => Just(None),
            12 => "[ab\\x00é]{0,7}".prop_map(Some),
            2 => "[ab]{15}".prop_map(Some),
            1 => "[ab]{16,20}".prop_map(Some),
        ]
    }

    fn call() -> impl Strategy<Value = Call> {
        prop_oneof![
            4 => prop::collection::vec((text(), 0usize..6, prop::option::of(any::<bool>())), 0..12)
                .prop_map(Call::Update),
            2 => prop::collection::vec((text(), 0usize..6), 0..8).prop_map(Call::Merge),
            1 => prop::option::of(0usize..4).prop_map(Call::Evaluate),
            1 => prop::option::of(0usize..4).prop_map(Call::State),
        ]
    }

    fn emit_to(n: Option<usize>, groups: usize) -> EmitTo {
        match n {
            Some(n) if n <= groups => EmitTo::First(n),
            _ => EmitTo::All,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// The same calls on this accumulator and on DataFusion's give the
        /// same results, through the switch to DataFusion's.
        #[test]
        fn results_are_datafusions(max in any::<bool>(), calls in prop::collection::vec(call(), 1..12)) {
            let f = function(max);
            let mut ours = ShortMinMax::for_function(&f).expect("MIN/MAX of strings");
            let mut theirs = f.create_groups_accumulator().unwrap();
            // Groups known to both (DataFusion's counts them from the
            // calls' totals).
            let mut groups = 0usize;
            for c in calls {
                match c {
                    Call::Update(rows) => {
                        let values: ArrayRef = Arc::new(StringArray::from_iter(rows.iter().map(|r| r.0.clone())));
                        let ids: Vec<usize> = rows.iter().map(|r| r.1).collect();
                        let filter = BooleanArray::from(rows.iter().map(|r| r.2).collect::<Vec<_>>());
                        let filter = rows.len().is_multiple_of(2).then_some(&filter);
                        groups = groups.max(ids.iter().max().map_or(0, |m| m + 1));
                        ours.update_batch(&[Arc::clone(&values)], &ids, filter, groups).unwrap();
                        theirs.update_batch(&[values], &ids, filter, groups).unwrap();
                    }
                    Call::Merge(rows) => {
                        let values: ArrayRef = Arc::new(StringArray::from_iter(rows.iter().map(|r| r.0.clone())));
                        let ids: Vec<usize> = rows.iter().map(|r| r.1).collect();
                        groups = groups.max(ids.iter().max().map_or(0, |m| m + 1));
                        ours.merge_batch(&[Arc::clone(&values)], &ids, groups).unwrap();
                        theirs.merge_batch(&[values], &ids, groups).unwrap();
                    }
                    Call::Evaluate(n) | Call::State(n) if groups == 0 => { let _ = n; }
                    Call::Evaluate(n) => {
                        let to = emit_to(n, groups);
                        let (a, b) = (ours.evaluate(to).unwrap(), theirs.evaluate(to).unwrap());
                        prop_assert_eq!(a.as_ref(), b.as_ref());
                        groups -= a.len();
                    }
                    Call::State(n) => {
                        let to = emit_to(n, groups);
                        let (a, b) = (ours.state(to).unwrap(), theirs.state(to).unwrap());
                        prop_assert_eq!(a.len(), b.len());
                        prop_assert_eq!(a[0].as_ref(), b[0].as_ref());
                        groups -= a[0].len();
                    }
                }
            }
            if groups > 0 {
                let (a, b) = (ours.evaluate(EmitTo::All).unwrap(), theirs.evaluate(EmitTo::All).unwrap());
                prop_assert_eq!(a.as_ref(), b.as_ref());
            }
        }
    }

    #[test]
    fn packing_keeps_byte_order() {
        let words: [&[u8]; 8] = [
            b"",
            b"\0",
            b"a",
            b"a\0",
            b"ab",
            b"b",
            b"\xc3\xa9",
            b"zzzzzzzzzzzzzzz",
        ];
        for a in words {
            for b in words {
                assert_eq!(pack(a).cmp(&pack(b)), a.cmp(b), "{a:?} {b:?}");
            }
            let mut out = vec![];
            unpack_into(pack(a).unwrap(), &mut out);
            assert_eq!(out, a);
            // Read in place, with and without sixteen bytes to read.
            let mut data = b"xy".to_vec();
            data.extend_from_slice(a);
            assert_eq!(pack_at(&data, 2, a.len()), pack(a).unwrap());
            data.extend_from_slice(&[0xff; 16]);
            assert_eq!(pack_at(&data, 2, a.len()), pack(a).unwrap());
        }
    }

    #[test]
    fn only_min_and_max_of_strings_are_taken() {
        assert!(ShortMinMax::for_function(&function(true)).is_some());
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, true)]));
        let int_max = AggregateExprBuilder::new(max_udaf(), vec![Arc::new(Column::new("n", 0))])
            .schema(schema)
            .alias("m")
            .build()
            .unwrap();
        assert!(ShortMinMax::for_function(&Arc::new(int_max)).is_none());
    }
}
