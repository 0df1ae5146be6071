//! The disk backend's files: a task's own folder, Arrow IPC files.

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow::array::RecordBatch;
use weir_core::{Result, WeirError};

/// A folder of the task's own under `root`, empty: named by the start of
/// the operator's name (a chain's name can be longer than a file name may
/// be), the subtask, the process and the time.
pub(super) fn task_dir(root: &Path, task: &str, subtask: usize) -> Result<PathBuf> {
    let safe: String = task
        .chars()
        .take(40)
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = root.join(format!("{safe}-{subtask}-{}-{nanos:x}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| {
        WeirError::Execution(format!(
            "state.backend.local-dir: cannot create {}: {e}",
            dir.display()
        ))
    })?;
    Ok(dir)
}

/// A file's I/O or decoding failure, named by the caller with its path.
pub(super) type IoResult<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

pub(super) fn write_ipc(path: &Path, batch: &RecordBatch) -> IoResult<u64> {
    let tmp = path.with_extension("tmp");
    {
        let file = std::io::BufWriter::new(File::create(&tmp)?);
        let mut w = arrow::ipc::writer::FileWriter::try_new(file, &batch.schema())?;
        w.write(batch)?;
        w.finish()?;
    }
    std::fs::rename(&tmp, path)?;
    Ok(std::fs::metadata(path)?.len())
}

pub(super) fn read_ipc(path: &Path) -> IoResult<Vec<RecordBatch>> {
    let file = std::io::BufReader::new(File::open(path)?);
    let reader = arrow::ipc::reader::FileReader::try_new(file, None)?;
    Ok(reader.collect::<std::result::Result<Vec<_>, _>>()?)
}
