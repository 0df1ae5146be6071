//! Checkpointing a process function's state (Flink's `CheckpointedFunction`
//! together with its keyed state backend).
//!
//! A process function names the states it wants in a checkpoint in
//! [`KeyedProcessFunction::snapshot_state`](super::KeyedProcessFunction::snapshot_state)
//! and reads them back, by the same names, in `restore_state`:
//!
//! ```
//! use weir_core::process::{StateReader, StateWriter, ValueState};
//! # struct Count { seen: ValueState<u64>, log: Vec<String> }
//! # impl Count {
//! fn snapshot_state(&self, state: &mut StateWriter) -> weir_core::Result<()> {
//!     state.value("seen", &self.seen)?;
//!     state.operator_list("log", &self.log)
//! }
//! fn restore_state(&mut self, state: &mut StateReader) -> weir_core::Result<()> {
//!     state.value("seen", &mut self.seen)?;
//!     self.log = state.operator_list("log")?;
//!     Ok(())
//! }
//! # }
//! ```
//!
//! Each state becomes one table of the operator's snapshot (one Parquet file
//! per subtask in the checkpoint directory). Values are stored as JSON text
//! (`serde`), so any type that derives `Serialize`/`Deserialize` can be kept,
//! and any Parquet reader can look at them (DuckDB: `json_extract(value, …)`).
//!
//! | table | columns |
//! |---|---|
//! | `value.NAME` | key columns, `value` (JSON), `written_ms` |
//! | `list.NAME` | key columns, `value` (JSON), `written_ms` — one row per element, in order |
//! | `map.NAME` | key columns, `entry` (JSON), `value` (JSON), `written_ms` |
//! | `oplist.NAME` | `subtask`, `parallelism`, `value` (JSON) — one row per element |
//! | `union.NAME` | as `oplist` |
//! | `broadcast.NAME` | `subtask`, `parallelism`, `value` (JSON) — one row |
//!
//! `written_ms` is the wall-clock write time state TTL counts from (0 without
//! a TTL). On restore, keyed rows go to the subtask owning their key group;
//! operator list state (`oplist`) is split evenly over the new subtasks
//! (contiguous ranges of the old subtasks' elements in subtask order); union
//! list state (`union`) gives every subtask all elements of all old
//! subtasks; broadcast state gives each subtask the copy of old subtask
//! `i mod old parallelism` (all copies are equal by construction).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, Int64Array, StringArray, UInt32Array};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, UInt32Type};
use arrow::record_batch::RecordBatch;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{KeyId, ListState, MapState, ValueState};
use crate::error::{Result, WeirError};

/// Table-name prefixes of keyed state (key columns first).
const KEYED: [&str; 3] = ["value.", "list.", "map."];
/// Table-name prefixes of operator-scoped state.
const SCOPED: [&str; 3] = ["oplist.", "union.", "broadcast."];

/// Whether a snapshot table holds keyed state (key columns first, rows
/// routed by key group on restore).
pub fn is_keyed_table(name: &str) -> bool {
    KEYED.iter().any(|p| name.starts_with(p))
}

/// Whether a snapshot table holds operator-scoped state of a process function.
pub fn is_operator_table(name: &str) -> bool {
    SCOPED.iter().any(|p| name.starts_with(p))
}

/// Whether every old subtask's copy of this table must reach every subtask
/// on restore, even at an unchanged parallelism (union list state).
pub fn is_union_table(name: &str) -> bool {
    name.starts_with("union.")
}

fn encode<T: Serialize>(state: &str, v: &T) -> Result<String> {
    serde_json::to_string(v)
        .map_err(|e| WeirError::Execution(format!("state '{state}': cannot encode a value: {e}")))
}

fn decode<T: DeserializeOwned>(state: &str, text: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|e| {
        WeirError::Execution(format!(
            "state '{state}': cannot decode the checkpointed value {text:?}: {e}"
        ))
    })
}

/// Where a process function writes its state at a checkpoint.
pub struct StateWriter<'a> {
    key_values: &'a dyn Fn(&[KeyId]) -> Result<Vec<ArrayRef>>,
    key_schema: SchemaRef,
    subtask: u32,
    parallelism: u32,
    tables: Vec<(String, RecordBatch)>,
}

impl<'a> StateWriter<'a> {
    /// A writer for one subtask (built by the operator runtime).
    pub fn new(
        key_values: &'a dyn Fn(&[KeyId]) -> Result<Vec<ArrayRef>>,
        key_schema: SchemaRef,
        subtask: usize,
        parallelism: usize,
    ) -> Self {
        Self {
            key_values,
            key_schema,
            subtask: subtask as u32,
            parallelism: parallelism as u32,
            tables: Vec::new(),
        }
    }

    /// The tables written, by name.
    pub fn into_tables(self) -> Vec<(String, RecordBatch)> {
        self.tables
    }

    fn table_name(&self, kind: &str, name: &str) -> Result<String> {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(WeirError::Execution(format!(
                "state name {name:?}: use letters, digits, '_' and '-'"
            )));
        }
        let table = format!("{kind}.{name}");
        if self.tables.iter().any(|(t, _)| *t == table) {
            return Err(WeirError::Execution(format!(
                "state '{name}' written twice in one snapshot"
            )));
        }
        Ok(table)
    }

    /// The key columns of `ids` (empty arrays of the key types for none).
    pub fn key_columns(&self, ids: &[KeyId]) -> Result<Vec<ArrayRef>> {
        if ids.is_empty() {
            return Ok(self
                .key_schema
                .fields()
                .iter()
                .map(|f| arrow::array::new_empty_array(f.data_type()))
                .collect());
        }
        (self.key_values)(ids)
    }

    /// Key columns of `ids` followed by `columns`, as one batch.
    pub fn keyed_batch(
        &self,
        ids: &[KeyId],
        columns: Vec<(Field, ArrayRef)>,
    ) -> Result<RecordBatch> {
        let mut fields: Vec<Field> = self
            .key_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        let mut arrays = self.key_columns(ids)?;
        for (f, a) in columns {
            fields.push(f);
            arrays.push(a);
        }
        Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)
    }

    fn push_keyed(
        &mut self,
        table: String,
        ids: &[KeyId],
        columns: Vec<(Field, ArrayRef)>,
    ) -> Result<()> {
        let batch = self.keyed_batch(ids, columns)?;
        self.tables.push((table, batch));
        Ok(())
    }

    /// Snapshot a [`ValueState`].
    pub fn value<T: Serialize>(&mut self, name: &str, state: &ValueState<T>) -> Result<()> {
        let table = self.table_name("value", name)?;
        let (mut ids, mut values, mut written) = (Vec::new(), Vec::new(), Vec::new());
        for (i, v) in state.values.iter().enumerate() {
            if let Some(v) = v {
                ids.push(i as KeyId);
                values.push(encode(name, v)?);
                written.push(state.written.get(i).copied().unwrap_or(0));
            }
        }
        self.push_keyed(
            table,
            &ids,
            vec![json_column("value", values), written_column(written)],
        )
    }

    /// Snapshot a [`ListState`] (one row per element, in list order).
    pub fn list<T: Serialize>(&mut self, name: &str, state: &ListState<T>) -> Result<()> {
        let table = self.table_name("list", name)?;
        let mut keys: Vec<&KeyId> = state.lists.keys().collect();
        keys.sort_unstable();
        let (mut ids, mut values, mut written) = (Vec::new(), Vec::new(), Vec::new());
        for k in keys {
            for (v, w) in &state.lists[k] {
                ids.push(*k);
                values.push(encode(name, v)?);
                written.push(*w);
            }
        }
        self.push_keyed(
            table,
            &ids,
            vec![json_column("value", values), written_column(written)],
        )
    }

    /// Snapshot a [`MapState`] (one row per entry).
    pub fn map<K: Serialize, V: Serialize>(
        &mut self,
        name: &str,
        state: &MapState<K, V>,
    ) -> Result<()> {
        let table = self.table_name("map", name)?;
        let mut keys: Vec<&KeyId> = state.maps.keys().collect();
        keys.sort_unstable();
        let (mut ids, mut entries, mut values, mut written) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for k in keys {
            for (e, (v, w)) in &state.maps[k] {
                ids.push(*k);
                entries.push(encode(name, e)?);
                values.push(encode(name, v)?);
                written.push(*w);
            }
        }
        self.push_keyed(
            table,
            &ids,
            vec![
                json_column("entry", entries),
                json_column("value", values),
                written_column(written),
            ],
        )
    }

    fn push_scoped<T: Serialize>(&mut self, table: String, name: &str, items: &[T]) -> Result<()> {
        let values = items
            .iter()
            .map(|v| encode(name, v))
            .collect::<Result<Vec<_>>>()?;
        let n = values.len();
        let schema = Arc::new(Schema::new(vec![
            Field::new("subtask", DataType::UInt32, false),
            Field::new("parallelism", DataType::UInt32, false),
            Field::new("value", DataType::Utf8, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(UInt32Array::from(vec![self.subtask; n])),
                Arc::new(UInt32Array::from(vec![self.parallelism; n])),
                Arc::new(StringArray::from(values)),
            ],
        )?;
        self.tables.push((table, batch));
        Ok(())
    }

    /// Snapshot operator list state: on restore at another parallelism the
    /// elements of all subtasks are split evenly over the new ones.
    pub fn operator_list<T: Serialize>(&mut self, name: &str, items: &[T]) -> Result<()> {
        let table = self.table_name("oplist", name)?;
        self.push_scoped(table, name, items)
    }

    /// Snapshot union list state: on restore every subtask gets the
    /// elements of all subtasks.
    pub fn union_list<T: Serialize>(&mut self, name: &str, items: &[T]) -> Result<()> {
        let table = self.table_name("union", name)?;
        self.push_scoped(table, name, items)
    }

    /// Snapshot broadcast state (the same on every subtask).
    pub fn broadcast<T: Serialize>(&mut self, name: &str, value: &T) -> Result<()> {
        let table = self.table_name("broadcast", name)?;
        self.push_scoped(table, name, std::slice::from_ref(value))
    }
}

fn json_column(name: &str, values: Vec<String>) -> (Field, ArrayRef) {
    (
        Field::new(name, DataType::Utf8, false),
        Arc::new(StringArray::from(values)),
    )
}

fn written_column(written: Vec<i64>) -> (Field, ArrayRef) {
    (
        Field::new("written_ms", DataType::Int64, false),
        Arc::new(Int64Array::from(written)),
    )
}

/// Rows of a keyed table restored to this subtask: each row's key id and
/// the table's columns after the key columns.
struct KeyedRows {
    ids: Vec<KeyId>,
    batch: RecordBatch,
}

/// What a process function reads its state back from on restore.
pub struct StateReader {
    subtask: u32,
    parallelism: u32,
    keyed: HashMap<String, Vec<KeyedRows>>,
    scoped: HashMap<String, Vec<RecordBatch>>,
}

impl StateReader {
    /// A reader for one subtask (filled by the operator runtime).
    pub fn new(subtask: usize, parallelism: usize) -> Self {
        Self {
            subtask: subtask as u32,
            parallelism: parallelism as u32,
            keyed: HashMap::new(),
            scoped: HashMap::new(),
        }
    }

    /// Add restored rows of keyed table `table`: their key ids (in this
    /// operator instance) and the columns after the key columns.
    pub fn add_keyed(&mut self, table: String, ids: Vec<KeyId>, batch: RecordBatch) {
        self.keyed
            .entry(table)
            .or_default()
            .push(KeyedRows { ids, batch });
    }

    /// Add an operator-scoped table as one old subtask wrote it.
    pub fn add_operator(&mut self, table: String, batch: RecordBatch) {
        self.scoped.entry(table).or_default().push(batch);
    }

    /// Whether nothing was restored.
    pub fn is_empty(&self) -> bool {
        self.keyed.is_empty() && self.scoped.is_empty()
    }

    fn rows(&self, table: &str) -> impl Iterator<Item = &KeyedRows> {
        self.keyed.get(table).into_iter().flatten()
    }

    /// Restore a [`ValueState`] written under `name` (absent: left as is).
    pub fn value<T: DeserializeOwned>(&self, name: &str, state: &mut ValueState<T>) -> Result<()> {
        for part in self.rows(&format!("value.{name}")) {
            let (values, written) = (
                strings(name, &part.batch, 0)?,
                int64s(name, &part.batch, 1)?,
            );
            for (row, &id) in part.ids.iter().enumerate() {
                state.set(id, decode(name, values.value(row))?);
                if state.ttl_ms.is_some() {
                    state.written[id as usize] = written.value(row);
                }
            }
        }
        Ok(())
    }

    /// Restore a [`ListState`] written under `name`.
    pub fn list<T: DeserializeOwned>(&self, name: &str, state: &mut ListState<T>) -> Result<()> {
        for part in self.rows(&format!("list.{name}")) {
            let (values, written) = (
                strings(name, &part.batch, 0)?,
                int64s(name, &part.batch, 1)?,
            );
            for (row, &id) in part.ids.iter().enumerate() {
                let v = decode(name, values.value(row))?;
                state
                    .lists
                    .entry(id)
                    .or_default()
                    .push((v, written.value(row)));
            }
        }
        Ok(())
    }

    /// Restore a [`MapState`] written under `name`.
    pub fn map<K: DeserializeOwned + Eq + Hash, V: DeserializeOwned>(
        &self,
        name: &str,
        state: &mut MapState<K, V>,
    ) -> Result<()> {
        for part in self.rows(&format!("map.{name}")) {
            let (entries, values, written) = (
                strings(name, &part.batch, 0)?,
                strings(name, &part.batch, 1)?,
                int64s(name, &part.batch, 2)?,
            );
            for (row, &id) in part.ids.iter().enumerate() {
                let e = decode(name, entries.value(row))?;
                let v = decode(name, values.value(row))?;
                state
                    .maps
                    .entry(id)
                    .or_default()
                    .insert(e, (v, written.value(row)));
            }
        }
        Ok(())
    }

    /// `(old subtask, old parallelism, value)` of every row of an
    /// operator-scoped table, in old-subtask order.
    fn scoped_rows(&self, table: &str, name: &str) -> Result<Vec<(u32, u32, String)>> {
        let mut rows = Vec::new();
        for b in self.scoped.get(table).into_iter().flatten() {
            let subtask = b
                .column(0)
                .as_primitive_opt::<UInt32Type>()
                .ok_or_else(|| malformed(name))?;
            let parallelism = b
                .column(1)
                .as_primitive_opt::<UInt32Type>()
                .ok_or_else(|| malformed(name))?;
            let values = strings(name, b, 2)?;
            for r in 0..b.num_rows() {
                rows.push((
                    subtask.value(r),
                    parallelism.value(r),
                    values.value(r).to_string(),
                ));
            }
        }
        // Stable: each old subtask's elements keep their order.
        rows.sort_by_key(|r| r.0);
        Ok(rows)
    }

    /// Restore operator list state: this subtask's own elements at the same
    /// parallelism, else its even share of all old subtasks' elements.
    pub fn operator_list<T: DeserializeOwned>(&self, name: &str) -> Result<Vec<T>> {
        let rows = self.scoped_rows(&format!("oplist.{name}"), name)?;
        let Some(&(_, old, _)) = rows.first() else {
            return Ok(Vec::new());
        };
        let mine: Vec<&(u32, u32, String)> = if old == self.parallelism {
            rows.iter().filter(|r| r.0 == self.subtask).collect()
        } else {
            let (n, p, i) = (rows.len(), self.parallelism as usize, self.subtask as usize);
            rows[n * i / p..n * (i + 1) / p].iter().collect()
        };
        mine.into_iter().map(|r| decode(name, &r.2)).collect()
    }

    /// Restore union list state: the elements of every old subtask.
    pub fn union_list<T: DeserializeOwned>(&self, name: &str) -> Result<Vec<T>> {
        self.scoped_rows(&format!("union.{name}"), name)?
            .iter()
            .map(|r| decode(name, &r.2))
            .collect()
    }

    /// Restore broadcast state (absent if none was written).
    pub fn broadcast<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>> {
        let rows = self.scoped_rows(&format!("broadcast.{name}"), name)?;
        let Some(&(_, old, _)) = rows.first() else {
            return Ok(None);
        };
        let from = self.subtask % old.max(1);
        let row = rows.iter().find(|r| r.0 == from).unwrap_or(&rows[0]);
        decode(name, &row.2).map(Some)
    }
}

fn malformed(name: &str) -> WeirError {
    WeirError::Execution(format!("state '{name}': malformed snapshot table"))
}

fn strings<'b>(name: &str, b: &'b RecordBatch, i: usize) -> Result<&'b StringArray> {
    b.columns()
        .get(i)
        .and_then(|c| c.as_string_opt::<i32>())
        .ok_or_else(|| malformed(name))
}

fn int64s<'b>(
    name: &str,
    b: &'b RecordBatch,
    i: usize,
) -> Result<&'b arrow::array::PrimitiveArray<Int64Type>> {
    b.columns()
        .get(i)
        .and_then(|c| c.as_primitive_opt::<Int64Type>())
        .ok_or_else(|| malformed(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;

    fn writer_keys(ids: &[KeyId]) -> Result<Vec<ArrayRef>> {
        Ok(vec![Arc::new(Int64Array::from_iter_values(
            ids.iter().map(|&i| i as i64 * 10),
        ))])
    }

    fn key_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]))
    }

    /// Feed a writer's tables to a reader the way the operator does, with
    /// key ids equal to the written ones.
    fn reader_of(tables: Vec<(String, RecordBatch)>, subtask: usize, p: usize) -> StateReader {
        let mut r = StateReader::new(subtask, p);
        for (name, b) in tables {
            if is_keyed_table(&name) {
                let ids = b
                    .column(0)
                    .as_primitive::<Int64Type>()
                    .values()
                    .iter()
                    .map(|v| (*v / 10) as KeyId)
                    .collect();
                let rest = b
                    .project(&(1..b.num_columns()).collect::<Vec<_>>())
                    .unwrap();
                r.add_keyed(name, ids, rest);
            } else {
                r.add_operator(name, b);
            }
        }
        r
    }

    #[test]
    fn keyed_states_round_trip() {
        let mut v = ValueState::default();
        v.set(1, "one".to_string());
        v.set(4, "four".to_string());
        let mut l = ListState::default();
        l.add(2, 5u64);
        l.add(2, 6);
        let mut m = MapState::default();
        m.put(3, "x".to_string(), vec![1.5f64]);
        let mut w = StateWriter::new(&writer_keys, key_schema(), 0, 1);
        w.value("v", &v).unwrap();
        w.list("l", &l).unwrap();
        w.map("m", &m).unwrap();
        assert!(w.value("v", &v).is_err(), "a name twice");
        assert!(w.value("no/slash", &v).is_err());
        let r = reader_of(w.into_tables(), 0, 1);
        let (mut v2, mut l2, mut m2) = (
            ValueState::<String>::default(),
            ListState::<u64>::default(),
            MapState::<String, Vec<f64>>::default(),
        );
        r.value("v", &mut v2).unwrap();
        r.list("l", &mut l2).unwrap();
        r.map("m", &mut m2).unwrap();
        assert_eq!(v2.get(4).map(String::as_str), Some("four"));
        assert_eq!(v2.len(), 2);
        assert_eq!(l2.get(2).copied().collect::<Vec<_>>(), vec![5, 6]);
        assert_eq!(m2.get(3, &"x".to_string()), Some(&vec![1.5]));
        // A type that does not match the snapshot is an error naming the state.
        let mut wrong = ValueState::<u64>::default();
        let e = r.value("v", &mut wrong).unwrap_err().to_string();
        assert!(e.contains("state 'v'"), "{e}");
    }

    /// Snapshots of `p` subtasks holding `per` elements each, restored at `q`.
    fn redistribute(p: usize, per: usize, q: usize) -> Vec<(Vec<u64>, Vec<u64>, Option<u64>)> {
        let mut all = Vec::new();
        for s in 0..p {
            let items: Vec<u64> = (0..per).map(|i| (s * 100 + i) as u64).collect();
            let mut w = StateWriter::new(&writer_keys, key_schema(), s, p);
            w.operator_list("even", &items).unwrap();
            w.union_list("all", &items).unwrap();
            w.broadcast("rules", &7u64).unwrap();
            all.extend(w.into_tables());
        }
        (0..q)
            .map(|s| {
                // At the same parallelism a subtask gets its own tables and
                // every subtask's union tables; after a rescale, all.
                let tables = all
                    .iter()
                    .filter(|(n, b)| {
                        p != q
                            || is_union_table(n)
                            || b.column(0).as_primitive::<UInt32Type>().values().first()
                                == Some(&(s as u32))
                    })
                    .cloned()
                    .collect();
                let r = reader_of(tables, s, q);
                (
                    r.operator_list("even").unwrap(),
                    r.union_list("all").unwrap(),
                    r.broadcast("rules").unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn operator_state_is_split_evenly_union_everywhere_broadcast_once() {
        for (p, q) in [(2, 2), (2, 3), (3, 1), (2, 4)] {
            let got = redistribute(p, 3, q);
            let mut even: Vec<u64> = got.iter().flat_map(|g| g.0.clone()).collect();
            even.sort_unstable();
            let want: Vec<u64> = (0..p)
                .flat_map(|s| (0..3).map(move |i| (s * 100 + i) as u64))
                .collect();
            assert_eq!(even, want, "{p} -> {q}: each element exactly once");
            let sizes: Vec<usize> = got.iter().map(|g| g.0.len()).collect();
            assert!(
                sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1,
                "{p} -> {q}: even split {sizes:?}"
            );
            for g in &got {
                assert_eq!(g.1, want, "{p} -> {q}: union gives all");
                assert_eq!(g.2, Some(7));
            }
        }
    }
}
