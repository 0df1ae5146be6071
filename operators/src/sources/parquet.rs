//! The bounded Parquet file source.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use weir_core::spec::SourceSpec;
use weir_core::time::column_list;
use weir_core::{Result, WeirError};

use super::{OpenSplit, Source, SourcePoll, SplitCursor, expand_paths, poll_splits};
use crate::OperatorContext;
use crate::connectors::ParquetSourceSpec;

/// Describe a Parquet source: expands directories, reads every footer (so a
/// missing or unreadable file fails here, before the job runs), checks the
/// files agree on the schema and resolves the projection.
pub fn parquet_source(
    paths: &[impl AsRef<Path>],
    projection: Option<&[&str]>,
) -> Result<SourceSpec> {
    parquet_files_source(paths, projection, Some("parquet"))
}

/// As [`parquet_source`], a directory's files taken when they end in
/// `extension` (all of them without one: the filesystem connector).
pub(crate) fn parquet_files_source(
    paths: &[impl AsRef<Path>],
    projection: Option<&[&str]>,
    extension: Option<&str>,
) -> Result<SourceSpec> {
    let paths: Vec<PathBuf> = paths.iter().map(|p| p.as_ref().to_path_buf()).collect();
    let files = expand_paths(&paths, extension)?;
    let mut schema = None;
    let mut row_groups = Vec::with_capacity(files.len());
    for f in &files {
        let file = File::open(f).map_err(|e| WeirError::io(f.display().to_string(), e))?;
        let builder = weir_core::error::guard_decoder(
            || f.display().to_string(),
            || {
                ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| {
                    WeirError::bad_input(
                        f.display().to_string(),
                        format!("not a readable Parquet file: {e}"),
                    )
                })
            },
        )?;
        row_groups.push(builder.metadata().num_row_groups());
        let s = Arc::clone(builder.schema());
        match &schema {
            None => schema = Some((s, f.clone())),
            Some((first, first_file)) if first.fields() != s.fields() => {
                return Err(WeirError::bad_input(
                    f.display().to_string(),
                    format!(
                        "schema [{}] differs from [{}] of {}",
                        column_list(&s),
                        column_list(first),
                        first_file.display()
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    let (file_schema, _) = schema.expect("at least one file");
    let projection = match projection {
        Some(cols) => Some(
            cols.iter()
                .map(|c| {
                    file_schema.index_of(c).map_err(|_| {
                        WeirError::bad_input(
                            files[0].display().to_string(),
                            format!(
                                "has no column '{c}'; columns: {}",
                                column_list(&file_schema)
                            ),
                        )
                    })
                })
                .collect::<Result<Vec<_>>>()?,
        ),
        None => None,
    };
    Ok(ParquetSourceSpec {
        files,
        row_groups,
        file_schema,
        projection,
    }
    .into_source())
}

/// Reads the row groups assigned to one subtask: split `k` (in file order,
/// then row-group order) goes to subtask `k mod parallelism`.
pub struct ParquetSource {
    spec: ParquetSourceSpec,
    /// Every split of the source: (file, row group).
    splits: Vec<(usize, usize)>,
    cursor: SplitCursor,
    reader: OpenSplit<ParquetRecordBatchReader>,
    batch_size: usize,
}

impl ParquetSource {
    pub(crate) fn new(spec: ParquetSourceSpec, ctx: &OperatorContext) -> Self {
        let splits: Vec<(usize, usize)> = spec
            .row_groups
            .iter()
            .enumerate()
            .flat_map(|(f, &n)| (0..n).map(move |rg| (f, rg)))
            .collect();
        Self {
            cursor: SplitCursor::new(splits.len(), ctx),
            spec,
            splits,
            reader: None,
            batch_size: ctx.config.batch_size,
        }
    }
}

fn open_split(
    spec: &ParquetSourceSpec,
    batch_size: usize,
    file_idx: usize,
    rg: usize,
    skip: u64,
) -> Result<(ParquetRecordBatchReader, String)> {
    let path = &spec.files[file_idx];
    let location = format!("{} (row group {rg})", path.display());
    let file = File::open(path).map_err(|e| WeirError::io(path.display().to_string(), e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| WeirError::bad_input(location.clone(), e.to_string()))?;
    if builder.schema().fields() != spec.file_schema.fields() {
        return Err(WeirError::bad_input(
            location,
            "file schema changed since the job was planned",
        ));
    }
    let mut builder = builder
        .with_row_groups(vec![rg])
        .with_offset(skip as usize)
        .with_batch_size(batch_size);
    if let Some(proj) = &spec.projection {
        let mask = ProjectionMask::roots(builder.parquet_schema(), proj.iter().copied());
        builder = builder.with_projection(mask);
    }
    let reader = builder
        .build()
        .map_err(|e| WeirError::bad_input(location.clone(), e.to_string()))?;
    Ok((reader, location))
}

impl Source for ParquetSource {
    fn poll_next(&mut self) -> Result<SourcePoll> {
        let (spec, batch_size, splits) = (&self.spec, self.batch_size, &self.splits);
        poll_splits(
            &mut self.reader,
            &mut self.cursor,
            |k, skip| {
                let &(f, rg) = splits.get(k).ok_or_else(|| {
                    WeirError::Execution(format!(
                        "checkpointed split {k} is not in this source ({} splits): \
                         its files changed",
                        splits.len()
                    ))
                })?;
                open_split(spec, batch_size, f, rg, skip)
            },
            |e| e.to_string(),
        )
    }

    /// `split` (row group `k` in file order) and `rows_read` of each row
    /// group not yet finished (see [`SplitCursor`]).
    fn snapshot_position(&mut self) -> Result<arrow::record_batch::RecordBatch> {
        self.cursor.snapshot()
    }

    fn restore_position(&mut self, positions: Vec<arrow::record_batch::RecordBatch>) -> Result<()> {
        self.reader = None;
        self.cursor.restore(positions)
    }
}
