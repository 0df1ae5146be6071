//! # weir-state
//!
//! Checkpoint storage: state snapshots as Parquet files in an
//! [`object_store`], committed by a JSON manifest written last.
//!
//! Layout under the checkpoint directory (a URL: `file:///path` or a plain
//! path for the local file system, `s3://bucket/prefix` for S3 and
//! S3-compatible stores configured by the `AWS_*` variables, `gs://` and
//! `az://` ([`stores`]), `memory://` for tests):
//!
//! ```text
//! {dir}/chk-{id}/{operator uid}/{state}-kg{start}-{end}-s{subtask}.parquet
//! {dir}/chk-{id}/_metadata          the commit point, written last
//! {dir}/shared/{operator uid}/{state}-kg{start}-{end}-s{subtask}-{hash}-c{id}.parquet
//! ```
//!
//! Incremental checkpoints (`checkpoint_incremental`) write keyed state in
//! chunks of key groups under `shared/`, named by a hash of their rows; a
//! chunk unchanged since a retained checkpoint is not written again — the
//! new manifest names the existing file (see [`SharedFiles`]). Retention
//! deletes a shared file once no retained checkpoint names it. Savepoints
//! never use `shared/`: they are self-contained.
//!
//! A checkpoint without `_metadata` does not exist: readers only ever see
//! checkpoints whose every file was written before the manifest. Each state
//! table is a plain Parquet file whose schema the operator documents (keys,
//! `pane_start`, accumulator state columns …), so DuckDB or pyarrow can read
//! a job's state directly.
#![warn(missing_docs)]

pub mod stores;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use weir_core::{Result, WeirError};

pub use weir_core::keys::KeyGroupRange;

/// Where a checkpoint's files live: a store and a prefix in it.
#[derive(Clone)]
pub struct CheckpointStorage {
    store: Arc<dyn ObjectStore>,
    base: Path,
    url: String,
    /// The folder on the local file system, whose emptied `chk-N` trees
    /// retention removes (object stores have no folders to leave behind).
    local: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for CheckpointStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CheckpointStorage({})", self.url)
    }
}

pub use weir_core::checkpoint::{Manifest, OperatorHandle, SubtaskHandle, TableHandle};

/// [`CheckpointStorage::completed`] on the local file system: the `chk-N`
/// folders of `root` holding a `_metadata` file, symbolic links not
/// followed (a link may point anywhere, or back up the tree).
fn completed_on_disk(root: &std::path::Path) -> Result<Vec<u64>> {
    let io = |e| WeirError::io(root.display().to_string(), e);
    let mut ids = Vec::new();
    for entry in std::fs::read_dir(root).map_err(io)? {
        let entry = entry.map_err(io)?;
        if !entry.file_type().map_err(io)?.is_dir() {
            continue;
        }
        let Some(id) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.strip_prefix("chk-"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        let metadata = entry.path().join("_metadata");
        if std::fs::symlink_metadata(&metadata).is_ok_and(|m| m.is_file()) {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

fn storage_error(what: String) -> impl FnOnce(object_store::Error) -> WeirError {
    move |e| WeirError::Execution(format!("checkpoint storage: {what}: {e}"))
}

impl CheckpointStorage {
    /// Storage at `url`: `memory://` (in this process only), `file:///abs`
    /// or a plain path (created if missing).
    pub fn open(url: &str) -> Result<Self> {
        if url == "memory://" || url.starts_with("memory://") {
            return Ok(Self {
                store: Arc::new(object_store::memory::InMemory::new()),
                base: Path::from(url.trim_start_matches("memory://")),
                url: url.to_string(),
                local: None,
            });
        }
        // s3://, gs://, az://: configured by their usual variables.
        if let Some(opened) = stores::cloud_store(url) {
            let (store, base) =
                opened.map_err(|e| WeirError::Config(format!("checkpoint directory: {e}")))?;
            return Ok(Self {
                store,
                base,
                url: url.to_string(),
                local: None,
            });
        }
        let local = url.strip_prefix("file://").unwrap_or(url);
        if url.contains("://") && !url.starts_with("file://") {
            return Err(WeirError::Config(format!(
                "checkpoint directory '{url}': unsupported scheme (use a path, file://, {}, or memory://)",
                stores::CLOUD_SCHEMES
            )));
        }
        std::fs::create_dir_all(local).map_err(|e| WeirError::io(local, e))?;
        let store = object_store::local::LocalFileSystem::new_with_prefix(local)
            .map_err(storage_error(format!("open {local}")))?;
        Ok(Self {
            store: Arc::new(store),
            base: Path::default(),
            url: url.to_string(),
            local: Some(local.into()),
        })
    }

    /// The object store and the path under it that this storage uses
    /// (for other records kept beside checkpoints: the HA folder's).
    pub fn object_store(&self) -> (Arc<dyn ObjectStore>, Path) {
        (Arc::clone(&self.store), self.base.clone())
    }

    /// The URL it was opened with.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn path(&self, relative: &str) -> Path {
        let mut path = self.base.clone();
        for part in relative.split('/').filter(|p| !p.is_empty()) {
            path = path.clone().join(part);
        }
        path
    }

    /// Write one state table of checkpoint `id` as Parquet (`part`: the
    /// how-manieth table of this name the operator wrote, from 0).
    #[allow(clippy::too_many_arguments)]
    pub async fn write_table(
        &self,
        id: u64,
        uid: &str,
        name: &str,
        part: usize,
        subtask: usize,
        range: KeyGroupRange,
        batch: &RecordBatch,
        keys: &[usize],
    ) -> Result<TableHandle> {
        // Part 0 is the table; an operator writing several tables of one
        // name (one per window pane) numbers the others.
        let part = if part == 0 {
            String::new()
        } else {
            format!("-p{part}")
        };
        let relative = format!(
            "chk-{id}/{uid}/{name}-kg{}-{}-s{subtask}{part}.parquet",
            range.start, range.end
        );
        self.write_at(&relative, name, range, batch, keys).await
    }

    /// Write (or reuse) one table of incremental checkpoint `id` under
    /// `shared/`: a file with the same content key already named by a
    /// retained checkpoint is referred to, not written again.
    #[allow(clippy::too_many_arguments)]
    pub async fn write_shared_table(
        &self,
        id: u64,
        uid: &str,
        name: &str,
        subtask: usize,
        range: KeyGroupRange,
        batch: &RecordBatch,
        keys: &[usize],
        shared: &SharedFiles,
    ) -> Result<TableHandle> {
        let key = format!(
            "{uid}/{name}-kg{}-{}-s{subtask}-{:032x}",
            range.start,
            range.end,
            content_hash(batch)
        );
        if let Some(known) = shared.lookup(&key) {
            return Ok(known.clone());
        }
        let relative = format!("shared/{key}-c{id}.parquet");
        let mut handle = self.write_at(&relative, name, range, batch, keys).await?;
        handle.shared = Some(key);
        Ok(handle)
    }

    async fn write_at(
        &self,
        relative: &str,
        name: &str,
        range: KeyGroupRange,
        batch: &RecordBatch,
        keys: &[usize],
    ) -> Result<TableHandle> {
        let encode = |e: parquet::errors::ParquetError| {
            WeirError::Execution(format!("checkpoint storage: encode {relative}: {e}"))
        };
        // Room for the file up front (about half the table's memory for
        // state tables), so it is not copied on every doubling.
        let mut buf = Vec::with_capacity((batch.get_array_memory_size() / 2).min(64 << 20));
        {
            let mut writer = ArrowWriter::try_new(
                &mut buf,
                batch.schema(),
                Some(state_file_properties(batch, keys)),
            )
            .map_err(encode)?;
            writer.write(batch).map_err(encode)?;
            writer.close().map_err(encode)?;
        }
        let bytes = buf.len() as u64;
        self.store
            .put(&self.path(relative), PutPayload::from(buf))
            .await
            .map_err(storage_error(format!("write {relative}")))?;
        Ok(TableHandle {
            name: name.to_string(),
            path: relative.to_string(),
            key_group_start: range.start,
            key_group_end: range.end,
            rows: batch.num_rows() as u64,
            bytes,
            shared: None,
        })
    }

    /// Read a table back; errors name the file.
    pub async fn read_table(&self, table: &TableHandle) -> Result<RecordBatch> {
        let data = self
            .store
            .get(&self.path(&table.path))
            .await
            .map_err(storage_error(format!("read {}", table.path)))?
            .bytes()
            .await
            .map_err(storage_error(format!("read {}", table.path)))?;
        let bad = |e: &dyn std::fmt::Display| {
            WeirError::Execution(format!("checkpoint file {} is damaged: {e}", table.path))
        };
        // A checkpoint folder is written by anyone who can write there.
        let location = || format!("checkpoint file {}", table.path);
        let batch = weir_core::error::guard_decoder(location, || {
            let reader = ParquetRecordBatchReaderBuilder::try_new(data)
                .map_err(|e| bad(&e))?
                .build()
                .map_err(|e| bad(&e))?;
            let schema = arrow::record_batch::RecordBatchReader::schema(&reader);
            let batches = reader
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| bad(&e))?;
            arrow::compute::concat_batches(&schema, &batches).map_err(|e| bad(&e))
        })?;
        if batch.num_rows() as u64 != table.rows {
            return Err(bad(&format!(
                "{} rows, the manifest says {}",
                batch.num_rows(),
                table.rows
            )));
        }
        Ok(batch)
    }

    /// Commit checkpoint `manifest.checkpoint_id`: its `_metadata`, written
    /// after every file it names.
    pub async fn commit(&self, manifest: &Manifest) -> Result<()> {
        let relative = format!("chk-{}/_metadata", manifest.checkpoint_id);
        let json = serde_json::to_vec_pretty(manifest)
            .map_err(|e| WeirError::Execution(format!("manifest: {e}")))?;
        self.store
            .put(&self.path(&relative), PutPayload::from(Bytes::from(json)))
            .await
            .map_err(storage_error(format!("write {relative}")))?;
        Ok(())
    }

    /// The manifest of checkpoint `id`; a missing or corrupt one is an error
    /// naming it.
    pub async fn manifest(&self, id: u64) -> Result<Manifest> {
        let relative = format!("chk-{id}/_metadata");
        let data = self
            .store
            .get(&self.path(&relative))
            .await
            .map_err(storage_error(format!("read {relative}")))?
            .bytes()
            .await
            .map_err(storage_error(format!("read {relative}")))?;
        serde_json::from_slice(&data).map_err(|e| {
            WeirError::Execution(format!("checkpoint manifest {relative} is corrupt: {e}"))
        })
    }

    /// Ids of the committed checkpoints (those with `_metadata`), ascending.
    pub async fn completed(&self) -> Result<Vec<u64>> {
        // One level only: the `chk-N` folders of this folder and their
        // `_metadata`, never a walk through the tree below (which may be
        // huge, or loop through links).
        if let Some(root) = &self.local {
            return completed_on_disk(root);
        }
        let base = (!self.base.as_ref().is_empty()).then_some(&self.base);
        let listed = self
            .store
            .list_with_delimiter(base)
            .await
            .map_err(storage_error("list checkpoints".into()))?;
        let mut ids = Vec::new();
        for folder in listed.common_prefixes {
            let Some(id) = folder
                .filename()
                .and_then(|n| n.strip_prefix("chk-"))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            match self.store.head(&folder.clone().join("_metadata")).await {
                Ok(_) => ids.push(id),
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => {
                    return Err(storage_error(format!("read chk-{id}/_metadata"))(e));
                }
            }
        }
        ids.sort_unstable();
        Ok(ids)
    }

    /// A savepoint or retained checkpoint to resume from: a folder (its
    /// newest completed `chk-N`) or one `…/chk-N` folder itself. Nothing is
    /// created: a folder that does not exist is an error naming it.
    pub async fn open_restore_point(path: &str) -> Result<(Self, u64)> {
        let trimmed = path.trim_end_matches('/');
        let (folder, named) = match trimmed.rsplit_once('/') {
            Some((parent, last)) => match last
                .strip_prefix("chk-")
                .and_then(|n| n.parse::<u64>().ok())
            {
                Some(id) if !parent.is_empty() => (parent, Some(id)),
                _ => (trimmed, None),
            },
            None => (trimmed, None),
        };
        let local = folder.strip_prefix("file://").unwrap_or(folder);
        if !folder.contains("://") && !std::path::Path::new(local).is_dir() {
            return Err(WeirError::Config(format!(
                "no savepoint or checkpoint folder at {path}"
            )));
        }
        let storage = Self::open(folder)?;
        let id = match named {
            Some(id) => {
                if !storage.completed().await?.contains(&id) {
                    return Err(WeirError::Config(format!(
                        "{path} is not a completed checkpoint (no _metadata)"
                    )));
                }
                id
            }
            None => *storage.completed().await?.last().ok_or_else(|| {
                WeirError::Config(format!(
                    "no completed savepoint or checkpoint at {path} (no chk-N/_metadata)"
                ))
            })?,
        };
        Ok((storage, id))
    }

    /// Delete checkpoint `id` (its manifest first, so a crash halfway
    /// leaves no half checkpoint that looks complete).
    pub async fn delete(&self, id: u64) -> Result<()> {
        use futures::TryStreamExt;
        let prefix = self.path(&format!("chk-{id}"));
        let _ = self
            .store
            .delete(&self.path(&format!("chk-{id}/_metadata")))
            .await;
        let files: Vec<_> = self
            .store
            .list(Some(&prefix))
            .try_collect()
            .await
            .map_err(storage_error(format!("list chk-{id}")))?;
        for f in files {
            self.store
                .delete(&f.location)
                .await
                .map_err(storage_error(format!("delete {}", f.location)))?;
        }
        if let Some(root) = &self.local {
            // Deleting the files leaves their (now empty) folders.
            let folder = root.join(format!("chk-{id}"));
            match std::fs::remove_dir_all(&folder) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(WeirError::io(folder.display().to_string(), e));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// A job has ended: delete the shared files its retained checkpoints
    /// do not name (those of a checkpoint cut short by the end).
    pub async fn clean_up_after_job(&self) -> Result<()> {
        let ids = self.completed().await?;
        self.drop_unreferenced_shared(&ids, u64::MAX).await
    }

    /// Keep the newest `retained` completed checkpoints, delete the others,
    /// and the shared files no retained checkpoint names (files of
    /// checkpoints newer than the newest committed one are still being
    /// written, and stay).
    pub async fn retain(&self, retained: usize) -> Result<()> {
        let ids = self.completed().await?;
        let excess = ids.len().saturating_sub(retained.max(1));
        for id in &ids[..excess] {
            self.delete(*id).await?;
        }
        let Some(&newest) = ids.last() else {
            return Ok(());
        };
        self.drop_unreferenced_shared(&ids[excess..], newest).await
    }

    /// Delete the shared files that none of checkpoints `retained` names,
    /// among those written by checkpoints up to `written_up_to` (later ones
    /// may still be in progress). When a job has ended, every unnamed file
    /// goes (`written_up_to` = `u64::MAX`).
    pub async fn drop_unreferenced_shared(
        &self,
        retained: &[u64],
        written_up_to: u64,
    ) -> Result<()> {
        use futures::TryStreamExt;
        let shared: Vec<_> = self
            .store
            .list(Some(&self.path("shared")))
            .try_collect()
            .await
            .map_err(storage_error("list shared files".into()))?;
        if shared.is_empty() {
            return Ok(());
        }
        let mut referenced = std::collections::HashSet::new();
        for id in retained {
            for t in self.manifest(*id).await?.tables() {
                referenced.insert(self.path(&t.path));
            }
        }
        for f in shared {
            let written_by = f.location.filename().and_then(|n| {
                n.strip_suffix(".parquet")?
                    .rsplit_once("-c")?
                    .1
                    .parse::<u64>()
                    .ok()
            });
            if written_by.is_some_and(|c| c <= written_up_to) && !referenced.contains(&f.location) {
                self.store
                    .delete(&f.location)
                    .await
                    .map_err(storage_error(format!("delete {}", f.location)))?;
            }
        }
        Ok(())
    }
}

/// How state tables are encoded. A state file is read whole, never
/// filtered: no statistics. A table's key columns hold each key about once
/// (per pane), so a dictionary would only be built to be dropped once it
/// outgrows its page: they are written plain. Other columns (pane starts,
/// counts, small states) keep dictionary encoding, which shrinks them most.
fn state_file_properties(
    batch: &RecordBatch,
    keys: &[usize],
) -> parquet::file::properties::WriterProperties {
    let mut props = parquet::file::properties::WriterProperties::builder()
        .set_statistics_enabled(parquet::file::properties::EnabledStatistics::None);
    for &k in keys {
        if let Some(field) = batch.schema().fields().get(k) {
            props = props.set_column_dictionary_enabled(
                parquet::schema::types::ColumnPath::from(field.name().as_str()),
                false,
            );
        }
    }
    props.build()
}

/// The shared files a writer of incremental checkpoints may refer to:
/// those named by the newest completed checkpoint it knows of — retention
/// keeps them while that checkpoint is among the retained ones, which it is
/// even when the writer learns of one newer completion late (incremental
/// checkpoints retain at least two) — and those it wrote or reused for
/// checkpoints not yet complete.
#[derive(Debug, Default)]
pub struct SharedFiles {
    completed: Option<(u64, Known)>,
    pending: BTreeMap<u64, Known>,
}

/// Files by content key, and whole tables (their chunks) by a key of the
/// table's content: an unchanged table is recognised before it is split.
#[derive(Debug, Default)]
struct Known {
    files: HashMap<String, TableHandle>,
    tables: HashMap<String, Vec<TableHandle>>,
}

impl SharedFiles {
    /// No files known yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Start from the shared files of a restored checkpoint (of the same
    /// storage).
    pub fn seed(&mut self, manifest: &Manifest) {
        let files = manifest
            .tables()
            .filter_map(|t| Some((t.shared.clone()?, t.clone())))
            .collect();
        let known = Known {
            files,
            tables: HashMap::new(),
        };
        self.completed = Some((manifest.checkpoint_id, known));
    }

    /// A file with content key `key` that the newest completed checkpoint
    /// names.
    pub fn lookup(&self, key: &str) -> Option<&TableHandle> {
        self.completed.as_ref()?.1.files.get(key)
    }

    /// The chunks of a whole table with content key `key` that the newest
    /// completed checkpoint names.
    pub fn lookup_table(&self, key: &str) -> Option<&[TableHandle]> {
        self.completed
            .as_ref()?
            .1
            .tables
            .get(key)
            .map(Vec::as_slice)
    }

    /// Checkpoint `id` names `handle` (written or reused).
    pub fn record(&mut self, id: u64, handle: &TableHandle) {
        if let Some(key) = &handle.shared {
            self.pending
                .entry(id)
                .or_default()
                .files
                .insert(key.clone(), handle.clone());
        }
    }

    /// Checkpoint `id` stores the table with content key `key` as `chunks`.
    pub fn record_table(&mut self, id: u64, key: String, chunks: &[TableHandle]) {
        for c in chunks {
            self.record(id, c);
        }
        self.pending
            .entry(id)
            .or_default()
            .tables
            .insert(key, chunks.to_vec());
    }

    /// Checkpoint `id` completed: its files may be reused from now on.
    pub fn complete(&mut self, id: u64) {
        if self.completed.as_ref().is_some_and(|(c, _)| *c >= id) {
            return;
        }
        let files = self.pending.remove(&id).unwrap_or_default();
        self.pending.retain(|&p, _| p > id);
        self.completed = Some((id, files));
    }
}

/// A hash of a batch's contents (schema, lengths and every buffer), for
/// recognising a state table that did not change since a checkpoint.
pub fn content_hash(batch: &RecordBatch) -> u128 {
    use arrow::array::{Array, ArrayData};
    use xxhash_rust::xxh3::Xxh3;
    fn visit(h: &mut Xxh3, d: &ArrayData) {
        h.update(format!("{:?}", d.data_type()).as_bytes());
        h.update(&(d.len() as u64).to_le_bytes());
        h.update(&(d.offset() as u64).to_le_bytes());
        match d.nulls() {
            Some(n) => {
                h.update(&[1]);
                h.update(&(n.offset() as u64).to_le_bytes());
                h.update(n.buffer().as_slice());
            }
            None => h.update(&[0]),
        }
        for b in d.buffers() {
            h.update(&(b.len() as u64).to_le_bytes());
            h.update(b.as_slice());
        }
        for c in d.child_data() {
            visit(h, c);
        }
    }
    let mut h = Xxh3::new();
    h.update(format!("{:?}", batch.schema().fields()).as_bytes());
    h.update(&(batch.num_rows() as u64).to_le_bytes());
    for c in batch.columns() {
        visit(&mut h, &c.to_data());
    }
    h.digest128()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};

    fn batch() -> RecordBatch {
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)])),
            vec![Arc::new(Int64Array::from(vec![1, 2, 3]))],
        )
        .unwrap()
    }

    async fn round_trip(storage: CheckpointStorage) {
        let range = KeyGroupRange { start: 0, end: 64 };
        let table = storage
            .write_table(1, "win", "panes", 0, 0, range, &batch(), &[])
            .await
            .unwrap();
        assert_eq!(storage.completed().await.unwrap(), Vec::<u64>::new());
        let manifest = Manifest {
            job_name: "j".into(),
            checkpoint_id: 1,
            timestamp_ms: 0,
            max_parallelism: 128,
            subtasks: vec![SubtaskHandle {
                vertex: 0,
                subtask: 0,
                operators: vec![OperatorHandle {
                    node: 1,
                    uid: "win".into(),
                    tables: vec![table.clone()],
                }],
            }],
            leader_epoch: None,
        };
        storage.commit(&manifest).await.unwrap();
        assert_eq!(storage.completed().await.unwrap(), vec![1]);
        assert_eq!(storage.manifest(1).await.unwrap(), manifest);
        assert_eq!(storage.read_table(&table).await.unwrap(), batch());
        storage
            .write_table(2, "win", "panes", 0, 0, range, &batch(), &[])
            .await
            .unwrap();
        let mut m2 = manifest.clone();
        m2.checkpoint_id = 2;
        storage.commit(&m2).await.unwrap();
        storage.retain(1).await.unwrap();
        assert_eq!(storage.completed().await.unwrap(), vec![2]);
        let err = storage.read_table(&table).await.unwrap_err().to_string();
        assert!(err.contains("chk-1/win/panes-kg0-64-s0.parquet"), "{err}");
    }

    #[tokio::test]
    async fn tables_and_manifests_round_trip_in_memory() {
        round_trip(CheckpointStorage::open("memory://").unwrap()).await;
    }

    #[tokio::test]
    async fn tables_and_manifests_round_trip_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let storage = CheckpointStorage::open(&format!("file://{}", dir.path().display())).unwrap();
        round_trip(storage).await;
        assert!(dir.path().join("chk-2/_metadata").exists());
        // Retention removes the whole folder, not just its files.
        assert!(!dir.path().join("chk-1").exists());
    }

    #[tokio::test]
    async fn restore_points_look_one_level_down_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for p in ["chk-1", "chk-3", "deep/chk-9", "chk-7"] {
            std::fs::create_dir_all(root.join(p)).unwrap();
        }
        for p in ["chk-1/_metadata", "chk-3/_metadata", "deep/chk-9/_metadata"] {
            std::fs::write(root.join(p), b"{}").unwrap();
        }
        // A link back up would loop a walk forever.
        std::os::unix::fs::symlink(root, root.join("loop")).unwrap();
        let storage = CheckpointStorage::open(root.to_str().unwrap()).unwrap();
        // chk-7 has no _metadata; deep/chk-9 is not this folder's.
        assert_eq!(storage.completed().await.unwrap(), vec![1, 3]);
        let (_, id) = CheckpointStorage::open_restore_point(root.to_str().unwrap())
            .await
            .unwrap();
        assert_eq!(id, 3);
        let named = root.join("chk-1");
        let (s, id) = CheckpointStorage::open_restore_point(named.to_str().unwrap())
            .await
            .unwrap();
        assert_eq!((s.url(), id), (root.to_str().unwrap(), 1));
        let err = CheckpointStorage::open_restore_point(root.join("chk-7").to_str().unwrap())
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("not a completed checkpoint"),
            "{err}"
        );
        let missing = root.join("nowhere");
        assert!(
            CheckpointStorage::open_restore_point(missing.to_str().unwrap())
                .await
                .is_err()
        );
        assert!(
            !missing.exists(),
            "a restore created the folder it looked for"
        );
    }

    #[tokio::test]
    async fn a_damaged_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let storage = CheckpointStorage::open(dir.path().to_str().unwrap()).unwrap();
        let range = KeyGroupRange { start: 0, end: 8 };
        let table = storage
            .write_table(3, "op", "s", 0, 1, range, &batch(), &[])
            .await
            .unwrap();
        let file = dir.path().join(&table.path);
        let data = std::fs::read(&file).unwrap();
        std::fs::write(&file, &data[..data.len() / 2]).unwrap();
        let err = storage.read_table(&table).await.unwrap_err().to_string();
        assert!(
            err.contains("chk-3/op/s-kg0-8-s1.parquet is damaged"),
            "{err}"
        );
        std::fs::write(dir.path().join("chk-3/_metadata"), "{ not json").unwrap();
        let err = storage.manifest(3).await.unwrap_err().to_string();
        assert!(err.contains("chk-3/_metadata is corrupt"), "{err}");
    }
}
