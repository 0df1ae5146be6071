//! The rows one side of the regular join keeps, per join key.
//!
//! A changelog side keeps each distinct row once, in Arrow's row format,
//! with how often it is in the input's table: a retraction finds its row by
//! its bytes. An append-only side never retracts, so its rows need not be
//! found again: they stay columnar, in the input's own batches (a
//! [`RowStore`] addressed by row id), and each is its own entry. Nothing
//! is encoded when they arrive and nothing decoded when they pair: the
//! other side's rows are gathered with one `interleave` per column.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::take;
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::row::{RowConverter, Rows, SortField};
use weir_core::Result;

use crate::row_store::RowStore;

/// A row of the batch being worked, as [`Side::add`] takes it.
#[derive(Clone, Copy)]
pub(crate) enum Incoming<'a> {
    Bytes(&'a [u8]),
    Stored(u32),
}

/// One distinct row of a changelog side under one key.
pub(crate) struct Entry {
    /// The row, row-encoded.
    row: Box<[u8]>,
    /// How often the row is in the input's table.
    count: u32,
    /// Rows of the other side it pairs with (outer sides only).
    assoc: u32,
    /// When it was last written (ms since the epoch, processing time).
    written: i64,
}

/// The rows of a side per key id. An entry is addressed by its key and its
/// place in the key's list: `(k, e)`.
enum Lists {
    /// A changelog side: each distinct row once, with its count.
    Rows(Vec<Vec<Entry>>),
    /// An append-only side: per key the store ids of its rows, each row its
    /// own entry (count 1). Partners and write times are kept by id, and
    /// only when they are read: for an outer side, and under a state TTL.
    /// Four bytes a row for an inner join without a TTL, where an
    /// [`Entry`] took 32.
    Ids {
        keys: Vec<Vec<u32>>,
        /// By id (an outer side; else empty).
        assoc: Vec<u32>,
        /// By id (under a TTL; else empty).
        written: Vec<i64>,
    },
}

pub(crate) struct Side {
    pub(crate) key_indices: Vec<usize>,
    pub(crate) width: usize,
    pub(crate) changelog: bool,
    pub(crate) outer: bool,
    /// Whether rows' write times are kept (a state TTL reads them).
    timed: bool,
    /// A changelog side's row format.
    converter: RowConverter,
    /// An append-only side's rows, by id.
    store: RowStore,
    /// Ids of the store free for new rows.
    free: Vec<u32>,
    /// The data columns' schema.
    pub(crate) schema: SchemaRef,
    lists: Lists,
    pub(crate) entries: usize,
    /// Bytes of the entries and of row-encoded rows (the store's own are
    /// added by [`Side::bytes`]).
    bytes: usize,
}

impl Side {
    /// A side of `input`'s rows keyed by `keys`; `timed`: a state TTL
    /// reads when rows were written.
    pub(crate) fn new(
        input: &SchemaRef,
        keys: &[String],
        outer: bool,
        timed: bool,
    ) -> Result<Self> {
        let changelog = weir_core::spec::is_changelog_schema(input);
        let width = input.fields().len() - usize::from(changelog);
        let fields: Vec<Field> = weir_core::join_spec::data_fields(input);
        let converter = RowConverter::new(
            fields
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )?;
        let schema = Arc::new(Schema::new(fields));
        let lists = if changelog {
            Lists::Rows(Vec::new())
        } else {
            Lists::Ids {
                keys: Vec::new(),
                assoc: Vec::new(),
                written: Vec::new(),
            }
        };
        Ok(Self {
            key_indices: crate::column_indices(input, keys)?,
            width,
            changelog,
            outer,
            timed,
            converter,
            store: RowStore::new(Arc::clone(&schema)),
            free: Vec::new(),
            schema,
            lists,
            entries: 0,
            bytes: 0,
        })
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        let lists = match &self.lists {
            Lists::Rows(keys) => keys.len() * std::mem::size_of::<Vec<Entry>>(),
            Lists::Ids {
                keys,
                assoc,
                written,
            } => {
                keys.len() * std::mem::size_of::<Vec<u32>>()
                    + self.entries * std::mem::size_of::<u32>()
                    + assoc.len() * std::mem::size_of::<u32>()
                    + written.len() * std::mem::size_of::<i64>()
            }
        };
        self.bytes + lists + self.store.bytes()
    }

    /// Key ids with a list (live or empty).
    pub(crate) fn key_count(&self) -> usize {
        match &self.lists {
            Lists::Rows(keys) => keys.len(),
            Lists::Ids { keys, .. } => keys.len(),
        }
    }

    /// Entries under key `k`.
    pub(crate) fn len_of(&self, k: usize) -> usize {
        match &self.lists {
            Lists::Rows(keys) => keys.get(k).map_or(0, Vec::len),
            Lists::Ids { keys, .. } => keys.get(k).map_or(0, Vec::len),
        }
    }

    /// Every entry, key by key.
    pub(crate) fn all(&self) -> Vec<(usize, usize)> {
        (0..self.key_count())
            .flat_map(|k| (0..self.len_of(k)).map(move |e| (k, e)))
            .collect()
    }

    /// How often entry `(k, e)`'s row is in the input's table.
    pub(crate) fn count(&self, (k, e): (usize, usize)) -> u32 {
        match &self.lists {
            Lists::Rows(keys) => keys[k][e].count,
            Lists::Ids { .. } => 1,
        }
    }

    /// Partners of entry `(k, e)` (an outer side's; 0 on an inner side).
    pub(crate) fn assoc(&self, (k, e): (usize, usize)) -> u32 {
        match &self.lists {
            Lists::Rows(keys) => keys[k][e].assoc,
            Lists::Ids { keys, assoc, .. } => assoc.get(keys[k][e] as usize).copied().unwrap_or(0),
        }
    }

    /// Set the partners of entry `(k, e)` (kept on an outer side only).
    pub(crate) fn set_assoc(&mut self, (k, e): (usize, usize), n: u32) {
        match &mut self.lists {
            Lists::Rows(keys) => keys[k][e].assoc = n,
            Lists::Ids { keys, assoc, .. } => {
                if let Some(a) = assoc.get_mut(keys[k][e] as usize) {
                    *a = n;
                }
            }
        }
    }

    /// When entry `(k, e)` was last written (`now` when write times are
    /// not kept: no TTL reads them).
    pub(crate) fn written(&self, (k, e): (usize, usize), now: i64) -> i64 {
        match &self.lists {
            Lists::Rows(keys) => keys[k][e].written,
            Lists::Ids { keys, written, .. } => {
                written.get(keys[k][e] as usize).copied().unwrap_or(now)
            }
        }
    }

    /// Keep only the keys `moved` gives a new id (`moved[old]`), `n` in all.
    pub(crate) fn renumber(&mut self, moved: &[Option<usize>], n: usize) {
        fn apply<T>(lists: &mut Vec<Vec<T>>, moved: &[Option<usize>], n: usize) {
            let mut keys: Vec<Vec<T>> = (0..n).map(|_| Vec::new()).collect();
            for (old, list) in lists.drain(..).enumerate() {
                if let Some(Some(new)) = moved.get(old) {
                    keys[*new] = list;
                }
            }
            *lists = keys;
        }
        match &mut self.lists {
            Lists::Rows(keys) => apply(keys, moved, n),
            Lists::Ids { keys, .. } => apply(keys, moved, n),
        }
    }

    /// The rows of `batch` (this side's input) as [`Side::add`] takes
    /// them: a changelog side's encoded; an append-only side's put in the
    /// store, their ids returned (`keep[r]` false: row `r` is not kept, a
    /// NULL key, and gets no id).
    pub(crate) fn take_in(&mut self, batch: &RecordBatch, keep: &[bool]) -> Result<Arriving> {
        let columns = &batch.columns()[..self.width];
        if self.changelog {
            return Ok(Arriving::Rows(self.converter.convert_columns(columns)?));
        }
        let mut ids = Vec::with_capacity(batch.num_rows());
        let mut slots = Vec::with_capacity(batch.num_rows());
        let mut next = self.store.len() as u32;
        for &k in keep {
            if k {
                let id = self.free.pop().unwrap_or_else(|| {
                    next += 1;
                    next - 1
                });
                ids.push(id as usize);
                slots.push(id);
            } else {
                slots.push(u32::MAX);
            }
        }
        if ids.len() == batch.num_rows() {
            self.store.put(&ids, columns.to_vec())?;
        } else if !ids.is_empty() {
            let mask = arrow::array::BooleanArray::from(keep.to_vec());
            let kept = columns
                .iter()
                .map(|c| arrow::compute::filter(c.as_ref(), &mask))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            self.store.put(&ids, kept)?;
        }
        Ok(Arriving::Ids(slots))
    }

    /// Add a row under key `key` with `assoc` partners, written at `now`.
    pub(crate) fn add(&mut self, key: usize, row: Incoming<'_>, assoc: u32, now: i64) {
        let (outer, timed) = (self.outer, self.timed);
        match (&mut self.lists, row) {
            (Lists::Rows(keys), Incoming::Bytes(b)) => {
                if keys.len() <= key {
                    keys.resize_with(key + 1, Vec::new);
                }
                let list = &mut keys[key];
                // A changelog's rows are found by their bytes (a scan of
                // the key's rows).
                if let Some(e) = list.iter_mut().find(|e| *e.row == *b) {
                    e.count += 1;
                    e.assoc = assoc;
                    e.written = now;
                    return;
                }
                self.entries += 1;
                self.bytes += b.len() + std::mem::size_of::<Entry>();
                list.push(Entry {
                    row: b.into(),
                    count: 1,
                    assoc,
                    written: now,
                });
            }
            // An append-only input's rows are each their own entry
            // (duplicates pair the same way).
            (
                Lists::Ids {
                    keys,
                    assoc: partners,
                    written,
                },
                Incoming::Stored(id),
            ) => {
                if keys.len() <= key {
                    keys.resize_with(key + 1, Vec::new);
                }
                keys[key].push(id);
                self.entries += 1;
                let at = id as usize;
                if outer {
                    if partners.len() <= at {
                        partners.resize(at + 1, 0);
                    }
                    partners[at] = assoc;
                }
                if timed {
                    if written.len() <= at {
                        written.resize(at + 1, 0);
                    }
                    written[at] = now;
                }
            }
            _ => debug_assert!(false, "a join side holds rows of one kind"),
        }
    }

    /// Take one of a changelog side's row `row` under `key` back.
    pub(crate) fn retract(&mut self, key: usize, row: &[u8], now: i64) {
        let Lists::Rows(keys) = &mut self.lists else {
            return;
        };
        let Some(list) = keys.get_mut(key) else {
            return;
        };
        if let Some(i) = list.iter().position(|e| *e.row == *row) {
            list[i].count -= 1;
            list[i].written = now;
            if list[i].count == 0 {
                let e = list.swap_remove(i);
                self.entries -= 1;
                self.bytes -= e.row.len() + std::mem::size_of::<Entry>();
            }
        }
    }

    /// Drop rows last written before `cutoff` (nothing when write times
    /// are not kept).
    pub(crate) fn expire(&mut self, cutoff: i64) {
        match &mut self.lists {
            Lists::Rows(keys) => {
                for list in keys {
                    for e in list.extract_if(.., |e| e.written < cutoff) {
                        self.entries -= 1;
                        self.bytes -= e.row.len() + std::mem::size_of::<Entry>();
                    }
                }
            }
            Lists::Ids { keys, written, .. } => {
                if written.is_empty() {
                    return;
                }
                for list in keys {
                    for id in list.extract_if(.., |id| written[*id as usize] < cutoff) {
                        self.entries -= 1;
                        self.store.remove(id as usize);
                        self.free.push(id);
                    }
                }
            }
        }
    }

    /// The data columns of the entries `picks` (`None`: a row of NULLs).
    pub(crate) fn gather(
        &self,
        picks: impl Iterator<Item = Option<(usize, usize)>>,
    ) -> Result<Vec<ArrayRef>> {
        let all: Vec<usize> = (0..self.schema.fields().len()).collect();
        self.gather_columns(picks, &all)
    }

    /// Data columns `columns` of the entries `picks` (a changelog side's
    /// rows are decoded whole, then the columns picked).
    pub(crate) fn gather_columns(
        &self,
        picks: impl Iterator<Item = Option<(usize, usize)>>,
        columns: &[usize],
    ) -> Result<Vec<ArrayRef>> {
        match &self.lists {
            Lists::Rows(keys) => {
                let decoded = decode_picks(
                    &self.converter,
                    picks.map(|p| p.map(|(k, e)| &*keys[k][e].row)),
                )?;
                Ok(columns.iter().map(|&c| Arc::clone(&decoded[c])).collect())
            }
            Lists::Ids { keys, .. } => {
                let (present, idx) = present(picks.map(|p| p.map(|(k, e)| keys[k][e] as usize)));
                spread(self.store.gather_columns(&present, columns)?, idx)
            }
        }
    }
}

/// A batch's rows as a side takes them in.
pub(crate) enum Arriving {
    Rows(Rows),
    /// Per row its id in the store (`u32::MAX`: not kept).
    Ids(Vec<u32>),
}

impl Arriving {
    pub(crate) fn row(&self, r: usize) -> Incoming<'_> {
        match self {
            Arriving::Rows(rows) => Incoming::Bytes(rows.row(r).data()),
            Arriving::Ids(ids) => Incoming::Stored(ids[r]),
        }
    }
}

/// The picks that are rows, and per pick its place among them (`None`: a
/// row of NULLs).
fn present<T>(picks: impl Iterator<Item = Option<T>>) -> (Vec<T>, Vec<Option<u32>>) {
    let mut present = Vec::new();
    let idx = picks
        .map(|p| {
            p.map(|row| {
                present.push(row);
                present.len() as u32 - 1
            })
        })
        .collect();
    (present, idx)
}

/// Columns of the present rows spread over every pick by `idx` (NULL rows
/// where it is `None`).
fn spread(columns: Vec<ArrayRef>, idx: Vec<Option<u32>>) -> Result<Vec<ArrayRef>> {
    if idx.iter().all(Option::is_some) {
        return Ok(columns);
    }
    let idx = UInt32Array::from(idx);
    Ok(columns
        .iter()
        .map(|c| take(c.as_ref(), &idx, None))
        .collect::<std::result::Result<Vec<_>, _>>()?)
}

/// Columns of rows in `converter`'s row format, one per pick (`None`: a
/// row of NULLs), decoded in one call and spread by `take`.
pub(crate) fn decode_picks<'a>(
    converter: &RowConverter,
    picks: impl Iterator<Item = Option<&'a [u8]>>,
) -> Result<Vec<ArrayRef>> {
    let parser = converter.parser();
    let (present, idx) = present(picks);
    spread(
        converter.convert_rows(present.iter().map(|r| parser.parse(r)))?,
        idx,
    )
}
