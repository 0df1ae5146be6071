//! Rows of a batch picked by index, copied no more than their order
//! needs: a run of consecutive rows is a slice of the batch (no copy),
//! most of its rows in ascending order a filter (consecutive rows copied
//! as one run), anything else a gather.
//!
//! Operators naming output rows of an input batch — a join's probe rows,
//! Top-N's changed rows — mostly name them in arrival order, often every
//! row; arrow's `take` copies each value on its own whatever the order.

use arrow::array::{ArrayRef, BooleanArray, BooleanBufferBuilder, UInt32Array};
use arrow::compute::FilterBuilder;
use weir_core::Result;

/// `columns` (of `len` rows) at `rows`, in that order.
pub(crate) fn rows_of(columns: &[ArrayRef], len: usize, rows: &[u32]) -> Result<Vec<ArrayRef>> {
    if let Some(&first) = rows.first()
        && rows.windows(2).all(|w| w[1] == w[0] + 1)
        && first as usize + rows.len() <= len
    {
        let first = first as usize;
        return Ok(columns.iter().map(|c| c.slice(first, rows.len())).collect());
    }
    // A filter pays for a bitmap of every row: worth it for most rows.
    if 2 * rows.len() >= len
        && rows.windows(2).all(|w| w[0] < w[1])
        && rows.last().is_none_or(|&r| (r as usize) < len)
    {
        let mut keep = BooleanBufferBuilder::new(len);
        keep.append_n(len, false);
        for &r in rows {
            keep.set_bit(r as usize, true);
        }
        let keep = BooleanArray::new(keep.finish(), None);
        let filter = FilterBuilder::new(&keep).optimize().build();
        return Ok(columns
            .iter()
            .map(|c| filter.filter(c.as_ref()))
            .collect::<std::result::Result<_, _>>()?);
    }
    let idx = UInt32Array::from(rows.to_vec());
    Ok(arrow::compute::take_arrays(columns, &idx, None)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, Int64Array, StringArray};
    use arrow::compute::take;
    use proptest::prelude::*;
    use std::sync::Arc;

    proptest! {
        /// Whatever the rows' order — a run, ascending with gaps, any —
        /// the values are a gather's.
        #[test]
        fn rows_are_a_gathers(
            len in 0usize..200,
            picks in proptest::collection::vec(0u32..200, 0..300),
            shape in 0u8..3,
        ) {
            let text: StringArray = (0..len)
                .map(|i| (i % 7 != 3).then(|| "x".repeat(i % 13)))
                .collect();
            let columns: Vec<ArrayRef> = vec![
                Arc::new(Int64Array::from_iter_values((0..len as i64).map(|i| i * 3))),
                Arc::new(text),
            ];
            let mut rows: Vec<u32> = picks.into_iter().filter(|&r| (r as usize) < len).collect();
            match shape {
                0 => {
                    // A run of consecutive rows.
                    let from = rows.first().copied().unwrap_or(0);
                    let n = rows.len().min(len.saturating_sub(from as usize));
                    rows = (from..from + n as u32).collect();
                }
                1 => {
                    rows.sort_unstable();
                    rows.dedup();
                }
                _ => {}
            }
            let got = rows_of(&columns, len, &rows).unwrap();
            let idx = UInt32Array::from(rows.clone());
            for (g, c) in got.iter().zip(&columns) {
                let want = take(c.as_ref(), &idx, None).unwrap();
                prop_assert_eq!(g.len(), rows.len());
                prop_assert_eq!(g.to_data(), want.to_data());
            }
        }
    }
}
