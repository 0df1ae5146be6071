//! `weir state inspect`: what a checkpoint folder holds, checked.

use std::path::Path;
use std::process::ExitCode;

use crate::Outcome;

/// `weir state inspect DIR`: every checkpoint of a run (or `DIR/chk-N`
/// alone), its operators, tables and files; each file is checked against
/// the manifest (present, its size, a Parquet footer) and a damaged one is
/// flagged, with a non-zero exit.
pub(crate) fn inspect(path: &std::path::Path) -> Outcome {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let (dir, id) = match name
        .strip_prefix("chk-")
        .and_then(|n| n.parse::<u64>().ok())
    {
        Some(id) => (path.parent().unwrap_or(path).to_path_buf(), Some(id)),
        None => (path.to_path_buf(), None),
    };
    if !dir.is_dir() {
        return Err(format!("{} is not a checkpoint folder", path.display()));
    }
    let storage = weir_state::CheckpointStorage::open(&dir.display().to_string())
        .map_err(|e| e.to_string())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let ids = match id {
        Some(id) => vec![id],
        None => runtime
            .block_on(storage.completed())
            .map_err(|e| e.to_string())?,
    };
    if ids.is_empty() {
        return Err(format!(
            "{}: no completed checkpoint (no chk-N/_metadata)",
            dir.display()
        ));
    }
    let mut out = std::io::stdout().lock();
    match print_manifests(&mut out, &runtime, &storage, &dir, &ids) {
        Err(PrintError::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            Ok(ExitCode::SUCCESS)
        }
        Err(PrintError::Io(e)) => Err(e.to_string()),
        Err(PrintError::Weir(e)) => Err(e),
        Ok(0) => Ok(ExitCode::SUCCESS),
        Ok(damaged) => Err(format!(
            "{damaged} state file(s) under {} are missing or damaged (marked above)",
            dir.display()
        )),
    }
}

enum PrintError {
    Io(std::io::Error),
    Weir(String),
}

fn print_manifests(
    out: &mut impl std::io::Write,
    runtime: &tokio::runtime::Runtime,
    storage: &weir_state::CheckpointStorage,
    dir: &std::path::Path,
    ids: &[u64],
) -> Result<usize, PrintError> {
    let mut damaged = 0;
    for &id in ids {
        let m = runtime
            .block_on(storage.manifest(id))
            .map_err(|e| PrintError::Weir(e.to_string()))?;
        writeln!(
            out,
            "checkpoint {} of '{}' at {} ms, max parallelism {}, {} subtasks, {} bytes",
            m.checkpoint_id,
            m.job_name,
            m.timestamp_ms,
            m.max_parallelism,
            m.subtasks.len(),
            m.bytes()
        )
        .map_err(PrintError::Io)?;
        for s in &m.subtasks {
            for op in &s.operators {
                for t in &op.tables {
                    let problem = check_file(dir, &t.path, t.bytes);
                    damaged += usize::from(problem.is_some());
                    writeln!(
                        out,
                        "  vertex {} subtask {} {:<24} {:<8} kg [{}, {}) {:>9} rows {:>10} bytes  {}{}",
                        s.vertex,
                        s.subtask,
                        op.uid,
                        t.name,
                        t.key_group_start,
                        t.key_group_end,
                        t.rows,
                        t.bytes,
                        dir.join(&t.path).display(),
                        problem.map(|p| format!("  ** {p}")).unwrap_or_default()
                    )
                    .map_err(PrintError::Io)?;
                }
            }
        }
    }
    Ok(damaged)
}

/// What is wrong with state file `name` of `dir` that the manifest says
/// holds `bytes`: missing, outside the folder, another size (truncated), or
/// no Parquet footer.
fn check_file(dir: &Path, name: &str, bytes: u64) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let relative = Path::new(name);
    if relative.is_absolute()
        || relative
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return Some("OUTSIDE THE CHECKPOINT FOLDER (not read)".into());
    }
    let path = dir.join(relative);
    let size = match std::fs::metadata(&path) {
        Ok(m) => m.len(),
        Err(_) => return Some("MISSING".into()),
    };
    if size != bytes {
        return Some(format!("TRUNCATED OR CHANGED: {size} bytes on disk"));
    }
    let mut tail = [0u8; 4];
    let footer = std::fs::File::open(&path)
        .and_then(|mut f| {
            f.seek(SeekFrom::End(-4))?;
            f.read_exact(&mut tail)
        })
        .is_ok_and(|_| &tail == b"PAR1");
    (!footer).then(|| "DAMAGED: no Parquet footer".into())
}
