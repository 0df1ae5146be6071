//! A CSV column's values as the records arrive: as text, or, for BIGINT
//! and TIMESTAMP columns, read into numbers field by field.
//!
//! Copying a number's text into a string column, checking that column
//! for UTF-8 and then parsing it was most of the cost of such a column
//! (Nexmark's bids have three BIGINTs and a TIMESTAMP among five fields
//! read). A typed column parses the field where it lies in the input.
//!
//! Only the forms that the text path's fast readers take are read here
//! (`-?[0-9]{1,18}`; Flink's `yyyy-MM-dd HH:mm:ss[.f…]`), with the same
//! NULL rules. The first other value (a padded number, another time form,
//! an empty field where a NULL literal is set, bad input) turns the
//! column to text for the rest of the batch, its values so far written
//! back as text that reads as the same values; the text path then decides
//! as it always did, error messages and skipped counts included.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array, StringArray};
use arrow::buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{DataType, TimeUnit};
use weir_core::WeirError;

use super::sql_time::TimeReader;

/// How a column's fields are read.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Read {
    Text,
    Int64,
    /// A timestamp without a zone, as a count of `unit`.
    Timestamp(TimeUnit),
}

/// A column's values in a batch, as [`CsvRecords::take`] gives them.
///
/// [`CsvRecords::take`]: super::csv_records::CsvRecords::take
pub(super) enum Taken {
    /// Text, NULL where a field was empty.
    Text(StringArray),
    /// Numbers read (a count of the unit for timestamps), NULL where the
    /// field was empty or the NULL literal.
    Int64(Int64Array),
}

/// A column's values so far.
pub(super) struct Column {
    read: Read,
    /// The NULL literal, when it is not empty (an empty field is NULL
    /// only without one).
    literal: Option<Box<[u8]>>,
    /// Text: the values' bytes, one after another, and their ends (a
    /// leading 0 included). Used by text columns and by typed ones
    /// turned to text.
    values: Vec<u8>,
    ends: Vec<i32>,
    /// Typed: the numbers and, from the batch's first NULL on, whether
    /// each is there (empty while none is NULL; then as long as
    /// `numbers`).
    numbers: Vec<i64>,
    valid: Vec<bool>,
    /// A typed column turned to text for this batch.
    as_text: bool,
    times: TimeReader,
}

impl Column {
    /// A column read as `read`, `literal` its NULL literal.
    pub fn new(read: Read, literal: Option<&str>) -> Self {
        Self {
            read,
            literal: literal
                .filter(|l| !l.is_empty())
                .map(|l| l.as_bytes().into()),
            values: Vec::new(),
            ends: vec![0],
            numbers: Vec::new(),
            valid: Vec::new(),
            as_text: read == Read::Text,
            times: TimeReader::default(),
        }
    }

    /// Drop the values after the first `rows`.
    pub fn truncate(&mut self, rows: usize) {
        if self.as_text {
            if let Some(&end) = self.ends.get(rows) {
                self.values.truncate(end as usize);
                self.ends.truncate(rows + 1);
            }
        } else {
            self.numbers.truncate(rows);
            self.valid.truncate(rows);
        }
    }

    /// Append a field's value (`&[]` for a field the record lacks); `Err`
    /// when the column's text passes what an `i32` offset holds.
    #[inline]
    pub fn push(&mut self, value: &[u8]) -> std::result::Result<(), ()> {
        if !self.as_text {
            match self.number(value) {
                Some(Some(n)) => {
                    self.numbers.push(n);
                    if !self.valid.is_empty() {
                        self.valid.push(true);
                    }
                    return Ok(());
                }
                Some(None) => {
                    if self.valid.is_empty() {
                        self.valid.resize(self.numbers.len(), true);
                    }
                    self.numbers.push(0);
                    self.valid.push(false);
                    return Ok(());
                }
                None => self.turn_to_text(),
            }
        }
        self.values.extend_from_slice(value);
        let end = i32::try_from(self.values.len()).map_err(|_| ())?;
        self.ends.push(end);
        Ok(())
    }

    /// A typed field's value: `Some(None)` for NULL, `None` when the text
    /// path must decide.
    #[inline]
    fn number(&mut self, value: &[u8]) -> Option<Option<i64>> {
        if value.is_empty() {
            return self.literal.is_none().then_some(None);
        }
        if let Some(literal) = &self.literal
            && **literal == *value
        {
            return Some(None);
        }
        match self.read {
            Read::Int64 => plain_integer(value).map(Some),
            Read::Timestamp(unit) => self.times.parse_in(value, unit).map(Some),
            Read::Text => None,
        }
    }

    /// Write the numbers read so far back as text.
    #[cold]
    fn turn_to_text(&mut self) {
        self.as_text = true;
        let rows = self.numbers.len();
        let valid = std::mem::take(&mut self.valid);
        let nulls = match valid.is_empty() {
            true => NullBuffer::new_valid(rows),
            false => NullBuffer::from(valid),
        };
        let numbers = ScalarBuffer::from(std::mem::take(&mut self.numbers));
        let numbers: ArrayRef = Arc::new(Int64Array::new(numbers, Some(nulls.clone())));
        let numbers = match self.read {
            // Written as arrow writes timestamps (`2023-11-14T22:13:20.123`),
            // which its parser, the text path's reader of other forms,
            // reads back to the same value.
            Read::Timestamp(unit) => {
                arrow::compute::cast(&numbers, &DataType::Timestamp(unit, None))
                    .expect("a count of a unit is a timestamp")
            }
            _ => numbers,
        };
        let text = arrow::compute::cast(&numbers, &DataType::Utf8)
            .expect("numbers and timestamps are written as text");
        let text = text
            .as_any()
            .downcast_ref::<StringArray>()
            .expect("cast to Utf8 gives a StringArray");
        let null_text = self.literal.as_deref().unwrap_or_default();
        for r in 0..rows {
            let value = if nulls.is_valid(r) {
                text.value(r).as_bytes()
            } else {
                null_text
            };
            self.values.extend_from_slice(value);
            self.ends.push(self.values.len() as i32);
        }
    }

    /// The batch's values; the column is ready for the next batch, typed
    /// again, with room for about as many values.
    pub fn take(&mut self, rows: usize) -> std::result::Result<Taken, usize> {
        let typed = self.read != Read::Text;
        let taken = if typed && !self.as_text {
            let room = self.numbers.len();
            let numbers = std::mem::replace(&mut self.numbers, Vec::with_capacity(room));
            let valid = std::mem::take(&mut self.valid);
            let nulls = (!valid.is_empty()).then(|| NullBuffer::from(valid));
            Taken::Int64(Int64Array::new(numbers.into(), nulls))
        } else {
            // The next batch likely takes about as much room (a quarter
            // more: a batch a little longer must not grow it by a copy).
            let room = if typed { 0 } else { self.values.len() };
            let values = std::mem::replace(&mut self.values, Vec::with_capacity(room + room / 4));
            let mut next_ends = Vec::with_capacity(if typed { 1 } else { rows + 1 });
            next_ends.push(0);
            let ends = std::mem::replace(&mut self.ends, next_ends);
            let empty = ends.windows(2).any(|w| w[0] == w[1]);
            let nulls = empty.then(|| NullBuffer::from_iter(ends.windows(2).map(|w| w[0] != w[1])));
            let offsets = OffsetBuffer::new(ScalarBuffer::from(ends));
            let values = Buffer::from_vec(values);
            match StringArray::try_new(offsets.clone(), values.clone(), nulls) {
                Ok(text) => Taken::Text(text),
                Err(_) => {
                    let row = offsets
                        .windows(2)
                        .position(|w| {
                            std::str::from_utf8(&values[w[0] as usize..w[1] as usize]).is_err()
                        })
                        .unwrap_or(0);
                    return Err(row);
                }
            }
        };
        self.as_text = !typed;
        Ok(taken)
    }
}

/// `-?[0-9]{1,18}` as a number (what Flink and Weir write; no such value
/// overflows).
#[inline]
pub(super) fn plain_integer(v: &[u8]) -> Option<i64> {
    let (negative, digits) = match v.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, v),
    };
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    let mut n: i64 = 0;
    for &d in digits {
        let d = d.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        n = n * 10 + i64::from(d);
    }
    Some(if negative { -n } else { n })
}

/// The error for a column whose text passes 2 GiB in one batch.
pub(super) fn too_long(column: &str, line: u64) -> WeirError {
    WeirError::Execution(format!(
        "column '{column}' passes 2 GiB of text in one batch at line {line}"
    ))
}
