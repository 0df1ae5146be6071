//! Batch mode's global sort (`ORDER BY … LIMIT … OFFSET`): the one subtask
//! holds every row it gets and, once its input has ended, emits them in
//! order, or just the slice the offset and fetch select.
//!
//! With a fetch, held rows are cut back to the first offset + fetch of
//! them whenever they pass twice that (and [`COMPACT_ROWS`]), so `ORDER BY
//! … LIMIT 10` over any input holds a few thousand rows; with a fetch and
//! no ordering, rows past the limit are not kept at all. A full sort holds
//! its whole input: its size counts against the managed memory budget
//! through the `state_bytes` figure. A full sort of many rows is cut into
//! runs sorted side by side on rayon's pool ([`crate::sort_runs`]).

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::compute::{SortOptions, concat_batches, take_record_batch};
use arrow::datatypes::SchemaRef;
use weir_core::spec::SortSpec;
use weir_core::{Result, WeirError};

use crate::sort_runs::{runs_for, sort_in_runs, sort_indices};
use crate::{Operator, Output};

/// Held rows below which a sort with a fetch does not cut back.
const COMPACT_ROWS: usize = 65_536;

/// The sort of the one subtask.
pub struct SortOperator {
    name: String,
    /// Column index and options per sort key.
    order: Vec<(usize, SortOptions)>,
    offset: usize,
    /// Offset plus fetch, when there is a fetch.
    limit: Option<usize>,
    schema: SchemaRef,
    batch_size: usize,
    held: Vec<RecordBatch>,
    rows: usize,
    bytes: usize,
}

impl SortOperator {
    /// The operator for `spec`, emitting batches of up to `batch_size` rows.
    pub fn try_new(name: String, spec: &SortSpec, batch_size: usize) -> Result<Self> {
        let order =
            spec.order
                .iter()
                .map(|(c, descending, nulls_first)| {
                    let at = spec.input_schema.index_of(c).map_err(|_| {
                        WeirError::plan(format!("{name}: no column '{c}' to sort by"))
                    })?;
                    Ok((
                        at,
                        SortOptions {
                            descending: *descending,
                            nulls_first: *nulls_first,
                        },
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            name,
            order,
            offset: spec.offset,
            limit: spec.limit(),
            schema: Arc::clone(&spec.input_schema),
            batch_size: batch_size.max(1),
            held: vec![],
            rows: 0,
            bytes: 0,
        })
    }

    /// Every held row in one batch, in order; only the first `limit` when
    /// there is one.
    fn sorted(&mut self) -> Result<RecordBatch> {
        let all = concat_batches(&self.schema, &std::mem::take(&mut self.held))?;
        if self.order.is_empty() {
            let keep = self.limit.unwrap_or(usize::MAX).min(all.num_rows());
            return Ok(all.slice(0, keep));
        }
        let indices = sort_indices(&all, &self.order, self.limit)?;
        Ok(take_record_batch(&all, &indices)?)
    }

    /// Cut the held rows back to the first `limit`.
    fn compact(&mut self) -> Result<()> {
        let kept = self.sorted()?;
        self.rows = kept.num_rows();
        self.bytes = kept.get_array_memory_size();
        self.held = vec![kept];
        Ok(())
    }
}

impl Operator for SortOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, _out: &mut dyn Output) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if self.order.is_empty()
            && let Some(limit) = self.limit
        {
            // The first rows to arrive are the ones kept.
            let room = limit.saturating_sub(self.rows);
            if room == 0 {
                return Ok(());
            }
            let batch = batch.slice(0, room.min(batch.num_rows()));
            self.rows += batch.num_rows();
            self.bytes += batch.get_array_memory_size();
            self.held.push(batch);
            return Ok(());
        }
        self.rows += batch.num_rows();
        self.bytes += batch.get_array_memory_size();
        self.held.push(batch);
        if let Some(limit) = self.limit
            && self.rows > limit.saturating_mul(2).max(COMPACT_ROWS)
        {
            self.compact()?;
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut dyn Output) -> Result<()> {
        let runs = runs_for(self.rows);
        if self.limit.is_none() && !self.order.is_empty() && runs > 1 {
            self.rows = 0;
            self.bytes = 0;
            let held = std::mem::take(&mut self.held);
            let shape = (self.offset, self.batch_size);
            return sort_in_runs(&self.schema, held, &self.order, runs, shape, |b| {
                out.collect(b)
            });
        }
        let sorted = self.sorted()?;
        self.rows = 0;
        self.bytes = 0;
        let end = self.limit.unwrap_or(usize::MAX).min(sorted.num_rows());
        let mut from = self.offset.min(end);
        while from < end {
            let len = self.batch_size.min(end - from);
            out.collect(sorted.slice(from, len))?;
            from += len;
        }
        Ok(())
    }

    fn metrics(&self) -> Vec<(String, u64)> {
        vec![
            ("rows".into(), self.rows as u64),
            ("state_bytes".into(), self.bytes as u64),
        ]
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{Array, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("v", DataType::Int64, true),
        ]))
    }

    /// Rows `i` in `from..to`: k is one of five names or null, v is i * 37 % 101.
    fn batch(from: i64, to: i64) -> RecordBatch {
        let k: StringArray = (from..to)
            .map(|i| (i % 6 != 0).then(|| format!("n{}", i % 5)))
            .collect();
        let v = Int64Array::from_iter_values((from..to).map(|i| i * 37 % 101));
        RecordBatch::try_new(schema(), vec![Arc::new(k), Arc::new(v)]).unwrap()
    }

    /// Rows a test sorts: enough for a full sort to be cut into runs.
    const ROWS: i64 = 400_000;

    fn rows(batches: &[RecordBatch]) -> Vec<(Option<String>, i64)> {
        let mut out = vec![];
        for b in batches {
            let k = b.column(0).as_any().downcast_ref::<StringArray>().unwrap();
            let v = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
            for i in 0..b.num_rows() {
                out.push(((!k.is_null(i)).then(|| k.value(i).to_string()), v.value(i)));
            }
        }
        out
    }

    fn run(
        order: Vec<(&str, bool, bool)>,
        offset: usize,
        fetch: Option<usize>,
    ) -> Vec<(Option<String>, i64)> {
        let spec = SortSpec {
            order: order
                .into_iter()
                .map(|(c, d, n)| (c.to_string(), d, n))
                .collect(),
            offset,
            fetch,
            input_schema: schema(),
        };
        let mut op = SortOperator::try_new("sort".into(), &spec, 1000).unwrap();
        let mut out: Vec<RecordBatch> = vec![];
        for from in (0..ROWS).step_by(5000) {
            op.process_batch(batch(from, from + 5000), &mut out)
                .unwrap();
        }
        assert!(out.is_empty(), "nothing leaves before the end");
        op.finish(&mut out).unwrap();
        assert!(out.iter().all(|b| b.num_rows() <= 1000));
        rows(&out)
    }

    /// The rows sorted by the same rule, one row at a time.
    fn reference(desc_k: bool, nulls_first: bool, desc_v: bool) -> Vec<(Option<String>, i64)> {
        let mut all = rows(&[batch(0, ROWS)]);
        all.sort_by(|a, b| {
            let k = match (&a.0, &b.0) {
                (None, None) => std::cmp::Ordering::Equal,
                (None, Some(_)) => {
                    if nulls_first {
                        std::cmp::Ordering::Less
                    } else {
                        std::cmp::Ordering::Greater
                    }
                }
                (Some(_), None) => {
                    if nulls_first {
                        std::cmp::Ordering::Greater
                    } else {
                        std::cmp::Ordering::Less
                    }
                }
                (Some(x), Some(y)) => {
                    if desc_k {
                        y.cmp(x)
                    } else {
                        x.cmp(y)
                    }
                }
            };
            let v = if desc_v { b.1.cmp(&a.1) } else { a.1.cmp(&b.1) };
            k.then(v)
        });
        all
    }

    #[test]
    fn a_full_sort_on_two_keys_orders_every_row() {
        let got = run(vec![("k", true, false), ("v", false, false)], 0, None);
        assert_eq!(got, reference(true, false, false));
        let got = run(vec![("k", false, true), ("v", true, false)], 0, None);
        assert_eq!(got, reference(false, true, true));
        // An offset and no fetch: the rest.
        let got = run(
            vec![("k", false, false), ("v", false, false)],
            123_456,
            None,
        );
        assert_eq!(got, reference(false, false, false)[123_456..]);
        // These sorts were cut into runs sorted on rayon's pool.
        assert!(rayon::current_num_threads() == 1 || crate::sort_runs::runs_for(ROWS as usize) > 1);
    }

    #[test]
    fn a_full_sort_on_one_key_orders_every_row() {
        let got = run(vec![("v", true, false)], 0, None);
        let values: Vec<i64> = got.iter().map(|r| r.1).collect();
        let mut want = values.clone();
        want.sort_by(|a, b| b.cmp(a));
        assert_eq!(values, want);
        assert_eq!(got.len(), ROWS as usize);
        // Every row once: (k, v) pairs as a multiset.
        let mut got = got;
        let mut all = rows(&[batch(0, ROWS)]);
        got.sort();
        all.sort();
        assert_eq!(got, all);
    }

    #[test]
    fn a_fetch_keeps_the_slice_after_the_offset() {
        let want = reference(false, false, true);
        let got = run(
            vec![("k", false, false), ("v", true, false)],
            70_000,
            Some(12_345),
        );
        assert_eq!(got, want[70_000..82_345]);
        // Offset past the end: nothing.
        assert!(run(vec![("v", false, false)], ROWS as usize + 1, Some(5)).is_empty());
    }

    #[test]
    fn a_limit_alone_keeps_the_first_rows_to_arrive() {
        let got = run(vec![], 3, Some(7));
        assert_eq!(got, rows(&[batch(3, 10)]));
    }
}
