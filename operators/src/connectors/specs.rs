//! The typed descriptions of Weir's built-in file and generator sources,
//! which their factories plan and read back in every subtask (the
//! `planned` form of a [`ConnectorSource`]).

use std::path::PathBuf;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use weir_core::spec::{ConnectorSource, SourceSpec};
use weir_core::{Result, WeirError};

/// How a generated column's values are derived from the event index `n`.
/// Every value is a pure function of `(seed, n)`, so splitting the sequence
/// across subtasks or replaying it yields the same events.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum ColumnGen {
    /// `Int64`: the event index `n` itself.
    Sequence,
    /// `Int64`: uniform in `[min, max]`.
    UniformInt {
        /// Smallest value.
        min: i64,
        /// Largest value (inclusive).
        max: i64,
    },
    /// `Float64`: uniform in `[min, max)`.
    UniformFloat {
        /// Smallest value.
        min: f64,
        /// Upper bound (exclusive).
        max: f64,
    },
    /// `Int64`: a key uniform in `[0, cardinality)`.
    Key {
        /// Number of distinct keys.
        cardinality: u64,
    },
    /// `Timestamp(Millisecond)`: `start + n * 1000 / events_per_second`, moved
    /// back by a pseudo-random delay in `[0, max_out_of_orderness]` ms.
    EventTime {
        /// Event time of event 0, ms since the epoch.
        start_ms: i64,
        /// How fast event time advances relative to the event index.
        events_per_second: u64,
        /// Largest delay applied to an event, in ms.
        max_out_of_orderness_ms: i64,
    },
    /// `Utf8`: one of the given strings, chosen uniformly.
    Choice(Vec<String>),
    /// `Utf8`: a pseudo-random string of `length` letters and digits.
    RandomString {
        /// Characters per value.
        length: usize,
    },
}

impl ColumnGen {
    /// Arrow type of the generated column.
    pub fn data_type(&self) -> DataType {
        match self {
            ColumnGen::Sequence | ColumnGen::UniformInt { .. } | ColumnGen::Key { .. } => {
                DataType::Int64
            }
            ColumnGen::UniformFloat { .. } => DataType::Float64,
            ColumnGen::EventTime { .. } => DataType::Timestamp(TimeUnit::Millisecond, None),
            ColumnGen::Choice(_) | ColumnGen::RandomString { .. } => DataType::Utf8,
        }
    }
}

/// A deterministic data generator (Flink's `datagen`/sequence source).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GeneratorSpec {
    /// Total events; `None` is unbounded.
    pub num_events: Option<u64>,
    /// Events per second over all subtasks; `None` is as fast as possible.
    pub rate: Option<u64>,
    /// Seed of every pseudo-random column.
    pub seed: u64,
    /// Generated columns, in order.
    pub columns: Vec<(String, ColumnGen)>,
    /// Generate the Nexmark benchmark's events instead of `columns`.
    #[serde(default)]
    pub nexmark: Option<crate::nexmark::NexmarkConfig>,
}

impl GeneratorSpec {
    /// An empty generator of `num_events` events (add columns with [`Self::column`]).
    pub fn new(num_events: Option<u64>) -> Self {
        Self {
            num_events,
            rate: None,
            seed: 0,
            columns: vec![],
            nexmark: None,
        }
    }

    /// A generator of Nexmark events (Person, Auction, Bid).
    pub fn nexmark(config: crate::nexmark::NexmarkConfig) -> Self {
        Self {
            num_events: config.events,
            rate: config.rate,
            seed: 0,
            columns: vec![],
            nexmark: Some(config),
        }
    }

    /// Add a generated column.
    pub fn column(mut self, name: impl Into<String>, generator: ColumnGen) -> Self {
        self.columns.push((name.into(), generator));
        self
    }

    /// Limit the generation rate (events per second, all subtasks together).
    pub fn rate(mut self, events_per_second: u64) -> Self {
        self.rate = Some(events_per_second);
        self
    }

    /// Set the seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The schema of generated batches.
    pub fn schema(&self) -> SchemaRef {
        if self.nexmark.is_some() {
            return crate::nexmark::schema();
        }
        Arc::new(Schema::new(
            self.columns
                .iter()
                .map(|(n, g)| Field::new(n, g.data_type(), false))
                .collect::<Vec<_>>(),
        ))
    }

    /// Check the definition (ranges, non-empty choices, a positive rate).
    pub fn validate(&self) -> Result<()> {
        if let Some(n) = &self.nexmark {
            return n.validate();
        }
        if self.columns.is_empty() {
            return Err(WeirError::plan("generator source has no columns"));
        }
        for (name, g) in &self.columns {
            let bad = match g {
                ColumnGen::UniformInt { min, max } => min > max,
                ColumnGen::UniformFloat { min, max } => {
                    min.partial_cmp(max) != Some(std::cmp::Ordering::Less)
                }
                ColumnGen::Key { cardinality } => *cardinality == 0,
                ColumnGen::EventTime {
                    events_per_second,
                    max_out_of_orderness_ms,
                    ..
                } => *events_per_second == 0 || *max_out_of_orderness_ms < 0,
                ColumnGen::Choice(c) => c.is_empty(),
                ColumnGen::Sequence => false,
                ColumnGen::RandomString { length } => *length > 1 << 20,
            };
            if bad {
                return Err(WeirError::plan(format!(
                    "generator column '{name}' has an invalid definition: {g:?}"
                )));
            }
        }
        if self.rate == Some(0) {
            return Err(WeirError::plan("generator rate must be positive"));
        }
        Ok(())
    }
}

/// A bounded source reading Parquet files; built by
/// `weir_operators::sources::parquet_source`, which reads the footers.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ParquetSourceSpec {
    /// The files, in a fixed order; their row groups are the splits.
    pub files: Vec<PathBuf>,
    /// Row-group count of each file (same order as `files`).
    pub row_groups: Vec<usize>,
    /// Schema of the files (before projection).
    pub file_schema: SchemaRef,
    /// Columns to read (projection pushdown); `None` reads all.
    pub projection: Option<Vec<usize>>,
    /// The row groups of each file to read, when a filter's predicates
    /// ruled some out by their statistics; `None` reads all.
    #[serde(default)]
    pub selection: Option<Vec<Vec<usize>>>,
    /// Rows of a row group to read, when the page index ruled some of its
    /// pages out.
    #[serde(default)]
    pub pages: Vec<PageSelection>,
}

/// The rows of one row group the page index leaves to read: (file, row
/// group, [(first row, rows)]).
pub type PageSelection = (usize, usize, Vec<(usize, usize)>);

/// A bounded source reading text files of a row format (`csv`, `json`,
/// `raw`); built by `weir_operators::sources::csv_source` or
/// `format_source`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TextSourceSpec {
    /// The format's identifier.
    pub format: String,
    /// The files; each file is one split.
    pub files: Vec<PathBuf>,
    /// Schema of the rows.
    pub schema: SchemaRef,
    /// The format's options (`csv.field-delimiter`, …).
    #[serde(default)]
    pub options: weir_core::connector::Options,
    /// Columns to read (indices of `schema`), when the format decodes
    /// only what is asked for; `None` reads all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection: Option<Vec<usize>>,
}

impl GeneratorSpec {
    /// The generator as a source of the `datagen` (or, generating Nexmark
    /// events, `nexmark`) connector.
    pub fn into_source(self) -> SourceSpec {
        let (connector, shown) = if self.nexmark.is_some() {
            ("nexmark", "nexmark")
        } else {
            ("datagen", "generator")
        };
        let display = match self.num_events {
            Some(n) => format!("{shown}({n} events)"),
            None => format!("{shown}(unbounded)"),
        };
        let schema = self.schema();
        let bounded = self.num_events.is_some();
        let planned = serde_json::to_value(&self).unwrap_or_default();
        SourceSpec::Connector(
            ConnectorSource::new(connector, schema, bounded, planned).with_display(display),
        )
    }
}

impl From<GeneratorSpec> for SourceSpec {
    fn from(g: GeneratorSpec) -> Self {
        g.into_source()
    }
}

/// How plans name a list of files: the first three and the count.
pub(crate) fn describe_files(files: &[PathBuf]) -> String {
    let shown: Vec<String> = files
        .iter()
        .take(3)
        .map(|f| f.display().to_string())
        .collect();
    if files.len() > 3 {
        format!("{}, … {} files", shown.join(", "), files.len())
    } else {
        shown.join(", ")
    }
}

impl ParquetSourceSpec {
    /// Schema of the batches read (after the projection).
    pub fn schema(&self) -> SchemaRef {
        match &self.projection {
            Some(proj) => self
                .file_schema
                .project(proj)
                .map(Arc::new)
                .unwrap_or_else(|_| Arc::new(Schema::empty())),
            None => Arc::clone(&self.file_schema),
        }
    }

    /// Check the listing agrees with itself.
    pub fn validate(&self) -> Result<()> {
        if self.files.is_empty() {
            return Err(WeirError::plan("Parquet source has no files"));
        }
        if self.row_groups.len() != self.files.len() {
            return Err(WeirError::plan(format!(
                "Parquet source lists {} files but row-group counts for {}",
                self.files.len(),
                self.row_groups.len()
            )));
        }
        if let Some(proj) = &self.projection
            && proj.iter().any(|&i| i >= self.file_schema.fields().len())
        {
            return Err(WeirError::plan(format!(
                "Parquet source projects columns {proj:?} of a {}-column file schema",
                self.file_schema.fields().len()
            )));
        }
        Ok(())
    }

    /// The files as a source of the `filesystem` connector.
    pub fn into_source(self) -> SourceSpec {
        let mut display = format!("parquet({})", describe_files(&self.files));
        if self.projection.is_some() {
            let schema = self.schema();
            let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            display.push_str(&format!(" [columns {}]", names.join(", ")));
        }
        if let Some(sel) = &self.selection {
            let chosen: usize = sel.iter().map(Vec::len).sum();
            let all: usize = self.row_groups.iter().sum();
            display.push_str(&format!(" [{chosen} of {all} row groups]"));
        }
        if !self.pages.is_empty() {
            let kept: usize = self
                .pages
                .iter()
                .flat_map(|(_, _, r)| r.iter().map(|(_, n)| n))
                .sum();
            display.push_str(&format!(
                " [pages pruned in {} row groups: {kept} rows kept]",
                self.pages.len()
            ));
        }
        let schema = self.schema();
        let planned = serde_json::to_value(FilePlan::Parquet(self)).unwrap_or_default();
        SourceSpec::Connector(
            ConnectorSource::new("filesystem", schema, true, planned).with_display(display),
        )
    }
}

impl From<ParquetSourceSpec> for SourceSpec {
    fn from(p: ParquetSourceSpec) -> Self {
        p.into_source()
    }
}

impl TextSourceSpec {
    /// Check the listing.
    pub fn validate(&self) -> Result<()> {
        if self.files.is_empty() {
            return Err(WeirError::plan(format!(
                "{} source has no files",
                self.format
            )));
        }
        Ok(())
    }

    /// Schema of the rows read (after the projection).
    pub fn read_schema(&self) -> Result<SchemaRef> {
        Ok(match &self.projection {
            Some(p) => Arc::new(self.schema.project(p)?),
            None => Arc::clone(&self.schema),
        })
    }

    /// A decoder of the rows read.
    pub fn decoder(&self, batch_size: usize) -> Result<Box<dyn crate::formats::RowDecoder>> {
        let formats = crate::formats::formats();
        let format = formats.get(&self.format)?;
        match &self.projection {
            None => format.decoder(&self.schema, &self.options, batch_size),
            Some(p) => format
                .projected_decoder(&self.schema, p, &self.options, batch_size)?
                .ok_or_else(|| {
                    WeirError::plan(format!(
                        "format '{}' cannot read some columns only",
                        self.format
                    ))
                }),
        }
    }

    /// The files as a source of the `filesystem` connector.
    pub fn into_source(self) -> SourceSpec {
        let mut display = format!("{}({})", self.format, describe_files(&self.files));
        let read = self
            .read_schema()
            .unwrap_or_else(|_| Arc::clone(&self.schema));
        if self.projection.is_some() {
            let names: Vec<&str> = read.fields().iter().map(|f| f.name().as_str()).collect();
            display.push_str(&format!(" [columns {}]", names.join(", ")));
        }
        let schema = crate::formats::produced_schema(&self.format, &read);
        let changelog = crate::formats::produced_changelog(&self.format);
        let planned = serde_json::to_value(FilePlan::Text(self)).unwrap_or_default();
        SourceSpec::Connector(
            ConnectorSource::new("filesystem", schema, true, planned)
                .with_display(display)
                .with_changelog(changelog),
        )
    }
}

/// What a `filesystem` source reads, as planned.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FilePlan {
    /// Parquet files and their row groups.
    Parquet(ParquetSourceSpec),
    /// Text files of a row format.
    Text(TextSourceSpec),
    /// The Hive folders of a `PARTITIONED BY` table.
    Partitioned(PartitionedPlan),
    /// A folder watched for new files (`source.monitor-interval`).
    Monitored(MonitoredPlan),
}

/// The partitions a `PARTITIONED BY` table's source reads.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PartitionedPlan {
    /// The partition columns, in folder order.
    pub keys: Vec<String>,
    /// The table's columns (partition columns included), in order.
    pub schema: SchemaRef,
    /// How many partitions the folder has (before a filter's pruning).
    pub all: usize,
    /// The partitions read.
    pub parts: Vec<PartitionFiles>,
}

/// One partition: its folder, its values and its files.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PartitionFiles {
    /// `col=value/…`, relative to the table's path.
    pub folder: String,
    /// The values of the partition columns (`None`: the default name).
    pub values: Vec<Option<String>>,
    /// Its files, as the format's source reads them.
    pub files: FilePlan,
}

/// A folder a source keeps reading new files from.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MonitoredPlan {
    /// The folder (local path or store URL).
    pub path: String,
    /// The format's identifier.
    pub format: String,
    /// The format's options.
    #[serde(default)]
    pub options: weir_core::connector::Options,
    /// The rows' schema.
    pub schema: SchemaRef,
    /// How often the folder is listed, ms.
    pub interval_ms: u64,
}
