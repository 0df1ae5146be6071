//! The bounded Parquet file source.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader,
    ParquetRecordBatchReaderBuilder, RowSelection,
};
use parquet::file::metadata::PageIndexPolicy;
use weir_core::spec::SourceSpec;
use weir_core::time::column_list;
use weir_core::{Result, WeirError};

use super::read_ahead::SplitReader;
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
    parquet_files_source(paths, projection, Some("parquet"), &[])
}

/// As [`parquet_source`], a directory's files taken when they end in
/// `extension` (all of them without one: the filesystem connector).
/// Row groups whose statistics prove that no row passes `filters` are
/// left out.
pub(crate) fn parquet_files_source(
    paths: &[impl AsRef<Path>],
    projection: Option<&[&str]>,
    extension: Option<&str>,
    filters: &[datafusion_expr::Expr],
) -> Result<SourceSpec> {
    let paths: Vec<PathBuf> = paths.iter().map(|p| p.as_ref().to_path_buf()).collect();
    let files = expand_paths(&paths, extension)?;
    let mut schema = None;
    let mut row_groups = Vec::with_capacity(files.len());
    let mut selection = Vec::new();
    let mut pages = Vec::new();
    for f in &files {
        let file = AnyFile::open(f)?;
        // With a filter, the page index too (when the file has one).
        let options = ArrowReaderOptions::new().with_page_index_policy(if filters.is_empty() {
            PageIndexPolicy::Skip
        } else {
            PageIndexPolicy::Optional
        });
        let builder = weir_core::error::guard_decoder(
            || f.display().to_string(),
            || {
                ArrowReaderMetadata::load(&file, options.clone())
                    .and_then(|meta| with_plain_strings(meta, options))
                    .map(|meta| ParquetRecordBatchReaderBuilder::new_with_metadata(file, meta))
                    .map_err(|e| {
                        WeirError::bad_input(
                            f.display().to_string(),
                            format!("not a readable Parquet file: {e}"),
                        )
                    })
            },
        )?;
        row_groups.push(builder.metadata().num_row_groups());
        if !filters.is_empty() {
            let chosen = crate::connectors::row_groups_to_read(
                builder.metadata(),
                builder.schema(),
                filters,
            );
            tracing::info!(
                "{}: reading {} of {} row groups (the others fail the filter by their statistics)",
                f.display(),
                chosen.len(),
                builder.metadata().num_row_groups()
            );
            for &rg in &chosen {
                let Some(ranges) = crate::connectors::rows_to_read(
                    builder.metadata(),
                    builder.schema(),
                    filters,
                    rg,
                ) else {
                    continue;
                };
                let kept: usize = ranges.iter().map(|r| r.len()).sum();
                tracing::info!(
                    "{} (row group {rg}): reading {kept} of {} rows (pages the page index \
                     rules out are skipped)",
                    f.display(),
                    builder.metadata().row_group(rg).num_rows()
                );
                pages.push((
                    selection.len(),
                    rg,
                    ranges.iter().map(|r| (r.start, r.len())).collect(),
                ));
            }
            selection.push(chosen);
        }
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
    let all: usize = row_groups.iter().sum();
    let chosen: usize = selection.iter().map(Vec::len).sum();
    Ok(ParquetSourceSpec {
        files,
        row_groups,
        file_schema,
        projection,
        selection: (!filters.is_empty() && chosen < all).then_some(selection),
        pages,
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
    reader: OpenSplit<SplitReader<ParquetRecordBatchReader>>,
    /// Whether row groups are decoded ahead on rayon's pool.
    read_ahead: bool,
    /// The split to read after the open one, already decoding.
    ahead: Option<(usize, SplitReader<ParquetRecordBatchReader>, String)>,
    batch_size: usize,
    /// Each file's footer, read once (a remote footer is a request).
    footers: std::collections::HashMap<usize, ArrowReaderMetadata>,
}

/// A Parquet file on disk or in an object store.
pub(crate) enum AnyFile {
    Local(File),
    Object(crate::storage::ObjectFile),
}

impl AnyFile {
    pub(crate) fn open(path: &Path) -> Result<Self> {
        let name = path.display().to_string();
        if crate::storage::is_url(&name) {
            Ok(AnyFile::Object(crate::storage::ObjectFile::open(&name)?))
        } else {
            let local = name.strip_prefix("file://").unwrap_or(&name);
            Ok(AnyFile::Local(
                File::open(local).map_err(|e| WeirError::io(name.clone(), e))?,
            ))
        }
    }
}

impl parquet::file::reader::Length for AnyFile {
    fn len(&self) -> u64 {
        match self {
            AnyFile::Local(f) => parquet::file::reader::Length::len(f),
            AnyFile::Object(o) => parquet::file::reader::Length::len(o),
        }
    }
}

impl parquet::file::reader::ChunkReader for AnyFile {
    type T = Box<dyn std::io::Read + Send>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        Ok(match self {
            AnyFile::Local(f) => Box::new(parquet::file::reader::ChunkReader::get_read(f, start)?),
            AnyFile::Object(o) => Box::new(parquet::file::reader::ChunkReader::get_read(o, start)?),
        })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<bytes::Bytes> {
        match self {
            AnyFile::Local(f) => parquet::file::reader::ChunkReader::get_bytes(f, start, length),
            AnyFile::Object(o) => parquet::file::reader::ChunkReader::get_bytes(o, start, length),
        }
    }
}

impl ParquetSource {
    pub(crate) fn new(spec: ParquetSourceSpec, ctx: &OperatorContext) -> Self {
        let splits: Vec<(usize, usize)> = match &spec.selection {
            Some(sel) => sel
                .iter()
                .enumerate()
                .flat_map(|(f, rgs)| rgs.iter().map(move |&rg| (f, rg)))
                .collect(),
            None => spec
                .row_groups
                .iter()
                .enumerate()
                .flat_map(|(f, &n)| (0..n).map(move |rg| (f, rg)))
                .collect(),
        };
        Self {
            cursor: SplitCursor::new(splits.len(), ctx),
            spec,
            splits,
            reader: None,
            read_ahead: super::read_ahead::worth_it(ctx.parallelism),
            ahead: None,
            batch_size: ctx.config.batch_size,
            footers: Default::default(),
        }
    }
}

/// Weir's strings are `Utf8` (and bytes `Binary`): a file whose Arrow
/// schema has string or binary views (as DuckDB, DataFusion and tpchgen
/// write them) is decoded straight into those, instead of into views that
/// every query would then cast.
fn with_plain_strings(
    meta: ArrowReaderMetadata,
    options: ArrowReaderOptions,
) -> parquet::errors::Result<ArrowReaderMetadata> {
    use arrow::datatypes::{DataType, Schema};
    let schema = meta.schema();
    let plain = |t: &DataType| match t {
        DataType::Utf8View => Some(DataType::Utf8),
        DataType::BinaryView => Some(DataType::Binary),
        _ => None,
    };
    if !schema
        .fields()
        .iter()
        .any(|f| plain(f.data_type()).is_some())
    {
        return Ok(meta);
    }
    let fields: Vec<_> = schema
        .fields()
        .iter()
        .map(|f| match plain(f.data_type()) {
            Some(t) => Arc::new(f.as_ref().clone().with_data_type(t)),
            None => Arc::clone(f),
        })
        .collect();
    let hint = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
    ArrowReaderMetadata::try_new(Arc::clone(meta.metadata()), options.with_schema(hint))
}

fn open_split(
    spec: &ParquetSourceSpec,
    footers: &mut std::collections::HashMap<usize, ArrowReaderMetadata>,
    batch_size: usize,
    file_idx: usize,
    rg: usize,
    skip: u64,
) -> Result<(ParquetRecordBatchReader, String)> {
    let path = &spec.files[file_idx];
    let location = format!("{} (row group {rg})", path.display());
    let file = AnyFile::open(path)?;
    let rows = spec
        .pages
        .iter()
        .find(|(f, g, _)| *f == file_idx && *g == rg)
        .map(|(_, _, ranges)| ranges);
    let meta = match footers.get(&file_idx) {
        Some(m) => m.clone(),
        None => {
            // The offset index lets a row selection skip whole pages.
            let with_pages = spec.pages.iter().any(|(f, _, _)| *f == file_idx);
            let options = ArrowReaderOptions::new().with_page_index_policy(if with_pages {
                PageIndexPolicy::Optional
            } else {
                PageIndexPolicy::Skip
            });
            let m = ArrowReaderMetadata::load(&file, options.clone())
                .and_then(|m| with_plain_strings(m, options))
                .map_err(|e| WeirError::bad_input(location.clone(), e.to_string()))?;
            footers.insert(file_idx, m.clone());
            m
        }
    };
    let builder = ParquetRecordBatchReaderBuilder::new_with_metadata(file, meta);
    if builder.schema().fields() != spec.file_schema.fields() {
        return Err(WeirError::bad_input(
            location,
            "file schema changed since the job was planned",
        ));
    }
    let total = builder.metadata().row_group(rg).num_rows() as usize;
    let mut builder = builder.with_row_groups(vec![rg]);
    if let Some(ranges) = rows {
        let ranges = ranges.iter().map(|&(start, n)| start..start + n);
        builder = builder.with_row_selection(RowSelection::from_consecutive_ranges(ranges, total));
    }
    // A restored position counts the rows emitted, which are the selected.
    let mut builder = builder
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
    fn splits_done(&self) -> Option<(u64, u64)> {
        Some(self.cursor.done())
    }

    /// When the source's subtasks leave cores idle, row groups are decoded
    /// on rayon's pool ([`super::read_ahead`]): the open one and the next
    /// this subtask reads, while the task runs its operators.
    fn poll_next(&mut self) -> Result<SourcePoll> {
        let (spec, batch_size, splits) = (&self.spec, self.batch_size, &self.splits);
        let read_ahead = self.read_ahead;
        let describe: super::read_ahead::Describe = |e| e.to_string();
        let (footers, ahead) = (&mut self.footers, &mut self.ahead);
        let split = |k: usize| {
            splits.get(k).copied().ok_or_else(|| {
                WeirError::Execution(format!(
                    "checkpointed split {k} is not in this source ({} splits): \
                     its files changed",
                    splits.len()
                ))
            })
        };
        poll_splits(
            &mut self.reader,
            &mut self.cursor,
            |k, skip, following| {
                let open = match ahead.take() {
                    Some((j, reader, location)) if j == k && skip == 0 => (reader, location),
                    _ => {
                        let (f, rg) = split(k)?;
                        let (reader, location) =
                            open_split(spec, footers, batch_size, f, rg, skip)?;
                        (
                            SplitReader::new(reader, &location, read_ahead, describe),
                            location,
                        )
                    }
                };
                // A split that fails to open here fails again, with its
                // error, when its turn comes.
                *ahead = following
                    .filter(|_| read_ahead)
                    .and_then(|j| split(j).ok().map(|s| (j, s)))
                    .and_then(|(j, (f, rg))| {
                        let (reader, location) =
                            open_split(spec, footers, batch_size, f, rg, 0).ok()?;
                        Some((
                            j,
                            SplitReader::new(reader, &location, true, describe),
                            location,
                        ))
                    });
                Ok(open)
            },
            String::clone,
        )
    }

    /// `split` (row group `k` in file order) and `rows_read` of each row
    /// group not yet finished (see [`SplitCursor`]).
    fn snapshot_position(&mut self, _checkpoint: u64) -> Result<arrow::record_batch::RecordBatch> {
        self.cursor.snapshot()
    }

    fn restore_position(&mut self, positions: Vec<arrow::record_batch::RecordBatch>) -> Result<()> {
        self.reader = None;
        self.ahead = None;
        self.cursor.restore(positions)
    }
}
