//! The `raw` format: each record is one value of the table's single
//! `STRING` or `BYTES` column — in files, a line.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BinaryBuilder, StringBuilder};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use weir_core::connector::{ConnectorOption, OptionKind, Options};
use weir_core::{Result, WeirError};

use super::{FormatFactory, RowDecoder, RowEncoder};

/// `'format' = 'raw'`.
pub(super) struct Raw;

fn check(schema: &SchemaRef) -> Result<bool> {
    match schema
        .fields()
        .iter()
        .map(|f| f.data_type())
        .collect::<Vec<_>>()
        .as_slice()
    {
        [DataType::Utf8] => Ok(true),
        [DataType::Binary] => Ok(false),
        _ => Err(WeirError::plan(format!(
            "format 'raw' needs exactly one STRING or BYTES column, the table has {}",
            weir_core::time::column_list(schema)
        ))),
    }
}

impl FormatFactory for Raw {
    fn identifier(&self) -> &str {
        "raw"
    }

    fn description(&self) -> &str {
        "each record one value of a single STRING or BYTES column (in files, a line)"
    }

    fn extension(&self) -> &str {
        "txt"
    }

    fn reads_records(&self) -> bool {
        true
    }

    fn options(&self) -> Vec<ConnectorOption> {
        vec![ConnectorOption::optional(
            "raw.charset",
            OptionKind::OneOf(&["UTF-8"]),
            Some("UTF-8"),
            "the text encoding",
        )]
    }

    fn decoder(
        &self,
        schema: &SchemaRef,
        _options: &Options,
        batch_size: usize,
    ) -> Result<Box<dyn RowDecoder>> {
        Ok(Box::new(RawDecoder {
            text: check(schema)?,
            schema: Arc::clone(schema),
            batch_size: batch_size.max(1),
            pending: Vec::new(),
            values: Vec::new(),
            lines: 0,
            ready: Vec::new(),
        }))
    }

    fn encoder(&self, schema: &SchemaRef, _options: &Options) -> Result<Box<dyn RowEncoder>> {
        check(schema)?;
        Ok(Box::new(RawEncoder))
    }
}

struct RawDecoder {
    text: bool,
    schema: SchemaRef,
    batch_size: usize,
    pending: Vec<u8>,
    values: Vec<Vec<u8>>,
    lines: u64,
    /// Batches of whole messages (decode_records).
    ready: Vec<RecordBatch>,
}

impl RawDecoder {
    fn batch(&mut self, rows: usize) -> Result<RecordBatch> {
        let rows: Vec<Vec<u8>> = self.values.drain(..rows).collect();
        let column: ArrayRef = if self.text {
            let mut b = StringBuilder::new();
            for (i, v) in rows.iter().enumerate() {
                let s = std::str::from_utf8(v).map_err(|e| {
                    WeirError::Execution(format!(
                        "line {}: not UTF-8 text: {e}",
                        self.lines - (rows.len() + self.values.len() - i) as u64 + 1
                    ))
                })?;
                b.append_value(s);
            }
            Arc::new(b.finish())
        } else {
            let mut b = BinaryBuilder::new();
            for v in &rows {
                b.append_value(v);
            }
            Arc::new(b.finish())
        };
        Ok(RecordBatch::try_new(
            Arc::clone(&self.schema),
            vec![column],
        )?)
    }
}

impl RowDecoder for RawDecoder {
    fn decode(&mut self, bytes: &[u8]) -> Result<usize> {
        let mut used = 0;
        while self.values.len() < self.batch_size && used < bytes.len() {
            match bytes[used..].iter().position(|&b| b == b'\n') {
                Some(end) => {
                    let mut line = std::mem::take(&mut self.pending);
                    line.extend_from_slice(&bytes[used..used + end]);
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                    self.values.push(line);
                    self.lines += 1;
                    used += end + 1;
                }
                None => {
                    self.pending.extend_from_slice(&bytes[used..]);
                    used = bytes.len();
                }
            }
        }
        Ok(used)
    }

    /// Whole messages, each one value whatever bytes it holds (line
    /// breaks included): one copy into the column, no row at a time.
    fn decode_records(&mut self, bytes: &[u8], ends: &[usize]) -> Result<()> {
        let mut offsets = Vec::with_capacity(ends.len() + 1);
        offsets.push(0i32);
        for &e in ends {
            offsets.push(i32::try_from(e).map_err(|_| {
                WeirError::Execution("raw: more than 2 GiB of messages in one poll".into())
            })?);
        }
        let offsets = arrow::buffer::OffsetBuffer::new(offsets.into());
        let values = arrow::buffer::Buffer::from(bytes);
        let column: ArrayRef = if self.text {
            match arrow::array::StringArray::try_new(offsets.clone(), values.clone(), None) {
                Ok(a) => Arc::new(a),
                Err(_) => {
                    // Name the first record that is not UTF-8.
                    let mut start = 0;
                    for (i, &end) in ends.iter().enumerate() {
                        if let Err(e) = std::str::from_utf8(&bytes[start..end]) {
                            return Err(WeirError::Execution(format!(
                                "line {}: not UTF-8 text: {e}",
                                self.lines + i as u64 + 1
                            )));
                        }
                        start = end;
                    }
                    return Err(WeirError::Execution("raw: not UTF-8 text".into()));
                }
            }
        } else {
            Arc::new(arrow::array::BinaryArray::new(offsets, values, None))
        };
        self.lines += ends.len() as u64;
        self.ready.push(RecordBatch::try_new(
            Arc::clone(&self.schema),
            vec![column],
        )?);
        Ok(())
    }

    /// A record is a line.
    fn start_mid_file(&mut self) -> bool {
        true
    }

    fn between_records(&self) -> bool {
        self.pending.is_empty()
    }

    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if !self.ready.is_empty() {
            return Ok(Some(self.ready.remove(0)));
        }
        if self.values.len() < self.batch_size {
            return Ok(None);
        }
        self.batch(self.batch_size).map(Some)
    }

    fn finish(&mut self) -> Result<Option<RecordBatch>> {
        if !self.ready.is_empty() {
            return Ok(Some(self.ready.remove(0)));
        }
        if !self.pending.is_empty() {
            self.values.push(std::mem::take(&mut self.pending));
            self.lines += 1;
        }
        if self.values.is_empty() {
            return Ok(None);
        }
        let n = self.values.len().min(self.batch_size);
        self.batch(n).map(Some)
    }
}

struct RawEncoder;

impl RowEncoder for RawEncoder {
    fn encode(&mut self, batch: &RecordBatch, out: &mut Vec<u8>) -> Result<()> {
        write(batch, out, None)
    }

    fn encode_records(
        &mut self,
        batch: &RecordBatch,
        out: &mut Vec<u8>,
        ends: &mut Vec<usize>,
    ) -> Result<()> {
        write(batch, out, Some(ends))
    }
}

/// The values of `batch` as lines; where each ends, when asked.
fn write(batch: &RecordBatch, out: &mut Vec<u8>, mut ends: Option<&mut Vec<usize>>) -> Result<()> {
    let column = batch.column(0);
    for row in 0..batch.num_rows() {
        if column.is_valid(row) {
            match column.data_type() {
                DataType::Utf8 => {
                    out.extend_from_slice(column.as_string::<i32>().value(row).as_bytes())
                }
                _ => out.extend_from_slice(column.as_binary::<i32>().value(row)),
            }
        }
        out.push(b'\n');
        if let Some(ends) = ends.as_deref_mut() {
            ends.push(out.len());
        }
    }
    Ok(())
}
