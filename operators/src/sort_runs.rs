//! Batch mode's full sort (`ORDER BY` with no `LIMIT`): sorting by
//! several keys, and sorting many rows on rayon's pool.
//!
//! Several keys are compared as arrow's row format, one byte string per
//! row. Comparing those strings through `Rows` (an offset lookup and a
//! `memcmp` each time) was 80% of sorting ten million orders by two
//! BIGINTs; here each row's first bytes are read once into up to four
//! big-endian words, and rows are sorted by those words, the full row only
//! deciding between rows whose words are equal and that are longer than
//! them. The row's index breaks the last ties, so the order is the one a
//! stable sort gives.
//!
//! Many rows are cut into one run per pool thread, each run sorted on its
//! own thread, and the runs merged as the output is written. The sort is
//! the job's last stage: when it runs, the tasks before it have ended and
//! their cores are idle, so its one subtask would otherwise sort alone. A
//! tie in the merge goes to the earlier run, so the order is still the
//! stable sort's.

use std::cmp::Ordering;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::{
    SortColumn, SortOptions, concat_batches, interleave_record_batch, lexsort_to_indices, take,
};
use arrow::datatypes::{Schema, SchemaRef};
use arrow::row::{RowConverter, Rows, SortField};
use rayon::prelude::*;
use weir_core::Result;

/// Rows a run must have at least for the sort to be cut into runs.
pub(crate) const RUN_ROWS: usize = 1 << 17;

/// The order of `batch`'s rows by `order` (column, options), only the
/// first `limit` of them when there is one.
pub(crate) fn sort_indices(
    batch: &RecordBatch,
    order: &[(usize, SortOptions)],
    limit: Option<usize>,
) -> Result<UInt32Array> {
    let columns = key_columns(batch, order);
    if order.len() == 1 || limit.is_some() {
        let keys: Vec<SortColumn> = columns
            .into_iter()
            .zip(order)
            .map(|(values, (_, options))| SortColumn {
                values,
                options: Some(*options),
            })
            .collect();
        return Ok(lexsort_to_indices(&keys, limit)?);
    }
    let rows = converter(&batch.schema(), order)?.convert_columns(&columns)?;
    let order = match words(&[&rows]) {
        (1, _) => sorted_keys::<1>(rows).order(),
        (2, _) => sorted_keys::<2>(rows).order(),
        (3, _) => sorted_keys::<3>(rows).order(),
        _ => sorted_keys::<4>(rows).order(),
    };
    Ok(UInt32Array::from(order))
}

fn key_columns(batch: &RecordBatch, order: &[(usize, SortOptions)]) -> Vec<ArrayRef> {
    order
        .iter()
        .map(|(at, _)| Arc::clone(batch.column(*at)))
        .collect()
}

/// The row format of `schema`'s key columns `order`.
fn converter(schema: &Schema, order: &[(usize, SortOptions)]) -> Result<RowConverter> {
    let fields = order
        .iter()
        .map(|(at, options)| {
            SortField::new_with_options(schema.field(*at).data_type().clone(), *options)
        })
        .collect();
    Ok(RowConverter::new(fields)?)
}

/// Words (of 8 bytes, at most 4) that hold the longest of `rows`, and
/// whether some row is longer than them.
fn words(rows: &[&Rows]) -> (usize, bool) {
    let widest = rows
        .iter()
        .flat_map(|r| r.iter())
        .map(|r| r.as_ref().len())
        .max()
        .unwrap_or(0);
    let words = widest.div_ceil(8).clamp(1, 4);
    (words, widest > 8 * words)
}

/// A row's first `8 * W` bytes as big-endian words, zero-padded: words
/// that compare less belong to a row that compares less, and equal words
/// leave rows longer than them to be compared whole.
fn prefix<const W: usize>(row: &[u8]) -> [u64; W] {
    let mut words = [0u64; W];
    for (word, chunk) in words.iter_mut().zip(row.chunks(8)) {
        let mut bytes = [0u8; 8];
        bytes[..chunk.len()].copy_from_slice(chunk);
        *word = u64::from_be_bytes(bytes);
    }
    words
}

/// Rows in order: each one's prefix and index.
struct SortedKeys<const W: usize> {
    keys: Vec<([u64; W], u32)>,
    /// The rows, kept while some row (of any run) is longer than its
    /// prefix: equal prefixes are then compared as whole rows.
    rows: Option<Rows>,
}

impl<const W: usize> SortedKeys<W> {
    fn order(self) -> Vec<u32> {
        self.keys.into_iter().map(|(_, i)| i).collect()
    }

    /// The `i`th row in order against `other`'s `j`th: equal when the
    /// rows are.
    fn cmp_at(&self, i: usize, other: &Self, j: usize) -> Ordering {
        let ((a, ia), (b, ib)) = (&self.keys[i], &other.keys[j]);
        a.cmp(b).then_with(|| match (&self.rows, &other.rows) {
            (Some(x), Some(y)) => x.row(*ia as usize).cmp(&y.row(*ib as usize)),
            _ => Ordering::Equal,
        })
    }
}

/// `rows` in order, ties in index order (the order a stable sort gives).
fn sorted_keys<const W: usize>(rows: Rows) -> SortedKeys<W> {
    let mut longer = false;
    let mut keys: Vec<([u64; W], u32)> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let bytes = r.as_ref();
            longer |= bytes.len() > 8 * W;
            (prefix::<W>(bytes), i as u32)
        })
        .collect();
    if longer {
        keys.sort_unstable_by(|(a, ia), (b, ib)| {
            a.cmp(b)
                .then_with(|| rows.row(*ia as usize).cmp(&rows.row(*ib as usize)))
                .then(ia.cmp(ib))
        });
    } else {
        // The words are the whole row: ordering (words, index) pairs is
        // the stable sort.
        keys.sort_unstable();
    }
    SortedKeys {
        keys,
        rows: Some(rows),
    }
}

/// How many runs `rows` rows are cut into: one per pool thread, each of
/// at least [`RUN_ROWS`]; 1 means the sort is not worth cutting.
pub(crate) fn runs_for(rows: usize) -> usize {
    rayon::current_num_threads().min(rows / RUN_ROWS).max(1)
}

/// `held`'s rows sorted by `order` in `runs` runs on rayon's pool, merged:
/// the rows from `offset` on, in batches of up to `batch_size`, given to
/// `emit`.
pub(crate) fn sort_in_runs(
    schema: &SchemaRef,
    held: Vec<RecordBatch>,
    order: &[(usize, SortOptions)],
    runs: usize,
    shape: (usize, usize),
    emit: impl FnMut(RecordBatch) -> Result<()>,
) -> Result<()> {
    let groups = cut(held, runs);
    let converter = converter(schema, order)?;
    let runs: Vec<(RecordBatch, Rows)> = groups
        .into_par_iter()
        .map(|group| {
            let batch = concat_batches(schema, &group)?;
            drop(group);
            let rows = converter.convert_columns(&key_columns(&batch, order))?;
            Ok((batch, rows))
        })
        .collect::<Result<_>>()?;
    let all: Vec<&Rows> = runs.iter().map(|(_, r)| r).collect();
    let (words, longer) = words(&all);
    match words {
        1 => merge::<1>(runs, longer, shape, emit),
        2 => merge::<2>(runs, longer, shape, emit),
        3 => merge::<3>(runs, longer, shape, emit),
        _ => merge::<4>(runs, longer, shape, emit),
    }
}

/// Each run sorted on the pool, then the runs merged (`longer`: some
/// row of some run is longer than `W` words).
fn merge<const W: usize>(
    runs: Vec<(RecordBatch, Rows)>,
    longer: bool,
    (offset, batch_size): (usize, usize),
    mut emit: impl FnMut(RecordBatch) -> Result<()>,
) -> Result<()> {
    let sorted: Vec<(RecordBatch, SortedKeys<W>)> = runs
        .into_par_iter()
        .map(|(batch, rows)| {
            let mut keys = sorted_keys::<W>(rows);
            if !longer {
                // No run compares whole rows: the rows can go.
                keys.rows = None;
            }
            let indices = UInt32Array::from_iter_values(keys.keys.iter().map(|(_, i)| *i));
            Ok((take_by_column(batch, &indices)?, keys))
        })
        .collect::<Result<_>>()?;
    let batches: Vec<&RecordBatch> = sorted.iter().map(|(b, _)| b).collect();
    let mut heads = vec![0usize; sorted.len()];
    let mut picks: Vec<(usize, usize)> = Vec::with_capacity(batch_size);
    let mut skip = offset;
    loop {
        // The least head; a tie goes to the earlier run.
        let mut least: Option<usize> = None;
        for (r, (_, keys)) in sorted.iter().enumerate() {
            if heads[r] == keys.keys.len() {
                continue;
            }
            least = match least {
                Some(l) if sorted[l].1.cmp_at(heads[l], keys, heads[r]).is_le() => Some(l),
                _ => Some(r),
            };
        }
        let Some(r) = least else { break };
        if skip > 0 {
            skip -= 1;
        } else {
            picks.push((r, heads[r]));
        }
        heads[r] += 1;
        if picks.len() == batch_size {
            emit(interleave_record_batch(&batches, &picks)?)?;
            picks.clear();
        }
    }
    if !picks.is_empty() {
        emit(interleave_record_batch(&batches, &picks)?)?;
    }
    Ok(())
}

/// `batch`'s rows in the order of `indices`, a column at a time: each
/// column goes as soon as its sorted copy is made, so the run holds one
/// column twice at most, not the whole batch.
fn take_by_column(batch: RecordBatch, indices: &UInt32Array) -> Result<RecordBatch> {
    let (schema, mut columns, _) = batch.into_parts();
    for column in &mut columns {
        *column = take(column.as_ref(), indices, None)?;
    }
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// `held` cut into `runs` groups of about as many rows each, in order.
fn cut(held: Vec<RecordBatch>, runs: usize) -> Vec<Vec<RecordBatch>> {
    let total: usize = held.iter().map(RecordBatch::num_rows).sum();
    let each = total.div_ceil(runs.max(1)).max(1);
    let mut groups: Vec<Vec<RecordBatch>> = vec![vec![]];
    let mut room = each;
    for batch in held {
        let mut from = 0;
        while from < batch.num_rows() {
            if room == 0 {
                groups.push(vec![]);
                room = each;
            }
            let len = room.min(batch.num_rows() - from);
            groups
                .last_mut()
                .expect("there is a group")
                .push(batch.slice(from, len));
            room -= len;
            from += len;
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use arrow::array::{Array, Int64Array, StringArray};
    use arrow::compute::take_record_batch;
    use arrow::datatypes::{DataType, Field, Schema};
    use proptest::prelude::*;

    use super::*;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("v", DataType::Int64, true),
            Field::new("at", DataType::Int64, false),
        ]))
    }

    /// Batches of `rows` (key, value) as `sizes` says, each row's place in
    /// the input in `at`; odd keys are long strings that share 55 bytes.
    fn batches(rows: &[(Option<u8>, Option<i64>)], sizes: &[usize]) -> Vec<RecordBatch> {
        let mut out = vec![];
        let mut from = 0;
        let mut sizes = sizes.iter().cycle();
        while from < rows.len() {
            let to = (from + sizes.next().copied().unwrap_or(1).max(1)).min(rows.len());
            let part = &rows[from..to];
            let k: StringArray = part
                .iter()
                .map(|(k, _)| {
                    k.map(|k| match k % 2 {
                        0 => format!("k{k}"),
                        _ => format!("{}{k}", "a-long-key-".repeat(5)),
                    })
                })
                .collect();
            let v: Int64Array = part.iter().map(|(_, v)| *v).collect();
            let at = Int64Array::from_iter_values(from as i64..to as i64);
            out.push(
                RecordBatch::try_new(schema(), vec![Arc::new(k), Arc::new(v), Arc::new(at)])
                    .unwrap(),
            );
            from = to;
        }
        out
    }

    /// The single-thread stable sort: concatenated, sorted, taken.
    fn reference(
        held: &[RecordBatch],
        order: &[(usize, SortOptions)],
        offset: usize,
    ) -> RecordBatch {
        let all = concat_batches(&schema(), held).unwrap();
        let keys: Vec<ArrayRef> = key_columns(&all, order);
        let rows = converter(&schema(), order)
            .unwrap()
            .convert_columns(&keys)
            .unwrap();
        let mut indices: Vec<u32> = (0..all.num_rows() as u32).collect();
        indices.sort_by(|&a, &b| rows.row(a as usize).cmp(&rows.row(b as usize)));
        let sorted = take_record_batch(&all, &UInt32Array::from(indices)).unwrap();
        let offset = offset.min(sorted.num_rows());
        sorted.slice(offset, sorted.num_rows() - offset)
    }

    fn options() -> impl Strategy<Value = SortOptions> {
        (any::<bool>(), any::<bool>()).prop_map(|(descending, nulls_first)| SortOptions {
            descending,
            nulls_first,
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Cut into any number of runs, merged: the rows of one stable
        /// sort (ties in input order, `at` shows it), from the offset on,
        /// in batches of the size asked; keys longer than the words
        /// compared first included.
        #[test]
        fn runs_merged_are_one_sort(
            rows in proptest::collection::vec((proptest::option::of(0u8..4), proptest::option::of(-3i64..3)), 0..300),
            sizes in proptest::collection::vec(1usize..80, 1..5),
            runs in 1usize..6,
            keys in prop_oneof![Just(vec![0]), Just(vec![1]), Just(vec![1, 0]), Just(vec![0, 1])],
            opts in proptest::collection::vec(options(), 2),
            offset in 0usize..40,
            batch_size in 1usize..70,
        ) {
            let order: Vec<(usize, SortOptions)> = keys.iter().zip(&opts).map(|(&k, &o)| (k, o)).collect();
            let held = batches(&rows, &sizes);
            let mut out = vec![];
            sort_in_runs(&schema(), held.clone(), &order, runs, (offset, batch_size), |b| {
                out.push(b);
                Ok(())
            }).unwrap();
            prop_assert!(out.iter().all(|b| b.num_rows() <= batch_size && b.num_rows() > 0));
            let got = concat_batches(&schema(), &out).unwrap();
            let want = reference(&held, &order, offset);
            prop_assert_eq!(got.num_rows(), want.num_rows());
            for c in 0..3 {
                prop_assert_eq!(got.column(c).to_data(), want.column(c).to_data(), "column {}", c);
            }
            // Each row whole, and none twice.
            let at = got.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
            let all = concat_batches(&schema(), &held).unwrap();
            let mut seen = std::collections::HashSet::new();
            for (r, &a) in at.values().iter().enumerate() {
                prop_assert!(seen.insert(a));
                for c in 0..2 {
                    prop_assert_eq!(got.column(c).slice(r, 1).to_data(), all.column(c).slice(a as usize, 1).to_data());
                }
            }
            if offset == 0 {
                prop_assert_eq!(seen.len(), rows.len());
            }
        }
    }

    #[test]
    fn cut_makes_runs_of_about_equal_rows_in_order() {
        let rows: Vec<(Option<u8>, Option<i64>)> = (0..10).map(|i| (None, Some(i))).collect();
        let groups = cut(batches(&rows, &[7, 3]), 3);
        let sizes: Vec<usize> = groups
            .iter()
            .map(|g| g.iter().map(RecordBatch::num_rows).sum())
            .collect();
        assert_eq!(sizes, [4, 4, 2]);
        let at: Vec<i64> = groups
            .iter()
            .flatten()
            .flat_map(|b| {
                let a = b.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
                a.values().to_vec()
            })
            .collect();
        assert_eq!(at, (0..10).collect::<Vec<_>>());
        assert!(cut(vec![], 2).iter().all(Vec::is_empty));
    }
}
