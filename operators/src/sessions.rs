//! Per-key session bookkeeping shared by session windows and session joins.
//!
//! Each record opens `[ts, ts + gap)`; sessions of the same key that overlap
//! or touch merge. Every session owns a group id; merging aliases the ids in
//! a union-find table, so whatever the operator keeps per group (accumulator
//! rows, buffered rows) never has to move. Records are assigned in arrival
//! order, as Flink's `WindowOperator` takes them: a record late on its own
//! is dropped even when a newer record arriving after it (in the same batch
//! or a later one) would have opened a session it touches. The watermark
//! only changes between batches, so the result does not depend on how the
//! runtime cuts or merges batches between two watermarks.

/// Marks a row that was too late for any session.
pub(crate) const LATE: usize = usize::MAX;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Session {
    pub(crate) start: i64,
    pub(crate) end: i64,
    pub(crate) group: usize,
    /// Emitted at least once (a later emission is an update).
    pub(crate) fired: bool,
    /// Changed by a late record after its end passed: emit again.
    pub(crate) dirty: bool,
}

/// Sessions per dense key id.
pub(crate) struct SessionSet {
    gap: i64,
    lateness: i64,
    /// Open sessions per key id, sorted by start, disjoint.
    pub(crate) sessions: Vec<Vec<Session>>,
    /// Union-find over group ids: merged sessions point to the survivor.
    pub(crate) parent: Vec<usize>,
    /// Nothing is due before this time: the last millisecond of the earliest
    /// unfired session, or the end of a fired one's lateness.
    pub(crate) next_due: i64,
    /// Some session needs a late firing now.
    pub(crate) any_dirty: bool,
}

impl SessionSet {
    pub(crate) fn new(gap: i64, lateness: i64) -> Self {
        Self {
            gap,
            lateness,
            sessions: Vec::new(),
            parent: Vec::new(),
            next_due: i64::MAX,
            any_dirty: false,
        }
    }

    /// Assign every row (key id, timestamp) to a session; [`LATE`] for rows
    /// whose window, merged with what it touches, is past its lateness.
    pub(crate) fn assign_batch(
        &mut self,
        key_ids: &[usize],
        ts: &[i64],
        watermark: i64,
    ) -> Vec<usize> {
        if let Some(&max) = key_ids.iter().max()
            && self.sessions.len() <= max
        {
            self.sessions.resize(max + 1, Vec::new());
        }
        (0..key_ids.len())
            .map(|i| self.assign(key_ids[i], ts[i], watermark).unwrap_or(LATE))
            .collect()
    }

    fn assign(&mut self, key: usize, ts: i64, wm: i64) -> Option<usize> {
        let (start, end) = (ts, ts.saturating_add(self.gap));
        let list = &mut self.sessions[key];
        // Sessions that overlap or touch [start, end).
        let first = list.partition_point(|s| s.end < start);
        let last = list.partition_point(|s| s.start <= end);
        if first == last {
            if end.saturating_sub(1).saturating_add(self.lateness) <= wm {
                return None;
            }
            let group = self.parent.len();
            self.parent.push(group);
            let dirty = end.saturating_sub(1) <= wm;
            self.any_dirty |= dirty;
            self.next_due = self.next_due.min(end.saturating_sub(1));
            let session = Session {
                start,
                end,
                group,
                fired: false,
                dirty,
            };
            self.sessions[key].insert(first, session);
            return Some(group);
        }
        let fired = list[first..last].iter().any(|s| s.fired);
        let merged_end = end.max(list[last - 1].end);
        let merged = Session {
            start: start.min(list[first].start),
            end: merged_end,
            group: list[first].group,
            fired,
            dirty: merged_end.saturating_sub(1) <= wm,
        };
        for s in &list[first + 1..last] {
            self.parent[s.group] = merged.group;
        }
        list.splice(first..last, [merged]);
        self.any_dirty |= merged.dirty;
        self.next_due = self.next_due.min(merged_end.saturating_sub(1));
        Some(merged.group)
    }

    /// The surviving group of every group id.
    pub(crate) fn roots(&mut self) -> Vec<usize> {
        (0..self.parent.len())
            .map(|g| find(&mut self.parent, g))
            .collect()
    }

    /// Number of open sessions.
    pub(crate) fn len(&self) -> usize {
        self.sessions.iter().map(Vec::len).sum()
    }

    /// Bytes of bookkeeping.
    pub(crate) fn bytes(&self) -> usize {
        self.parent.len() * std::mem::size_of::<usize>()
            + self.len() * std::mem::size_of::<Session>()
    }
}

fn find(parent: &mut [usize], mut g: usize) -> usize {
    while parent[g] != g {
        parent[g] = parent[parent[g]];
        g = parent[g];
    }
    g
}

/// Rows buffered per session: batches with the session group of each row.
#[derive(Default)]
pub(crate) struct SessionRows {
    pub(crate) rows: Vec<(arrow::record_batch::RecordBatch, Vec<usize>)>,
}

/// What closing sessions produced: the bounds of every closed session, and
/// each buffered row set's closed rows with their session index.
pub(crate) struct Closed {
    pub(crate) bounds: Vec<(i64, i64)>,
    /// Per row set: the closed rows, and the index into `bounds` of each.
    pub(crate) rows: Vec<(Vec<arrow::record_batch::RecordBatch>, Vec<usize>)>,
}

impl SessionSet {
    /// Close every session whose end `watermark` has passed (for operators
    /// without lateness): renumber the open ones densely and move the rows
    /// of closed sessions out of `buffers`.
    pub(crate) fn close_buffered(
        &mut self,
        watermark: i64,
        buffers: &mut [&mut SessionRows],
    ) -> crate::Result<Closed> {
        use arrow::array::BooleanArray;
        use arrow::compute::filter_record_batch;
        const NONE: u32 = u32::MAX;
        let groups = self.parent.len();
        let roots = self.roots();
        let (mut closed, mut open) = (vec![NONE; groups], vec![NONE; groups]);
        let mut bounds = Vec::new();
        let (mut next_open, mut next_due) = (0usize, i64::MAX);
        for list in &mut self.sessions {
            list.retain_mut(|s| {
                if s.end.saturating_sub(1) <= watermark {
                    closed[s.group] = bounds.len() as u32;
                    bounds.push((s.start, s.end));
                    false
                } else {
                    open[s.group] = next_open as u32;
                    s.group = next_open;
                    next_open += 1;
                    next_due = next_due.min(s.end.saturating_sub(1));
                    true
                }
            });
        }
        let mut out = Vec::with_capacity(buffers.len());
        for buffer in buffers.iter_mut() {
            let (mut closed_batches, mut closed_ids, mut kept) =
                (Vec::new(), Vec::new(), Vec::new());
            for (batch, groups) in buffer.rows.drain(..) {
                let is_closed: BooleanArray = groups
                    .iter()
                    .map(|&g| Some(closed[roots[g]] != NONE))
                    .collect();
                if is_closed.true_count() > 0 {
                    closed_batches.push(filter_record_batch(&batch, &is_closed)?);
                    closed_ids.extend(
                        groups
                            .iter()
                            .filter(|&&g| closed[roots[g]] != NONE)
                            .map(|&g| closed[roots[g]] as usize),
                    );
                }
                if is_closed.true_count() < groups.len() {
                    let rest = filter_record_batch(&batch, &arrow::compute::not(&is_closed)?)?;
                    let rest_groups = groups
                        .iter()
                        .filter(|&&g| closed[roots[g]] == NONE)
                        .map(|&g| open[roots[g]] as usize)
                        .collect();
                    kept.push((rest, rest_groups));
                }
            }
            buffer.rows = kept;
            out.push((closed_batches, closed_ids));
        }
        self.parent = (0..next_open).collect();
        self.next_due = next_due;
        Ok(Closed { bounds, rows: out })
    }
}
