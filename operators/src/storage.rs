//! Files wherever they are: a local path (or `file://`), `s3://bucket/key`
//! (credentials, region and endpoint from the usual `AWS_*` variables, as
//! for checkpoints: `AWS_ENDPOINT`, `AWS_ALLOW_HTTP=true` for an
//! S3-compatible server) or `memory://` (this process's in-memory store),
//! read through `object_store`.
//!
//! Sources are pulled from their task's thread; object-store calls are
//! asynchronous, so they run on a small I/O runtime shared by the process
//! and the task waits for each one ([`block_io`]) — a read of a large
//! object streams, one chunk per wait.

use std::future::Future;
use std::io::Read;
use std::path::Path;
use std::sync::{Arc, LazyLock};

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use weir_core::{Result, WeirError};

static IO: LazyLock<std::result::Result<tokio::runtime::Runtime, String>> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("weir-io")
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
});

static MEMORY: LazyLock<Arc<object_store::memory::InMemory>> =
    LazyLock::new(|| Arc::new(object_store::memory::InMemory::new()));

/// Run `f` on the I/O runtime and wait for it (from any thread, inside an
/// async runtime or not).
pub fn block_io<F>(f: F) -> Result<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let runtime = IO
        .as_ref()
        .map_err(|e| WeirError::Execution(format!("cannot start the I/O runtime: {e}")))?;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    runtime.spawn(async move {
        let _ = tx.send(f.await);
    });
    rx.recv()
        .map_err(|_| WeirError::Execution("an I/O call was dropped".into()))
}

/// Whether `path` names an object store rather than a local file.
pub fn is_url(path: &str) -> bool {
    path.contains("://") && !path.starts_with("file://")
}

/// The store holding `url` and the object path within it.
pub fn store_for(url: &str) -> Result<(Arc<dyn ObjectStore>, ObjectPath)> {
    if let Some(rest) = url.strip_prefix("memory://") {
        let store: Arc<dyn ObjectStore> = Arc::clone(&*MEMORY) as _;
        return Ok((store, ObjectPath::from(rest.trim_start_matches('/'))));
    }
    if let Some(opened) = weir_state::stores::cloud_store(url) {
        return opened;
    }
    Err(WeirError::Config(format!(
        "'{url}': unsupported scheme (use a local path, file://, {}, or memory://)",
        weir_state::stores::CLOUD_SCHEMES
    )))
}

fn io_error(url: &str) -> impl Fn(object_store::Error) -> WeirError + '_ {
    move |e| WeirError::bad_input(url.to_string(), e.to_string())
}

/// The objects of `url`: the object itself, or every object under it as a
/// folder (hidden ones, `.…` and `_…` in any part of the name, skipped),
/// sorted, with their sizes.
pub fn list_objects(url: &str) -> Result<Vec<(String, u64)>> {
    let (store, path) = store_for(url)?;
    let base = url.trim_end_matches('/').to_string();
    let (s, p) = (Arc::clone(&store), path.clone());
    if let Ok(Ok(meta)) = block_io(async move { s.head(&p).await }) {
        return Ok(vec![(base, meta.size)]);
    }
    let prefix = path.clone();
    let listed = block_io(async move {
        store
            .list(Some(&prefix))
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<std::result::Result<Vec<_>, _>>()
    })?
    .map_err(io_error(url))?;
    let strip = path.as_ref().len();
    let mut found: Vec<(String, u64)> = listed
        .into_iter()
        .filter_map(|m| {
            let key = m.location.as_ref();
            let rel = key.get(strip..)?.trim_start_matches('/').to_string();
            let hidden = rel
                .split('/')
                .any(|part| part.starts_with('.') || part.starts_with('_'));
            (!hidden && !rel.is_empty()).then(|| (format!("{base}/{rel}"), m.size))
        })
        .collect();
    found.sort();
    if found.is_empty() {
        return Err(WeirError::bad_input(
            url,
            "no objects at or under this path",
        ));
    }
    Ok(found)
}

/// An object read by ranges (a Parquet file's footer and column chunks).
pub struct ObjectFile {
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    size: u64,
    url: String,
}

impl ObjectFile {
    /// The object at `url`.
    pub fn open(url: &str) -> Result<Self> {
        let (store, path) = store_for(url)?;
        let (s, p) = (Arc::clone(&store), path.clone());
        let meta = block_io(async move { s.head(&p).await })?.map_err(io_error(url))?;
        Ok(Self {
            store,
            path,
            size: meta.size,
            url: url.to_string(),
        })
    }

    fn range(
        &self,
        start: u64,
        end: u64,
    ) -> std::result::Result<Bytes, parquet::errors::ParquetError> {
        let (store, path) = (Arc::clone(&self.store), self.path.clone());
        block_io(async move { store.get_range(&path, start..end).await })
            .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))?
            .map_err(|e| parquet::errors::ParquetError::General(format!("{}: {e}", self.url)))
    }
}

impl parquet::file::reader::Length for ObjectFile {
    fn len(&self) -> u64 {
        self.size
    }
}

impl parquet::file::reader::ChunkReader for ObjectFile {
    type T = std::io::Cursor<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        Ok(std::io::Cursor::new(self.range(start, self.size)?))
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.range(start, start + length as u64)
    }
}

/// An object read as a stream, one chunk per read that needs one.
pub struct ObjectReader {
    stream: futures::stream::BoxStream<'static, object_store::Result<Bytes>>,
    chunk: Bytes,
    url: String,
}

impl ObjectReader {
    /// Stream the object at `url`.
    pub fn open(url: &str) -> Result<Self> {
        let (store, path) = store_for(url)?;
        let got = block_io(async move { store.get(&path).await })?.map_err(io_error(url))?;
        Ok(Self {
            stream: got.into_stream(),
            chunk: Bytes::new(),
            url: url.to_string(),
        })
    }
}

impl Read for ObjectReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.chunk.is_empty() {
            // The stream moves to the I/O runtime for one chunk and back.
            let mut stream = std::mem::replace(&mut self.stream, futures::stream::empty().boxed());
            let (next, stream) = block_io(async move {
                let next = stream.next().await;
                (next, stream)
            })
            .map_err(std::io::Error::other)?;
            self.stream = stream;
            match next {
                None => return Ok(0),
                Some(Ok(b)) => self.chunk = b,
                Some(Err(e)) => {
                    return Err(std::io::Error::other(format!("{}: {e}", self.url)));
                }
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk[..n]);
        let _ = self.chunk.split_to(n);
        Ok(n)
    }
}

/// Write `bytes` as the object at `url` (tests, tools).
pub fn put_object(url: &str, bytes: Vec<u8>) -> Result<()> {
    let (store, path) = store_for(url)?;
    block_io(async move { store.put(&path, bytes.into()).await })?.map_err(io_error(url))?;
    Ok(())
}

/// The object-store folder a file sink publishes into. Files are written
/// to a local staging folder, uploaded under their hidden in-progress
/// name when closed, and renamed to their final name when published (the
/// store's copy and delete), so readers never see a file half-written and
/// a restore finds every in-progress object to delete.
pub struct RemoteFolder {
    store: Arc<dyn ObjectStore>,
    base: ObjectPath,
    url: String,
}

/// Whether `name` is a sink's in-progress file of a subtask this one
/// cleans up: its own, or (subtask 0) one beyond the parallelism.
pub fn own_in_progress(name: &str, subtask: usize, parallelism: usize) -> bool {
    let writer = name
        .strip_prefix(".part-")
        .and_then(|rest| rest.get(..4))
        .and_then(|n| n.parse::<usize>().ok());
    name.ends_with(".inprogress")
        && writer.is_some_and(|w| w == subtask || (subtask == 0 && w >= parallelism))
}

impl RemoteFolder {
    /// Where a sink of folder `dir` writes: the folder itself (local), or
    /// a staging folder of this process and the store's folder.
    pub fn for_sink(dir: &Path) -> Result<(std::path::PathBuf, Option<Self>)> {
        let text = dir.to_string_lossy().to_string();
        if !is_url(&text) {
            let local = text.strip_prefix("file://").unwrap_or(&text);
            return Ok((std::path::PathBuf::from(local), None));
        }
        let (store, base) = store_for(&text)?;
        let (scheme, rest) = text.split_once("://").unwrap_or(("", &text));
        let staging = std::env::temp_dir()
            .join(format!("weir-staging-{}", std::process::id()))
            .join(scheme)
            .join(rest.trim_start_matches('/'));
        Ok((
            staging,
            Some(Self {
                store,
                base,
                url: text.trim_end_matches('/').to_string(),
            }),
        ))
    }

    fn key(&self, local: &Path) -> ObjectPath {
        let name = local
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        self.base.clone().join(name)
    }

    fn error(&self, what: &str) -> impl Fn(object_store::Error) -> WeirError + '_ {
        let at = format!("{}: {what}", self.url);
        move |e| WeirError::Execution(format!("{at}: {e}"))
    }

    /// Upload a closed staging file under its (hidden) name, then drop it.
    pub fn upload(&self, local: &Path) -> Result<()> {
        let bytes =
            std::fs::read(local).map_err(|e| WeirError::io(local.display().to_string(), e))?;
        let (store, key) = (Arc::clone(&self.store), self.key(local));
        block_io(async move { store.put(&key, bytes.into()).await })?
            .map_err(self.error("upload"))?;
        let _ = std::fs::remove_file(local);
        Ok(())
    }

    /// Give an uploaded file its final name; done already (a restore
    /// publishing it again) is fine.
    pub fn publish(&self, tmp: &Path, fin: &Path) -> Result<()> {
        let (store, from, to) = (Arc::clone(&self.store), self.key(tmp), self.key(fin));
        let renamed = block_io(async move { store.rename(&from, &to).await })?;
        if let Err(e) = renamed {
            let (store, from, to) = (Arc::clone(&self.store), self.key(tmp), self.key(fin));
            let (gone, there) = block_io(async move {
                (
                    store.head(&from).await.is_err(),
                    store.head(&to).await.is_ok(),
                )
            })?;
            if !(gone && there) {
                return Err(self.error("publish")(e));
            }
        }
        Ok(())
    }

    /// Delete the in-progress objects of `subtask` (see [`own_in_progress`]),
    /// in this folder or, `deep`, in every folder under it.
    pub fn remove_in_progress(&self, subtask: usize, parallelism: usize, deep: bool) -> Result<()> {
        let (store, base) = (Arc::clone(&self.store), self.base.clone());
        let found: Vec<ObjectPath> = block_io(async move {
            store
                .list(Some(&base))
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .filter_map(|m| m.ok().map(|m| m.location))
                .collect::<Vec<_>>()
        })?;
        let strip = self.base.as_ref().len();
        for key in found {
            let rel = key
                .as_ref()
                .get(strip..)
                .unwrap_or("")
                .trim_start_matches('/');
            let (folder, name) = rel.rsplit_once('/').unwrap_or(("", rel));
            if (!folder.is_empty() && !deep) || !own_in_progress(name, subtask, parallelism) {
                continue;
            }
            let store = Arc::clone(&self.store);
            block_io(async move { store.delete(&key).await })?.map_err(self.error("delete"))?;
        }
        Ok(())
    }

    /// Write an empty marker object (`_SUCCESS`) into the folder.
    pub fn write_marker(&self, name: &str) -> Result<()> {
        let (store, key) = (Arc::clone(&self.store), self.base.clone().join(name));
        block_io(async move { store.put(&key, Vec::<u8>::new().into()).await })?
            .map_err(self.error("write marker"))?;
        Ok(())
    }
}
