//! Splitting batches over the channels of an edge.

use arrow::array::UInt32Array;
use arrow::compute::take_record_batch;
use arrow::record_batch::RecordBatch;
use weir_core::Result;
use weir_core::graph::Partitioner;
use weir_core::keys::{hash_columns, key_group_of, operator_index_for_key_group};

/// Distributes the batches of one producer subtask over the consumer channels
/// of one edge. Hash partitioning computes every row's key group with the
/// vectorized key hash, then gathers each target's rows with one `take` per
/// target (a counting sort of row indices) — never a per-row push.
pub struct BatchPartitioner {
    partitioner: Partitioner,
    channels: usize,
    max_parallelism: u32,
    next: usize,
    hashes: Vec<u64>,
    targets: Vec<u32>,
}

impl BatchPartitioner {
    /// A partitioner over `channels` consumer channels. For a forward edge
    /// `channels` is 1.
    pub fn new(
        partitioner: Partitioner,
        channels: usize,
        max_parallelism: u32,
        subtask: usize,
    ) -> Self {
        Self {
            partitioner,
            channels,
            max_parallelism,
            // Start round-robin at the producer's index so producers spread out.
            next: subtask % channels.max(1),
            hashes: Vec::new(),
            targets: Vec::new(),
        }
    }

    /// Number of channels.
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// Split `batch`, calling `emit(channel, part)` for every non-empty part.
    pub fn partition(
        &mut self,
        batch: RecordBatch,
        mut emit: impl FnMut(usize, RecordBatch) -> Result<()>,
    ) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        match &self.partitioner {
            Partitioner::Forward => emit(0, batch),
            _ if self.channels == 1 => emit(0, batch),
            Partitioner::Rebalance => {
                let c = self.next;
                self.next = (self.next + 1) % self.channels;
                emit(c, batch)
            }
            Partitioner::Broadcast => {
                for c in 0..self.channels {
                    emit(c, batch.clone())?;
                }
                Ok(())
            }
            Partitioner::Hash { key_indices, .. } => {
                let keys: Vec<_> = key_indices
                    .iter()
                    .map(|&i| std::sync::Arc::clone(batch.column(i)))
                    .collect();
                hash_columns(&keys, &mut self.hashes)?;
                let (channels, max_p) = (self.channels, self.max_parallelism);
                self.targets.clear();
                self.targets.extend(self.hashes.iter().map(|&h| {
                    operator_index_for_key_group(key_group_of(h, max_p), channels, max_p) as u32
                }));
                let first = self.targets[0];
                if self.targets.iter().all(|&t| t == first) {
                    return emit(first as usize, batch);
                }
                let mut counts = vec![0u32; channels + 1];
                for &t in &self.targets {
                    counts[t as usize + 1] += 1;
                }
                for c in 1..=channels {
                    counts[c] += counts[c - 1];
                }
                let offsets = counts.clone();
                let mut indices = vec![0u32; self.targets.len()];
                for (row, &t) in self.targets.iter().enumerate() {
                    let slot = &mut counts[t as usize];
                    indices[*slot as usize] = row as u32;
                    *slot += 1;
                }
                let indices = UInt32Array::from(indices);
                for c in 0..channels {
                    let (start, end) = (offsets[c] as usize, offsets[c + 1] as usize);
                    if end > start {
                        let part = take_record_batch(&batch, &indices.slice(start, end - start))?;
                        emit(c, part)?;
                    }
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{AsArray, Int64Array};
    use arrow::datatypes::Int64Type;
    use std::sync::Arc;
    use weir_core::keys::key_groups;

    #[test]
    fn hash_partition_sends_each_key_to_its_key_group_owner() {
        let keys = Int64Array::from((0..10_000).map(|i| i % 777).collect::<Vec<i64>>());
        let batch = RecordBatch::try_from_iter(vec![("k", Arc::new(keys) as _)]).unwrap();
        let mut p = BatchPartitioner::new(
            Partitioner::Hash {
                keys: vec!["k".into()],
                key_indices: vec![0],
            },
            4,
            128,
            0,
        );
        let mut parts = vec![];
        p.partition(batch, |c, b| {
            parts.push((c, b));
            Ok(())
        })
        .unwrap();
        let total: usize = parts.iter().map(|(_, b)| b.num_rows()).sum();
        assert_eq!(total, 10_000);
        assert!(parts.len() > 1);
        for (c, b) in parts {
            let (mut s, mut kg) = (vec![], vec![]);
            key_groups(&[Arc::clone(b.column(0))], 128, &mut s, &mut kg).unwrap();
            for g in kg {
                assert_eq!(operator_index_for_key_group(g, 4, 128), c);
            }
            // Order within a target is preserved.
            let v = b.column(0).as_primitive::<Int64Type>();
            assert!(!v.is_empty());
        }
    }
}
