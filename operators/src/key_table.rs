//! Compaction of interned key tables.
//!
//! Keyed operators intern their keys into DataFusion's `GroupValues`, which
//! hands out dense ids and never forgets a key. Where keys come and go (a
//! GROUP BY whose keys are retracted, a join whose rows expire, state past
//! its TTL), the table would grow without bound. [`compact`] rebuilds it
//! with only the live keys, vectorized (one `emit`, one `filter`, one
//! `intern`), and says where each live key's id went, so the owner moves
//! its per-id state along. Owners call it when dead ids outnumber live
//! ones ([`due`]), which keeps the work amortized to O(1) per key.

use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray};
use arrow::datatypes::SchemaRef;
use datafusion_expr::EmitTo;
use datafusion_physical_plan::aggregates::group_values::{GroupValues, new_group_values};
use datafusion_physical_plan::aggregates::order::GroupOrdering;
use weir_core::Result;

/// A key table for `schema`'s keys: packed when they are one or two string
/// columns of short codes ([`crate::short_strings`]), else DataFusion's.
pub(crate) fn new_table(schema: &SchemaRef) -> datafusion_common::Result<Box<dyn GroupValues>> {
    if crate::short_strings::ShortStrings::takes(schema) {
        return Ok(Box::new(crate::short_strings::ShortStrings::new(
            Arc::clone(schema),
        )));
    }
    new_group_values(Arc::clone(schema), &GroupOrdering::None)
}

/// A key table that lasts (an operator's keys across batches): dense for
/// one integer column of values in a narrow range (ids: no hashing,
/// [`crate::dense_groups`]), else [`new_table`]'s.
pub(crate) fn lasting(schema: &SchemaRef) -> datafusion_common::Result<Box<dyn GroupValues>> {
    crate::dense_groups::DenseGroups::boxed(Arc::clone(schema))
}

/// Fewest dead ids worth a rebuild.
pub(crate) const MIN_DEAD: usize = 4096;

/// Whether a table of `total` ids with `live` of them live is worth
/// compacting: dead ids outnumber the live ones and are not a handful.
pub(crate) fn due(total: usize, live: usize) -> bool {
    let dead = total.saturating_sub(live);
    dead >= MIN_DEAD && dead > live
}

/// Rebuild `table` (of keys `schema`) keeping ids `live[id]`; returns, per
/// old id, its new id (`None` for a dropped one). New ids keep the old ids'
/// order. Ids past `live`'s end count as dead. The kept keys go into a new
/// table: DataFusion's multi-column table is not meant to intern again
/// after emitting everything.
pub(crate) fn compact(
    table: &mut Box<dyn GroupValues>,
    schema: &SchemaRef,
    live: &[bool],
) -> Result<Vec<Option<usize>>> {
    let total = table.len();
    let keys: Vec<ArrayRef> = table.emit(EmitTo::All)?;
    *table = lasting(schema)?;
    let keep =
        BooleanArray::from_iter((0..total).map(|i| Some(live.get(i).copied().unwrap_or(false))));
    let kept: Vec<ArrayRef> = keys
        .iter()
        .map(|k| arrow::compute::filter(k, &keep))
        .collect::<std::result::Result<_, _>>()?;
    let mut ids = Vec::new();
    if kept.first().is_some_and(|k| !k.is_empty()) {
        table.intern(&kept, &mut ids)?;
    }
    let mut next = 0;
    Ok((0..total)
        .map(|i| {
            live.get(i).copied().unwrap_or(false).then(|| {
                let id = ids[next];
                next += 1;
                id
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use arrow::array::{AsArray, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Int64Type, Schema};

    use super::*;

    #[test]
    fn live_keys_keep_their_order_and_dead_ones_go() {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)]));
        let mut table = new_group_values(Arc::clone(&schema), &GroupOrdering::None).unwrap();
        let keys: ArrayRef = Arc::new(Int64Array::from(vec![Some(10), Some(20), None, Some(40)]));
        let mut ids = vec![];
        table.intern(&[keys], &mut ids).unwrap();
        let moved = compact(&mut table, &schema, &[false, true, true, false]).unwrap();
        assert_eq!(moved, vec![None, Some(0), Some(1), None]);
        assert_eq!(table.len(), 2);
        // The kept keys are found again under their new ids; a dropped one
        // is new.
        let probe: ArrayRef = Arc::new(Int64Array::from(vec![None, Some(20), Some(10)]));
        table.intern(&[probe], &mut ids).unwrap();
        assert_eq!(ids, vec![1, 0, 2]);
        let all = table.emit(EmitTo::All).unwrap();
        let all = all[0].as_primitive::<Int64Type>();
        assert_eq!(
            all.iter().collect::<Vec<_>>(),
            vec![Some(20), None, Some(10)]
        );
    }

    #[test]
    fn multi_column_keys_compact_too() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Utf8, false),
        ]));
        let mut table = new_group_values(Arc::clone(&schema), &GroupOrdering::None).unwrap();
        let n = 10_000;
        let a: ArrayRef = Arc::new(Int64Array::from_iter_values(0..n));
        let b: ArrayRef = Arc::new(StringArray::from_iter_values(
            (0..n).map(|i| format!("k{i}")),
        ));
        let mut ids = vec![];
        table.intern(&[a, b], &mut ids).unwrap();
        let live: Vec<bool> = (0..n).map(|i| i % 3 == 0).collect();
        let moved = compact(&mut table, &schema, &live).unwrap();
        assert_eq!(table.len(), live.iter().filter(|&&l| l).count());
        assert_eq!(moved[9], Some(3));
        // Keys intern again after the compaction.
        let a: ArrayRef = Arc::new(Int64Array::from(vec![9, 10]));
        let b: ArrayRef = Arc::new(StringArray::from(vec!["k9", "k10"]));
        table.intern(&[a, b], &mut ids).unwrap();
        assert_eq!(ids, vec![3, table.len() - 1]);
    }

    #[test]
    fn due_only_when_dead_ids_outnumber_live_ones() {
        assert!(!due(100, 10));
        assert!(!due(10_000, 6_000));
        assert!(due(10_000, 4_000));
    }
}
