//! Keyed process functions: user logic with per-key state and timers.
//!
//! A [`KeyedProcessFunction`] receives whole batches of one subtask's key
//! groups together with a dense id per row's key (`ctx.key_ids()`); state
//! lives in the function's own [`ValueState`], [`ListState`] and
//! [`MapState`] fields, indexed by those ids. Timers are registered per key
//! and fire — in event time when the watermark passes them, in processing
//! time by the wall clock — in timestamp order, in batches.
//!
//! ```
//! use weir_core::process::{KeyedProcessFunction, ProcessContext, ValueState, FiredTimers};
//! use arrow::record_batch::RecordBatch;
//!
//! /// Counts rows per key.
//! #[derive(Default)]
//! struct Count { seen: ValueState<u64> }
//!
//! impl KeyedProcessFunction for Count {
//!     fn process_batch(&mut self, _batch: &RecordBatch, ctx: &mut ProcessContext) -> weir_core::Result<()> {
//!         for &k in ctx.key_ids() {
//!             let n = self.seen.get(k).copied().unwrap_or(0);
//!             self.seen.set(k, n + 1);
//!         }
//!         Ok(())
//!     }
//! }
//! ```

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;

use arrow::array::ArrayRef;
use arrow::record_batch::RecordBatch;

use crate::error::{Result, WeirError};

mod snapshot;
pub use snapshot::{StateReader, StateWriter, is_keyed_table, is_operator_table, is_union_table};

/// Dense id of a key within one operator instance (stable for its lifetime).
pub type KeyId = u32;

/// Wall-clock time in ms since the epoch (the clock of state TTL).
pub fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// One value per key, optionally expiring a processing-time TTL after it
/// was last written (Flink's `StateTtlConfig` with `OnCreateAndWrite`):
/// an expired value reads as absent, and [`Self::expire`] frees it.
#[derive(Debug, Clone)]
pub struct ValueState<T> {
    values: Vec<Option<T>>,
    ttl_ms: Option<i64>,
    written: Vec<i64>,
}

impl<T> Default for ValueState<T> {
    fn default() -> Self {
        Self {
            values: Vec::new(),
            ttl_ms: None,
            written: Vec::new(),
        }
    }
}

impl<T> ValueState<T> {
    /// A state whose values expire `ttl` after they were written.
    pub fn with_ttl(ttl: std::time::Duration) -> Self {
        Self {
            ttl_ms: Some(ttl.as_millis() as i64),
            ..Self::default()
        }
    }

    fn live(&self, i: usize, now: i64) -> bool {
        match self.ttl_ms {
            Some(ttl) => self.written.get(i).is_some_and(|&w| now - w < ttl),
            None => true,
        }
    }

    /// The key's value (absent once expired).
    pub fn get(&self, key: KeyId) -> Option<&T> {
        let i = key as usize;
        let v = self.values.get(i).and_then(Option::as_ref)?;
        if self.ttl_ms.is_some() && !self.live(i, wall_clock_ms()) {
            return None;
        }
        Some(v)
    }

    /// Set the key's value.
    pub fn set(&mut self, key: KeyId, value: T) {
        let i = key as usize;
        if self.values.len() <= i {
            self.values.resize_with(i + 1, || None);
        }
        self.values[i] = Some(value);
        if self.ttl_ms.is_some() {
            if self.written.len() <= i {
                self.written.resize(i + 1, 0);
            }
            self.written[i] = wall_clock_ms();
        }
    }

    /// Free the values whose TTL has passed at `now` (ms since the epoch);
    /// returns how many were freed. Without a TTL nothing expires.
    pub fn expire(&mut self, now: i64) -> usize {
        if self.ttl_ms.is_none() {
            return 0;
        }
        let mut freed = 0;
        for i in 0..self.values.len() {
            if self.values[i].is_some() && !self.live(i, now) {
                self.values[i] = None;
                freed += 1;
            }
        }
        freed
    }

    /// Remove the key's value.
    pub fn clear(&mut self, key: KeyId) -> Option<T> {
        self.values.get_mut(key as usize).and_then(Option::take)
    }

    /// Number of keys holding a value (including expired ones not yet freed).
    pub fn len(&self) -> usize {
        self.values.iter().filter(|v| v.is_some()).count()
    }

    /// Whether no key holds a value.
    pub fn is_empty(&self) -> bool {
        self.values.iter().all(Option::is_none)
    }
}

/// A list per key. With a TTL, each element expires that long after it
/// was added (Flink's per-element list TTL).
#[derive(Debug, Clone)]
pub struct ListState<T> {
    lists: HashMap<KeyId, Vec<(T, i64)>>,
    ttl_ms: Option<i64>,
}

impl<T> Default for ListState<T> {
    fn default() -> Self {
        Self {
            lists: HashMap::new(),
            ttl_ms: None,
        }
    }
}

impl<T> ListState<T> {
    /// A state whose elements expire `ttl` after they were added.
    pub fn with_ttl(ttl: std::time::Duration) -> Self {
        Self {
            lists: HashMap::new(),
            ttl_ms: Some(ttl.as_millis() as i64),
        }
    }

    fn now(&self) -> i64 {
        if self.ttl_ms.is_some() {
            wall_clock_ms()
        } else {
            0
        }
    }

    fn live(&self, written: i64, now: i64) -> bool {
        self.ttl_ms.is_none_or(|ttl| now - written < ttl)
    }

    /// The key's unexpired elements, in insertion order.
    pub fn get(&self, key: KeyId) -> impl Iterator<Item = &T> {
        let now = self.now();
        self.lists
            .get(&key)
            .into_iter()
            .flatten()
            .filter(move |(_, w)| self.live(*w, now))
            .map(|(v, _)| v)
    }

    /// Append to the key's list.
    pub fn add(&mut self, key: KeyId, value: T) {
        let now = self.now();
        self.lists.entry(key).or_default().push((value, now));
    }

    /// Replace the key's list.
    pub fn update(&mut self, key: KeyId, values: Vec<T>) {
        if values.is_empty() {
            self.lists.remove(&key);
        } else {
            let now = self.now();
            self.lists
                .insert(key, values.into_iter().map(|v| (v, now)).collect());
        }
    }

    /// Remove and return the key's unexpired elements.
    pub fn clear(&mut self, key: KeyId) -> Vec<T> {
        let now = self.now();
        let ttl = self.ttl_ms;
        self.lists
            .remove(&key)
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, w)| ttl.is_none_or(|t| now - w < t))
            .map(|(v, _)| v)
            .collect()
    }

    /// Free expired elements at `now`; returns how many.
    pub fn expire(&mut self, now: i64) -> usize {
        let Some(ttl) = self.ttl_ms else { return 0 };
        let mut freed = 0;
        self.lists.retain(|_, list| {
            let before = list.len();
            list.retain(|(_, w)| now - w < ttl);
            freed += before - list.len();
            !list.is_empty()
        });
        freed
    }

    /// Number of keys holding a list.
    pub fn len(&self) -> usize {
        self.lists.len()
    }

    /// Whether no key holds a list.
    pub fn is_empty(&self) -> bool {
        self.lists.is_empty()
    }
}

/// A map per key. With a TTL, each entry expires that long after it was
/// last put (Flink's per-entry map TTL).
#[derive(Debug, Clone)]
pub struct MapState<K, V> {
    maps: HashMap<KeyId, HashMap<K, (V, i64)>>,
    ttl_ms: Option<i64>,
}

impl<K, V> Default for MapState<K, V> {
    fn default() -> Self {
        Self {
            maps: HashMap::new(),
            ttl_ms: None,
        }
    }
}

impl<K: Eq + Hash, V> MapState<K, V> {
    /// A state whose entries expire `ttl` after they were last put.
    pub fn with_ttl(ttl: std::time::Duration) -> Self {
        Self {
            maps: HashMap::new(),
            ttl_ms: Some(ttl.as_millis() as i64),
        }
    }

    fn now(&self) -> i64 {
        if self.ttl_ms.is_some() {
            wall_clock_ms()
        } else {
            0
        }
    }

    fn live(&self, written: i64, now: i64) -> bool {
        self.ttl_ms.is_none_or(|ttl| now - written < ttl)
    }

    /// The value under `entry` for the key.
    pub fn get(&self, key: KeyId, entry: &K) -> Option<&V> {
        let (v, w) = self.maps.get(&key)?.get(entry)?;
        self.live(*w, self.now()).then_some(v)
    }

    /// Put `value` under `entry` for the key.
    pub fn put(&mut self, key: KeyId, entry: K, value: V) {
        let now = self.now();
        self.maps
            .entry(key)
            .or_default()
            .insert(entry, (value, now));
    }

    /// Remove `entry` for the key.
    pub fn remove(&mut self, key: KeyId, entry: &K) -> Option<V> {
        let map = self.maps.get_mut(&key)?;
        let v = map.remove(entry).map(|(v, _)| v);
        if map.is_empty() {
            self.maps.remove(&key);
        }
        v
    }

    /// The key's unexpired entries.
    pub fn entries(&self, key: KeyId) -> impl Iterator<Item = (&K, &V)> {
        let now = self.now();
        self.maps
            .get(&key)
            .into_iter()
            .flat_map(|m| m.iter())
            .filter(move |(_, (_, w))| self.live(*w, now))
            .map(|(k, (v, _))| (k, v))
    }

    /// Number of unexpired entries for the key.
    pub fn entry_count(&self, key: KeyId) -> usize {
        self.entries(key).count()
    }

    /// Remove the key's map.
    pub fn clear(&mut self, key: KeyId) {
        self.maps.remove(&key);
    }

    /// Free expired entries at `now`; returns how many.
    pub fn expire(&mut self, now: i64) -> usize {
        let Some(ttl) = self.ttl_ms else { return 0 };
        let mut freed = 0;
        self.maps.retain(|_, map| {
            let before = map.len();
            map.retain(|_, (_, w)| now - *w < ttl);
            freed += before - map.len();
            !map.is_empty()
        });
        freed
    }

    /// Number of keys holding a map.
    pub fn len(&self) -> usize {
        self.maps.len()
    }

    /// Whether no key holds a map.
    pub fn is_empty(&self) -> bool {
        self.maps.is_empty()
    }
}

/// Event-time and processing-time timers per key.
#[derive(Debug, Default, Clone)]
pub struct TimerService {
    event_time: BTreeSet<(i64, KeyId)>,
    processing_time: BTreeSet<(i64, KeyId)>,
}

impl TimerService {
    /// Fire `key`'s event-time timer when the watermark reaches `timestamp`.
    /// Registering the same (key, timestamp) twice keeps one timer.
    pub fn register_event_time_timer(&mut self, key: KeyId, timestamp: i64) {
        self.event_time.insert((timestamp, key));
    }

    /// Delete an event-time timer.
    pub fn delete_event_time_timer(&mut self, key: KeyId, timestamp: i64) {
        self.event_time.remove(&(timestamp, key));
    }

    /// Fire `key`'s processing-time timer when the wall clock (ms since the
    /// epoch) reaches `timestamp`.
    pub fn register_processing_time_timer(&mut self, key: KeyId, timestamp: i64) {
        self.processing_time.insert((timestamp, key));
    }

    /// Delete a processing-time timer.
    pub fn delete_processing_time_timer(&mut self, key: KeyId, timestamp: i64) {
        self.processing_time.remove(&(timestamp, key));
    }

    /// Remove and return the event-time timers due at `watermark`, in order.
    pub fn take_event_time(&mut self, watermark: i64) -> Vec<(i64, KeyId)> {
        take_due(&mut self.event_time, watermark)
    }

    /// Remove and return the processing-time timers due at `now`, in order.
    pub fn take_processing_time(&mut self, now: i64) -> Vec<(i64, KeyId)> {
        take_due(&mut self.processing_time, now)
    }

    /// The earliest processing-time timer.
    pub fn next_processing_time(&self) -> Option<i64> {
        self.processing_time.first().map(|t| t.0)
    }

    /// Every registered timer: `(domain, timestamp, key)`.
    pub fn iter(&self) -> impl Iterator<Item = (TimeDomain, i64, KeyId)> + '_ {
        let event = self
            .event_time
            .iter()
            .map(|&(t, k)| (TimeDomain::EventTime, t, k));
        let processing = self
            .processing_time
            .iter()
            .map(|&(t, k)| (TimeDomain::ProcessingTime, t, k));
        event.chain(processing)
    }

    /// Registered timers (event time, processing time).
    pub fn len(&self) -> (usize, usize) {
        (self.event_time.len(), self.processing_time.len())
    }
}

fn take_due(timers: &mut BTreeSet<(i64, KeyId)>, until: i64) -> Vec<(i64, KeyId)> {
    if until == i64::MAX {
        return std::mem::take(timers).into_iter().collect();
    }
    let rest = timers.split_off(&(until + 1, 0));
    std::mem::replace(timers, rest).into_iter().collect()
}

/// Which clock a batch of fired timers belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeDomain {
    /// Fired by the watermark.
    EventTime,
    /// Fired by the wall clock.
    ProcessingTime,
}

/// Timers that fired together, in timestamp order.
#[derive(Debug, Clone)]
pub struct FiredTimers {
    /// Event or processing time.
    pub domain: TimeDomain,
    /// `(timestamp, key)` pairs.
    pub timers: Vec<(i64, KeyId)>,
}

/// What a process function sees of its operator: the current batch's key
/// ids, key values, timers, time, and where to emit.
pub struct ProcessContext<'a> {
    pub(crate) key_ids: &'a [KeyId],
    pub(crate) key_values: &'a dyn Fn(&[KeyId]) -> Result<Vec<ArrayRef>>,
    /// Timers of this operator instance.
    pub timers: &'a mut TimerService,
    pub(crate) watermark: i64,
    pub(crate) processing_time: i64,
    pub(crate) output: Vec<RecordBatch>,
    pub(crate) side_output: Vec<(String, RecordBatch)>,
}

impl<'a> ProcessContext<'a> {
    /// A context (built by the operator runtime).
    pub fn new(
        key_ids: &'a [KeyId],
        key_values: &'a dyn Fn(&[KeyId]) -> Result<Vec<ArrayRef>>,
        timers: &'a mut TimerService,
        watermark: i64,
        processing_time: i64,
    ) -> Self {
        Self {
            key_ids,
            key_values,
            timers,
            watermark,
            processing_time,
            output: Vec::new(),
            side_output: Vec::new(),
        }
    }

    /// The key id of every row of the current batch (empty in `on_timers`).
    pub fn key_ids(&self) -> &[KeyId] {
        self.key_ids
    }

    /// The key column values of `keys`, one array per key column.
    pub fn key_values(&self, keys: &[KeyId]) -> Result<Vec<ArrayRef>> {
        (self.key_values)(keys)
    }

    /// The operator's current watermark.
    pub fn current_watermark(&self) -> i64 {
        self.watermark
    }

    /// Wall-clock time in ms since the epoch.
    pub fn current_processing_time(&self) -> i64 {
        self.processing_time
    }

    /// Emit a batch on the main output (it must have the declared schema).
    pub fn emit(&mut self, batch: RecordBatch) {
        self.output.push(batch);
    }

    /// Emit a batch on a declared side output.
    pub fn emit_side(&mut self, tag: &str, batch: RecordBatch) {
        self.side_output.push((tag.to_string(), batch));
    }

    /// Take what was emitted: main batches and side batches.
    pub fn into_outputs(self) -> (Vec<RecordBatch>, Vec<(String, RecordBatch)>) {
        (self.output, self.side_output)
    }
}

/// User logic over keyed batches with state and timers (Flink's
/// `KeyedProcessFunction`). Rows of a batch arrive in input order.
pub trait KeyedProcessFunction: Send {
    /// Handle a batch; `ctx.key_ids()[i]` is row `i`'s key.
    fn process_batch(&mut self, batch: &RecordBatch, ctx: &mut ProcessContext) -> Result<()>;

    /// Handle timers that fired, in timestamp order.
    fn on_timers(&mut self, _timers: &FiredTimers, _ctx: &mut ProcessContext) -> Result<()> {
        Ok(())
    }

    /// Background state cleanup, called about once a second with the wall
    /// clock: expire TTL state here (e.g. `self.seen.expire(now)`).
    fn cleanup(&mut self, _now_ms: i64) {}

    /// Write the function's state for a checkpoint (Flink's
    /// `CheckpointedFunction::snapshotState`): every keyed state, operator
    /// list, union list and broadcast state it keeps, by name — see
    /// [`StateWriter`]. Timers are snapshotted by the operator. The default
    /// refuses, so a function that keeps state it does not write declines
    /// checkpoints instead of losing that state on restore.
    fn snapshot_state(&self, _state: &mut StateWriter) -> Result<()> {
        Err(unsnapshotted())
    }

    /// Read back what [`Self::snapshot_state`] wrote, by the same names.
    fn restore_state(&mut self, state: &mut StateReader) -> Result<()> {
        refuse_restore(state)
    }
}

/// User logic over two connected inputs sharing keyed state and timers
/// (Flink's `KeyedCoProcessFunction`, and with a broadcast second input its
/// `KeyedBroadcastProcessFunction`). For a broadcast input `ctx.key_ids()` is
/// empty: every subtask sees every broadcast batch, and state the function
/// derives from it is the same on all subtasks by construction.
pub trait CoProcessFunction: Send {
    /// A batch of the first (keyed) input.
    fn process_batch1(&mut self, batch: &RecordBatch, ctx: &mut ProcessContext) -> Result<()>;
    /// A batch of the second input (keyed, or broadcast).
    fn process_batch2(&mut self, batch: &RecordBatch, ctx: &mut ProcessContext) -> Result<()>;
    /// Timers that fired, in timestamp order.
    fn on_timers(&mut self, _timers: &FiredTimers, _ctx: &mut ProcessContext) -> Result<()> {
        Ok(())
    }

    /// Background state cleanup, called about once a second (see
    /// [`KeyedProcessFunction::cleanup`]).
    fn cleanup(&mut self, _now_ms: i64) {}

    /// Write the function's state for a checkpoint (see
    /// [`KeyedProcessFunction::snapshot_state`]); broadcast state goes in
    /// with [`StateWriter::broadcast`].
    fn snapshot_state(&self, _state: &mut StateWriter) -> Result<()> {
        Err(unsnapshotted())
    }

    /// Read back what [`Self::snapshot_state`] wrote.
    fn restore_state(&mut self, state: &mut StateReader) -> Result<()> {
        refuse_restore(state)
    }
}

fn unsnapshotted() -> WeirError {
    WeirError::Execution(
        "the process function does not snapshot its state (implement snapshot_state and \
         restore_state to take part in checkpoints)"
            .into(),
    )
}

fn refuse_restore(state: &StateReader) -> Result<()> {
    if state.is_empty() {
        return Ok(());
    }
    Err(WeirError::Execution(
        "the checkpoint holds state of this process function, which does not implement \
         restore_state"
            .into(),
    ))
}

/// A function over every row of a fired window (Flink's
/// `ProcessWindowFunction`), called once per window firing with the rows of
/// all its keys: the rows of the `i`-th key are `rows.slice(r.start, r.len())`
/// for `r = key_ranges[i]`, in arrival order. It returns output batches of the
/// declared schema.
pub trait ProcessWindowFunction: Send + Sync {
    /// Process window `[start, end)`.
    fn process(
        &self,
        window: (i64, i64),
        rows: &RecordBatch,
        key_ranges: &[std::ops::Range<usize>],
    ) -> Result<Vec<RecordBatch>>;
}

impl<F> ProcessWindowFunction for F
where
    F: Fn((i64, i64), &RecordBatch, &[std::ops::Range<usize>]) -> Result<Vec<RecordBatch>>
        + Send
        + Sync,
{
    fn process(
        &self,
        window: (i64, i64),
        rows: &RecordBatch,
        key_ranges: &[std::ops::Range<usize>],
    ) -> Result<Vec<RecordBatch>> {
        self(window, rows, key_ranges)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_fire_in_order_up_to_the_watermark() {
        let mut t = TimerService::default();
        t.register_event_time_timer(2, 10);
        t.register_event_time_timer(1, 5);
        t.register_event_time_timer(1, 5);
        t.register_event_time_timer(3, 11);
        t.delete_event_time_timer(3, 11);
        assert_eq!(t.take_event_time(10), vec![(5, 1), (10, 2)]);
        assert_eq!(t.len(), (0, 0));
        t.register_event_time_timer(9, i64::MAX);
        assert_eq!(t.take_event_time(i64::MAX), vec![(i64::MAX, 9)]);
    }

    #[test]
    fn ttl_values_expire_on_read_and_in_cleanup() {
        let mut v = ValueState::with_ttl(std::time::Duration::from_millis(30));
        v.set(1, 10);
        assert_eq!(v.get(1), Some(&10));
        std::thread::sleep(std::time::Duration::from_millis(40));
        assert_eq!(v.get(1), None, "expired on read");
        assert_eq!(v.expire(wall_clock_ms()), 1, "freed by cleanup");
        v.set(1, 11);
        assert_eq!(v.get(1), Some(&11), "a write renews it");
        assert_eq!(v.expire(wall_clock_ms()), 0);
    }

    #[test]
    fn list_and_map_entries_expire_one_by_one() {
        let ttl = std::time::Duration::from_millis(30);
        let (mut l, mut m) = (ListState::with_ttl(ttl), MapState::with_ttl(ttl));
        l.add(1, "old");
        m.put(1, "old", 1);
        std::thread::sleep(std::time::Duration::from_millis(40));
        l.add(1, "new");
        m.put(1, "new", 2);
        assert_eq!(l.get(1).copied().collect::<Vec<_>>(), vec!["new"]);
        assert_eq!(m.entry_count(1), 1);
        assert_eq!(m.get(1, &"old"), None);
        let now = wall_clock_ms();
        assert_eq!((l.expire(now), m.expire(now)), (1, 1));
    }

    #[test]
    fn states_are_per_key() {
        let mut v = ValueState::default();
        v.set(3, "a");
        assert_eq!(v.get(3), Some(&"a"));
        assert_eq!(v.get(1), None);
        let mut m = MapState::default();
        m.put(1, "x", 1);
        m.put(1, "y", 2);
        m.put(2, "x", 3);
        assert_eq!(m.entry_count(1), 2);
        assert_eq!(m.remove(2, &"x"), Some(3));
        assert_eq!(m.len(), 1);
        let mut l = ListState::default();
        l.add(1, 5);
        l.add(1, 6);
        assert_eq!(l.get(1).copied().collect::<Vec<_>>(), vec![5, 6]);
        assert_eq!(l.clear(1), vec![5, 6]);
        assert!(l.is_empty());
    }
}
