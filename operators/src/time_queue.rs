//! `(time, key)` pairs taken in time order, for times that mostly arrive in
//! order (an interval join's keys, scheduled by their earliest row).
//!
//! A binary heap of every live key cost the interval join a cache miss per
//! level on each pop (Nexmark q7 keys its bids by price: a million keys,
//! the heap 16 MB). Here a pair whose time is not below the last one pushed
//! in order goes to the back of a FIFO, which stays sorted by time and is
//! read front to back; only the others (late rows, keys rescheduled after
//! expiry) go to a heap. A pop takes the lesser of the two fronts, so times
//! come out in order, as from one heap; pairs of one time in any order
//! (thousands of rows share a millisecond, whatever their keys).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

#[derive(Default)]
pub(crate) struct TimeQueue {
    /// Times non-decreasing from front to back.
    ordered: VecDeque<(i64, usize)>,
    rest: BinaryHeap<Reverse<(i64, usize)>>,
}

impl TimeQueue {
    pub(crate) fn push(&mut self, time: i64, key: usize) {
        match self.ordered.back() {
            Some(&(last, _)) if time < last => self.rest.push(Reverse((time, key))),
            _ => self.ordered.push_back((time, key)),
        }
    }

    /// A pair of the least time.
    pub(crate) fn peek(&self) -> Option<(i64, usize)> {
        let rest = self.rest.peek().map(|r| r.0);
        match (self.ordered.front().copied(), rest) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Take a pair of the least time.
    pub(crate) fn pop(&mut self) -> Option<(i64, usize)> {
        let least = self.peek()?;
        if self.ordered.front() == Some(&least) {
            self.ordered.pop_front();
        } else {
            self.rest.pop();
        }
        Some(least)
    }

    /// Pairs held.
    pub(crate) fn len(&self) -> usize {
        self.ordered.len() + self.rest.len()
    }
}

impl FromIterator<(i64, usize)> for TimeQueue {
    /// The pairs sorted first: all of them go to the FIFO.
    fn from_iter<I: IntoIterator<Item = (i64, usize)>>(pairs: I) -> Self {
        let mut sorted: Vec<(i64, usize)> = pairs.into_iter().collect();
        sorted.sort_unstable();
        Self {
            ordered: sorted.into(),
            rest: BinaryHeap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Pushes (mostly in order, some late, many of one time) and pops
        /// interleaved give the times one binary heap gives, and every pair
        /// comes out once.
        #[test]
        fn pops_are_a_heaps(ops in proptest::collection::vec((any::<bool>(), 0i64..40, 0usize..4, 0i64..8), 0..300)) {
            let mut queue = TimeQueue::default();
            let mut heap = BinaryHeap::new();
            let (mut pushed, mut popped) = (Vec::new(), Vec::new());
            let mut clock = 0;
            for (pop, step, key, late) in ops {
                if pop {
                    let got = queue.pop();
                    prop_assert_eq!(got.map(|p| p.0), heap.pop().map(|r: Reverse<(i64, usize)>| r.0 .0));
                    popped.extend(got);
                } else {
                    clock += step % 5;
                    let time = if step % 7 == 0 { clock - late } else { clock };
                    queue.push(time, key);
                    heap.push(Reverse((time, key)));
                    pushed.push((time, key));
                }
                prop_assert_eq!(queue.peek().map(|p| p.0), heap.peek().map(|r| r.0 .0));
                prop_assert_eq!(queue.len(), heap.len());
            }
            let rest: Vec<(i64, usize)> = std::iter::from_fn(|| queue.pop()).collect();
            prop_assert!(rest.windows(2).all(|w| w[0].0 <= w[1].0));
            popped.extend(rest);
            popped.sort_unstable();
            pushed.sort_unstable();
            prop_assert_eq!(popped, pushed);
            let mut rebuilt: TimeQueue = heap.iter().map(|r| r.0).collect();
            while let Some(Reverse(want)) = heap.pop() {
                prop_assert_eq!(rebuilt.pop().map(|p| p.0), Some(want.0));
            }
            prop_assert_eq!(rebuilt.pop(), None);
        }
    }
}
