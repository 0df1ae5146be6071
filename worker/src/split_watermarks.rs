//! Watermarks per split (Flink's per-partition watermarks): a source whose
//! batches each come from one split (a Kafka partition) gets one generator
//! per split, and its watermark is the minimum over the splits that have
//! shown data and are not idle — so one fast partition cannot push the
//! watermark past the rows a slow one has yet to deliver. Sources that do
//! not name splits keep one generator for all their rows.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use weir_core::message::{Timestamp, Watermark};
use weir_core::time::{WatermarkGenerator, WatermarkStrategy};

pub(crate) struct SplitWatermarks {
    strategy: WatermarkStrategy,
    whole: Option<Box<dyn WatermarkGenerator>>,
    splits: HashMap<u64, (Box<dyn WatermarkGenerator>, Instant)>,
    idleness: Option<Duration>,
}

impl SplitWatermarks {
    pub(crate) fn new(strategy: &WatermarkStrategy) -> Self {
        Self {
            whole: strategy.create_generator(),
            strategy: strategy.clone(),
            splits: HashMap::new(),
            idleness: strategy.idleness,
        }
    }

    /// The splits the source reads now: one not seen yet holds the
    /// watermark back until it shows data or goes idle (as in Flink, where
    /// a split's watermark starts at the minimum when it is assigned).
    pub(crate) fn register(&mut self, splits: &[u64]) {
        for s in splits {
            if !self.splits.contains_key(s)
                && let Some(g) = self.strategy.create_generator()
            {
                self.splits.insert(*s, (g, Instant::now()));
            }
        }
    }

    /// The event times of a batch, from `split` when the source says.
    pub(crate) fn on_timestamps(&mut self, split: Option<u64>, timestamps: &[Timestamp]) {
        match split {
            None => {
                if let Some(g) = self.whole.as_mut() {
                    g.on_timestamps(timestamps);
                }
            }
            Some(s) => {
                if !self.splits.contains_key(&s) {
                    let Some(g) = self.strategy.create_generator() else {
                        return;
                    };
                    self.splits.insert(s, (g, Instant::now()));
                }
                let (g, seen) = self.splits.get_mut(&s).expect("inserted above");
                g.on_timestamps(timestamps);
                *seen = Instant::now();
            }
        }
    }

    /// The watermark now: the whole source's, or the minimum over active
    /// splits (a split quiet for the idle timeout does not hold it back).
    pub(crate) fn current_watermark(&self) -> Option<Watermark> {
        if self.splits.is_empty() {
            return self.whole.as_ref().and_then(|g| g.current_watermark());
        }
        let mut active = vec![];
        for (g, seen) in self.splits.values() {
            if self.idleness.is_some_and(|t| seen.elapsed() >= t) {
                continue;
            }
            match g.current_watermark() {
                Some(w) => active.push(w),
                // An active split with no data yet holds everything back.
                None => return None,
            }
        }
        if active.is_empty() {
            // All idle: the largest, as the downstream sees the source idle.
            return self
                .splits
                .values()
                .filter_map(|(g, _)| g.current_watermark())
                .max();
        }
        active.into_iter().min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slowest_active_split_holds_the_watermark() {
        let strategy = WatermarkStrategy::for_monotonous_timestamps("ts");
        let mut w = SplitWatermarks::new(&strategy);
        w.on_timestamps(Some(1), &[1000]);
        w.on_timestamps(Some(2), &[5000]);
        assert_eq!(w.current_watermark(), Some(Watermark(999)));
        w.on_timestamps(Some(1), &[7000]);
        assert_eq!(w.current_watermark(), Some(Watermark(4999)));
        // A registered split without data holds the watermark back.
        w.register(&[1, 2, 3]);
        assert_eq!(w.current_watermark(), None);
        w.on_timestamps(Some(3), &[9000]);
        assert_eq!(w.current_watermark(), Some(Watermark(4999)));
        // Without splits: one generator for all rows.
        let mut whole = SplitWatermarks::new(&strategy);
        whole.on_timestamps(None, &[1000]);
        whole.on_timestamps(None, &[5000]);
        assert_eq!(whole.current_watermark(), Some(Watermark(4999)));
    }
}
