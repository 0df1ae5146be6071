//! Sinks: Parquet and CSV files, print, blackhole and collect.
//!
//! File sinks write each subtask's output to a hidden in-progress file and
//! rename it to `part-<subtask>.<ext>` when the input ends, so a reader never
//! sees a half-written file and a failed job leaves only hidden files behind.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use arrow::csv::Writer as CsvWriter;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use std::sync::Arc;
use weir_core::graph::StreamNode;

use weir_core::sinkhub::{SinkBuffer, SinkHub};
use weir_core::spec::{CollectHandle, SinkSpec};
use weir_core::{Result, WeirError};

use crate::{Operator, OperatorContext, Output};

pub(crate) fn create(
    node: &StreamNode,
    spec: &SinkSpec,
    ctx: &OperatorContext,
) -> Result<Box<dyn Operator>> {
    let name = node.name.clone();
    Ok(match spec {
        SinkSpec::Parquet { dir } => Box::new(FileSink::new(
            name,
            dir,
            ctx.subtask,
            FileFormat::Parquet,
            std::sync::Arc::clone(&node.schema),
        )?),
        SinkSpec::Csv { dir } => Box::new(FileSink::new(
            name,
            dir,
            ctx.subtask,
            FileFormat::Csv,
            std::sync::Arc::clone(&node.schema),
        )?),
        SinkSpec::Print => Box::new(PrintSink {
            name,
            prefix: if ctx.parallelism > 1 {
                format!("{}> ", ctx.subtask + 1)
            } else {
                String::new()
            },
        }),
        SinkSpec::Blackhole => Box::new(BlackholeSink { name }),
        SinkSpec::Throttled { rows_per_second } => {
            if *rows_per_second == 0 {
                return Err(WeirError::plan("a throttled sink needs a positive rate"));
            }
            Box::new(ThrottledSink {
                name,
                rate: *rows_per_second,
                rows: 0,
                started: None,
            })
        }
        SinkSpec::Collect(handle) => Box::new(CollectSink {
            name,
            handle: handle.clone(),
        }),
        SinkSpec::Flight { name: sink } => {
            let buffer =
                SinkHub::global().sink(sink, Arc::clone(&node.schema), ctx.config.sink_retention);
            buffer.open_writer();
            Box::new(FlightSink { name, buffer })
        }
    })
}

#[derive(Clone, Copy)]
enum FileFormat {
    Parquet,
    Csv,
}

enum FileWriter {
    Parquet(ArrowWriter<File>),
    Csv(CsvWriter<BufWriter<File>>),
}

/// Writes one file per subtask, made visible atomically on finish.
struct FileSink {
    name: String,
    tmp_path: PathBuf,
    final_path: PathBuf,
    writer: Option<FileWriter>,
}

impl FileSink {
    fn new(
        name: String,
        dir: &Path,
        subtask: usize,
        format: FileFormat,
        schema: SchemaRef,
    ) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| WeirError::io(dir.display().to_string(), e))?;
        let ext = match format {
            FileFormat::Parquet => "parquet",
            FileFormat::Csv => "csv",
        };
        let final_path = dir.join(format!("part-{subtask:04}.{ext}"));
        let tmp_path = dir.join(format!(".part-{subtask:04}.{ext}.inprogress"));
        let file = File::create(&tmp_path)
            .map_err(|e| WeirError::io(tmp_path.display().to_string(), e))?;
        let location = tmp_path.display().to_string();
        let writer = match format {
            FileFormat::Parquet => {
                let props = WriterProperties::builder()
                    .set_compression(Compression::ZSTD(ZstdLevel::default()))
                    .build();
                FileWriter::Parquet(
                    ArrowWriter::try_new(file, schema, Some(props))
                        .map_err(|e| WeirError::bad_input(location, e.to_string()))?,
                )
            }
            FileFormat::Csv => FileWriter::Csv(
                arrow::csv::WriterBuilder::new()
                    .with_header(true)
                    .build(BufWriter::new(file)),
            ),
        };
        Ok(Self {
            name,
            tmp_path,
            final_path,
            writer: Some(writer),
        })
    }

    fn location(&self) -> String {
        self.tmp_path.display().to_string()
    }
}

impl Operator for FileSink {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, _out: &mut dyn Output) -> Result<()> {
        let location = self.location();
        match self.writer.as_mut() {
            Some(FileWriter::Parquet(w)) => w
                .write(&batch)
                .map_err(|e| WeirError::bad_input(location, e.to_string())),
            Some(FileWriter::Csv(w)) => w.write(&batch).map_err(WeirError::from),
            None => Err(WeirError::Execution(format!(
                "{}: write after finish",
                self.name
            ))),
        }
    }

    fn finish(&mut self, _out: &mut dyn Output) -> Result<()> {
        let location = self.location();
        match self.writer.take() {
            Some(FileWriter::Parquet(w)) => {
                w.close()
                    .map_err(|e| WeirError::bad_input(location.clone(), e.to_string()))?;
            }
            Some(FileWriter::Csv(w)) => {
                let mut inner = w.into_inner();
                inner
                    .flush()
                    .map_err(|e| WeirError::io(location.clone(), e))?;
                inner
                    .get_ref()
                    .sync_all()
                    .map_err(|e| WeirError::io(location.clone(), e))?;
            }
            None => return Ok(()),
        }
        std::fs::rename(&self.tmp_path, &self.final_path)
            .map_err(|e| WeirError::io(self.final_path.display().to_string(), e))
    }
}

/// Prints rows as `+I[v1, v2, …]`, prefixed by the subtask when parallel.
struct PrintSink {
    name: String,
    prefix: String,
}

impl Operator for PrintSink {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, _out: &mut dyn Output) -> Result<()> {
        let options = FormatOptions::default().with_null("NULL");
        let formatters = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let stdout = std::io::stdout();
        let mut lock = stdout.lock();
        for row in 0..batch.num_rows() {
            let values: Vec<String> = formatters
                .iter()
                .map(|f| f.value(row).to_string())
                .collect();
            // A closed stdout (piped into `head`) must not fail the job.
            let _ = writeln!(lock, "{}+I[{}]", self.prefix, values.join(", "));
        }
        Ok(())
    }
}

/// Discards everything.
struct BlackholeSink {
    name: String,
}

impl Operator for BlackholeSink {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, _batch: RecordBatch, _out: &mut dyn Output) -> Result<()> {
        Ok(())
    }
}

/// Discards rows no faster than `rate` per second.
struct ThrottledSink {
    name: String,
    rate: u64,
    rows: u64,
    started: Option<std::time::Instant>,
}

impl Operator for ThrottledSink {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, _out: &mut dyn Output) -> Result<()> {
        let started = *self.started.get_or_insert_with(std::time::Instant::now);
        self.rows += batch.num_rows() as u64;
        let due = std::time::Duration::from_secs_f64(self.rows as f64 / self.rate as f64);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            // Each task has its own thread: sleeping holds back only this
            // task, and through full channels its producers.
            std::thread::sleep(wait);
        }
        Ok(())
    }
}

/// Keeps batches in memory.
struct CollectSink {
    name: String,
    handle: CollectHandle,
}

impl Operator for CollectSink {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, _out: &mut dyn Output) -> Result<()> {
        self.handle.push(batch);
        Ok(())
    }
}

/// Keeps the output in the process's sink hub for Flight clients.
struct FlightSink {
    name: String,
    buffer: Arc<SinkBuffer>,
}

impl Operator for FlightSink {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, _out: &mut dyn Output) -> Result<()> {
        self.buffer.push(batch);
        Ok(())
    }

    fn finish(&mut self, _out: &mut dyn Output) -> Result<()> {
        self.buffer.close_writer();
        Ok(())
    }
}
