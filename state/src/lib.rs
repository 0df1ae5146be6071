//! # weir-state
//!
//! Checkpoint storage: state snapshots as Parquet files in an
//! [`object_store`], committed by a JSON manifest written last.
//!
//! Layout under the checkpoint directory (a URL: `file:///path` or a plain
//! path for the local file system, `s3://bucket/prefix` for S3 and
//! S3-compatible stores configured by the `AWS_*` variables, `memory://`
//! for tests):
//!
//! ```text
//! {dir}/chk-{id}/{operator uid}/{state}-kg{start}-{end}-s{subtask}.parquet
//! {dir}/chk-{id}/_metadata          the commit point, written last
//! ```
//!
//! A checkpoint without `_metadata` does not exist: readers only ever see
//! checkpoints whose every file was written before the manifest. Each state
//! table is a plain Parquet file whose schema the operator documents (keys,
//! `pane_start`, accumulator state columns …), so DuckDB or pyarrow can read
//! a job's state directly.
#![warn(missing_docs)]

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
}

impl std::fmt::Debug for CheckpointStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CheckpointStorage({})", self.url)
    }
}

pub use weir_core::checkpoint::{Manifest, OperatorHandle, SubtaskHandle, TableHandle};

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
            });
        }
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            // Credentials, region and endpoint come from the usual
            // AWS_* variables (AWS_ENDPOINT and AWS_ALLOW_HTTP=true for an
            // S3-compatible server such as MinIO).
            let mut builder =
                object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
            if std::env::var_os("AWS_DEFAULT_REGION").is_none()
                && std::env::var_os("AWS_REGION").is_none()
            {
                builder = builder.with_region("us-east-1");
            }
            let store = builder
                .build()
                .map_err(storage_error(format!("open {url}")))?;
            return Ok(Self {
                store: Arc::new(store),
                base: Path::from(prefix),
                url: url.to_string(),
            });
        }
        let local = url.strip_prefix("file://").unwrap_or(url);
        if url.contains("://") && !url.starts_with("file://") {
            return Err(WeirError::Config(format!(
                "checkpoint directory '{url}': unsupported scheme (use file://, s3:// or memory://)"
            )));
        }
        std::fs::create_dir_all(local).map_err(|e| WeirError::io(local, e))?;
        let store = object_store::local::LocalFileSystem::new_with_prefix(local)
            .map_err(storage_error(format!("open {local}")))?;
        Ok(Self {
            store: Arc::new(store),
            base: Path::default(),
            url: url.to_string(),
        })
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

    /// Write one state table of checkpoint `id` as Parquet.
    pub async fn write_table(
        &self,
        id: u64,
        uid: &str,
        name: &str,
        subtask: usize,
        range: KeyGroupRange,
        batch: &RecordBatch,
    ) -> Result<TableHandle> {
        let relative = format!(
            "chk-{id}/{uid}/{name}-kg{}-{}-s{subtask}.parquet",
            range.start, range.end
        );
        let encode = |e: parquet::errors::ParquetError| {
            WeirError::Execution(format!("checkpoint storage: encode {relative}: {e}"))
        };
        let mut buf = Vec::new();
        {
            let mut writer =
                ArrowWriter::try_new(&mut buf, batch.schema(), None).map_err(encode)?;
            writer.write(batch).map_err(encode)?;
            writer.close().map_err(encode)?;
        }
        let bytes = buf.len() as u64;
        self.store
            .put(&self.path(&relative), PutPayload::from(buf))
            .await
            .map_err(storage_error(format!("write {relative}")))?;
        Ok(TableHandle {
            name: name.to_string(),
            path: relative,
            key_group_start: range.start,
            key_group_end: range.end,
            rows: batch.num_rows() as u64,
            bytes,
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
        let reader = ParquetRecordBatchReaderBuilder::try_new(data)
            .map_err(|e| bad(&e))?
            .build()
            .map_err(|e| bad(&e))?;
        let schema = arrow::record_batch::RecordBatchReader::schema(&reader);
        let batches = reader
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| bad(&e))?;
        let batch = arrow::compute::concat_batches(&schema, &batches).map_err(|e| bad(&e))?;
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
        use futures::TryStreamExt;
        let listed: Vec<_> = self
            .store
            .list(Some(&self.base))
            .try_collect()
            .await
            .map_err(storage_error("list checkpoints".into()))?;
        let mut ids: Vec<u64> = listed
            .iter()
            .filter(|m| m.location.filename() == Some("_metadata"))
            .filter_map(|m| {
                m.location
                    .parts()
                    .find_map(|p| p.as_ref().strip_prefix("chk-")?.parse().ok())
            })
            .collect();
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
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
        Ok(())
    }

    /// Keep the newest `retained` completed checkpoints, delete the others.
    pub async fn retain(&self, retained: usize) -> Result<()> {
        let ids = self.completed().await?;
        let excess = ids.len().saturating_sub(retained.max(1));
        for id in &ids[..excess] {
            self.delete(*id).await?;
        }
        Ok(())
    }
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
            .write_table(1, "win", "panes", 0, range, &batch())
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
        };
        storage.commit(&manifest).await.unwrap();
        assert_eq!(storage.completed().await.unwrap(), vec![1]);
        assert_eq!(storage.manifest(1).await.unwrap(), manifest);
        assert_eq!(storage.read_table(&table).await.unwrap(), batch());
        storage
            .write_table(2, "win", "panes", 0, range, &batch())
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
    }

    #[tokio::test]
    async fn a_damaged_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let storage = CheckpointStorage::open(dir.path().to_str().unwrap()).unwrap();
        let range = KeyGroupRange { start: 0, end: 8 };
        let table = storage
            .write_table(3, "op", "s", 1, range, &batch())
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
