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

/// Where an entry's row is.
pub(crate) enum Held {
    /// Row-encoded (a changelog side).
    Bytes(Box<[u8]>),
    /// Row id in the side's store (an append-only side).
    Stored(u32),
}

/// A row of the batch being worked, as [`Side::add`] takes it.
#[derive(Clone, Copy)]
pub(crate) enum Incoming<'a> {
    Bytes(&'a [u8]),
    Stored(u32),
}

/// One distinct row of a side under one key.
pub(crate) struct Entry {
    pub(crate) row: Held,
    /// How often the row is in the input's table.
    pub(crate) count: u32,
    /// Rows of the other side it pairs with (outer sides only).
    pub(crate) assoc: u32,
    /// When it was last written (ms since the epoch, processing time).
    pub(crate) written: i64,
}

pub(crate) struct Side {
    pub(crate) key_indices: Vec<usize>,
    pub(crate) width: usize,
    pub(crate) changelog: bool,
    pub(crate) outer: bool,
    /// A changelog side's row format.
    converter: RowConverter,
    /// An append-only side's rows, by id.
    store: RowStore,
    /// Ids of the store free for new rows.
    free: Vec<u32>,
    /// The data columns' schema.
    pub(crate) schema: SchemaRef,
    /// Per key id, its distinct rows.
    pub(crate) keys: Vec<Vec<Entry>>,
    pub(crate) entries: usize,
    /// Bytes of the entries and of row-encoded rows (the store's own are
    /// added by [`Side::bytes`]).
    bytes: usize,
}

impl Side {
    pub(crate) fn new(input: &SchemaRef, keys: &[String], outer: bool) -> Result<Self> {
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
        Ok(Self {
            key_indices: crate::column_indices(input, keys)?,
            width,
            changelog,
            outer,
            converter,
            store: RowStore::new(Arc::clone(&schema)),
            free: Vec::new(),
            schema,
            keys: Vec::new(),
            entries: 0,
            bytes: 0,
        })
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes + self.store.bytes()
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

    pub(crate) fn add(&mut self, key: usize, row: Incoming<'_>, assoc: u32, now: i64) {
        if self.keys.len() <= key {
            self.keys.resize_with(key + 1, Vec::new);
        }
        let list = &mut self.keys[key];
        // A changelog's rows are found by their bytes (a scan of the key's
        // rows); an append-only input's each are their own entry
        // (duplicates pair the same way).
        let found = match row {
            Incoming::Bytes(b) => list
                .iter_mut()
                .find(|e| matches!(&e.row, Held::Bytes(r) if **r == *b)),
            Incoming::Stored(_) => None,
        };
        match found {
            Some(e) => {
                e.count += 1;
                e.assoc = assoc;
                e.written = now;
            }
            None => {
                self.entries += 1;
                let row = match row {
                    Incoming::Bytes(b) => {
                        self.bytes += b.len();
                        Held::Bytes(b.into())
                    }
                    Incoming::Stored(id) => Held::Stored(id),
                };
                self.bytes += std::mem::size_of::<Entry>();
                list.push(Entry {
                    row,
                    count: 1,
                    assoc,
                    written: now,
                });
            }
        }
    }

    pub(crate) fn retract(&mut self, key: usize, row: &[u8], now: i64) {
        let Some(list) = self.keys.get_mut(key) else {
            return;
        };
        let at = list
            .iter()
            .position(|e| matches!(&e.row, Held::Bytes(r) if **r == *row));
        if let Some(i) = at {
            list[i].count -= 1;
            list[i].written = now;
            if list[i].count == 0 {
                let e = list.swap_remove(i);
                self.entries -= 1;
                self.forget(e.row);
            }
        }
    }

    /// Account for an entry's row leaving.
    fn forget(&mut self, row: Held) {
        self.bytes -= std::mem::size_of::<Entry>();
        match row {
            Held::Bytes(b) => self.bytes -= b.len(),
            Held::Stored(id) => {
                self.store.remove(id as usize);
                self.free.push(id);
            }
        }
    }

    /// Drop rows last written before `cutoff`.
    pub(crate) fn expire(&mut self, cutoff: i64) {
        let mut gone = Vec::new();
        for list in &mut self.keys {
            gone.extend(list.extract_if(.., |e| e.written < cutoff).map(|e| e.row));
        }
        self.entries -= gone.len();
        for row in gone {
            self.forget(row);
        }
    }

    /// The data columns of the entries `picks` (`None`: a row of NULLs),
    /// each `times` over (None: once).
    pub(crate) fn gather<'a>(
        &'a self,
        picks: impl Iterator<Item = Option<&'a Entry>>,
    ) -> Result<Vec<ArrayRef>> {
        let mixed =
            || weir_core::WeirError::Execution("a join side holds rows of two kinds".into());
        if self.changelog {
            let bytes = picks
                .map(|p| match p.map(|e| &e.row) {
                    Some(Held::Bytes(b)) => Ok(Some(&**b)),
                    Some(Held::Stored(_)) => Err(mixed()),
                    None => Ok(None),
                })
                .collect::<Result<Vec<_>>>()?;
            return decode_picks(&self.converter, bytes.into_iter());
        }
        let ids = picks
            .map(|p| match p.map(|e| &e.row) {
                Some(Held::Stored(id)) => Ok(Some(*id as usize)),
                Some(Held::Bytes(_)) => Err(mixed()),
                None => Ok(None),
            })
            .collect::<Result<Vec<_>>>()?;
        let (present, idx) = present(ids.into_iter());
        spread(self.store.gather(&present)?, idx)
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
