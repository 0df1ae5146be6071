//! The fast path of the `json` format: flat objects of numbers, booleans,
//! strings, dates and timestamps — what nearly every stream carries —
//! parsed in one pass straight into column buffers, with no tape and no
//! per-value dispatch beyond one match.
//!
//! It takes only input whose meaning is beyond doubt: a literal of the
//! column's own kind (an integer for an integer column, a string for a
//! string column …), each declared field at most once, no NULL in a NOT NULL
//! column. Anything else — a number in a string column, `1.5` for an
//! integer, a duplicate key, a nested value for a declared column, bad UTF-8,
//! malformed JSON — gives up on the whole chunk, and the caller decodes the
//! same bytes with arrow-json's decoder, which then decides (coerces,
//! truncates or names the error). So both paths give the same rows; this one
//! is just faster where it applies. Unknown fields are skipped (validated,
//! as arrow-json does). Schemas with other column types never use it.

use std::collections::VecDeque;
use std::sync::Arc;

use arrow::array::builder::{BooleanBufferBuilder, NullBufferBuilder};
use arrow::array::timezone::Tz;
use arrow::array::{
    ArrayRef, BooleanArray, LargeStringArray, PrimitiveArray, StringArray, StringViewBuilder,
};
use arrow::buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::compute::kernels::cast_utils::{Parser, string_to_datetime};
use arrow::datatypes::{
    ArrowPrimitiveType, DataType, Date32Type, Float32Type, Float64Type, Int8Type, Int16Type,
    Int32Type, Int64Type, SchemaRef, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow::record_batch::RecordBatch;

use super::json_lexer::{Bail, Cursor, Step, same};

enum Values {
    /// Integers (and dates, timestamps given as numbers) within `min..=max`.
    Int {
        min: i64,
        max: i64,
        values: Vec<i64>,
    },
    Float {
        single: bool,
        values: Vec<f64>,
    },
    Bool(BooleanBufferBuilder),
    /// UTF-8 values end to end, `offsets[i]..offsets[i + 1]` each.
    Str {
        offsets: Vec<i64>,
        data: Vec<u8>,
    },
}

/// How a column reads a JSON string.
#[derive(Clone, Copy)]
enum FromString {
    Never,
    Text,
    Date,
    Timestamp(TimeUnit),
}

struct Column {
    data_type: DataType,
    nullable: bool,
    from_string: FromString,
    /// A JSON integer is taken (ints, dates, timestamps).
    from_int: bool,
    tz: Option<Tz>,
    nulls: NullBufferBuilder,
    values: Values,
}

impl Column {
    fn new(data_type: &DataType, nullable: bool) -> Option<Self> {
        let int = |min: i64, max: i64| Values::Int {
            min,
            max,
            values: Vec::new(),
        };
        let str = || Values::Str {
            offsets: vec![0],
            data: Vec::new(),
        };
        let (values, from_string, from_int, tz) = match data_type {
            DataType::Int8 => (
                int(i8::MIN.into(), i8::MAX.into()),
                FromString::Never,
                true,
                None,
            ),
            DataType::Int16 => (
                int(i16::MIN.into(), i16::MAX.into()),
                FromString::Never,
                true,
                None,
            ),
            DataType::Int32 => (
                int(i32::MIN.into(), i32::MAX.into()),
                FromString::Never,
                true,
                None,
            ),
            DataType::Int64 => (int(i64::MIN, i64::MAX), FromString::Never, true, None),
            DataType::UInt8 => (int(0, u8::MAX.into()), FromString::Never, true, None),
            DataType::UInt16 => (int(0, u16::MAX.into()), FromString::Never, true, None),
            DataType::UInt32 => (int(0, u32::MAX.into()), FromString::Never, true, None),
            // Above i64::MAX: arrow-json decides.
            DataType::UInt64 => (int(0, i64::MAX), FromString::Never, true, None),
            DataType::Float32 | DataType::Float64 => (
                Values::Float {
                    single: *data_type == DataType::Float32,
                    values: Vec::new(),
                },
                FromString::Never,
                false,
                None,
            ),
            DataType::Boolean => (
                Values::Bool(BooleanBufferBuilder::new(0)),
                FromString::Never,
                false,
                None,
            ),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                (str(), FromString::Text, false, None)
            }
            DataType::Date32 => (
                int(i32::MIN.into(), i32::MAX.into()),
                FromString::Date,
                true,
                None,
            ),
            DataType::Timestamp(unit, tz) => {
                let tz = match tz {
                    Some(tz) => Some(tz.parse::<Tz>().ok()?),
                    None => None,
                };
                (
                    int(i64::MIN, i64::MAX),
                    FromString::Timestamp(*unit),
                    true,
                    tz,
                )
            }
            _ => return None,
        };
        Some(Self {
            data_type: data_type.clone(),
            nullable,
            from_string,
            from_int,
            tz,
            nulls: NullBufferBuilder::new(0),
            values,
        })
    }

    fn push_null(&mut self) -> Step {
        if !self.nullable {
            return Err(Bail);
        }
        self.nulls.append_null();
        match &mut self.values {
            Values::Int { values, .. } => values.push(0),
            Values::Float { values, .. } => values.push(0.0),
            Values::Bool(b) => b.append(false),
            Values::Str { offsets, data } => offsets.push(data.len() as i64),
        }
        Ok(())
    }

    fn push_int(&mut self, v: i64) -> Step {
        match &mut self.values {
            Values::Int { min, max, values } if self.from_int && (*min..=*max).contains(&v) => {
                values.push(v)
            }
            _ => return Err(Bail),
        }
        self.nulls.append_non_null();
        Ok(())
    }

    /// A string value (already unescaped).
    fn push_str(&mut self, s: &[u8]) -> Step {
        match (self.from_string, &mut self.values) {
            (FromString::Text, Values::Str { offsets, data }) => {
                data.extend_from_slice(s);
                offsets.push(data.len() as i64);
            }
            (FromString::Date, Values::Int { values, .. }) => {
                let s = std::str::from_utf8(s).map_err(|_| Bail)?;
                values.push(Date32Type::parse(s).ok_or(Bail)?.into());
            }
            (FromString::Timestamp(unit), Values::Int { values, .. }) => {
                // Flink's own form, read at fixed positions.
                if self.tz.is_none()
                    && let Some(v) = super::sql_time::parse_in(s, unit)
                {
                    values.push(v);
                    self.nulls.append_non_null();
                    return Ok(());
                }
                let s = std::str::from_utf8(s).map_err(|_| Bail)?;
                // As arrow-json: the column's zone, else UTC.
                let t = match &self.tz {
                    Some(tz) => string_to_datetime(tz, s).map_err(|_| Bail)?.naive_utc(),
                    None => string_to_datetime(&chrono::Utc, s)
                        .map_err(|_| Bail)?
                        .naive_utc(),
                };
                let t = t.and_utc();
                values.push(match unit {
                    TimeUnit::Second => t.timestamp(),
                    TimeUnit::Millisecond => t.timestamp_millis(),
                    TimeUnit::Microsecond => t.timestamp_micros(),
                    TimeUnit::Nanosecond => t.timestamp_nanos_opt().ok_or(Bail)?,
                });
            }
            _ => return Err(Bail),
        }
        self.nulls.append_non_null();
        Ok(())
    }

    fn finish(&mut self) -> Step<ArrayRef> {
        let nulls: Option<NullBuffer> = self.nulls.finish();
        fn narrow<T: ArrowPrimitiveType>(
            values: &[i64],
            nulls: Option<NullBuffer>,
            data_type: &DataType,
        ) -> ArrayRef
        where
            T::Native: num_cast::FromI64,
        {
            let values: ScalarBuffer<T::Native> = values
                .iter()
                .map(|&v| <T::Native as num_cast::FromI64>::from_i64(v))
                .collect();
            Arc::new(PrimitiveArray::<T>::new(values, nulls).with_data_type(data_type.clone()))
        }
        let d = &self.data_type;
        Ok(match &mut self.values {
            Values::Int { values, .. } => {
                let v = std::mem::replace(values, Vec::with_capacity(values.len()));
                match d {
                    DataType::Int8 => narrow::<Int8Type>(&v, nulls, d),
                    DataType::Int16 => narrow::<Int16Type>(&v, nulls, d),
                    DataType::Int32 => narrow::<Int32Type>(&v, nulls, d),
                    DataType::Int64 => narrow::<Int64Type>(&v, nulls, d),
                    DataType::UInt8 => narrow::<UInt8Type>(&v, nulls, d),
                    DataType::UInt16 => narrow::<UInt16Type>(&v, nulls, d),
                    DataType::UInt32 => narrow::<UInt32Type>(&v, nulls, d),
                    DataType::UInt64 => narrow::<UInt64Type>(&v, nulls, d),
                    DataType::Date32 => narrow::<Date32Type>(&v, nulls, d),
                    DataType::Timestamp(TimeUnit::Second, _) => {
                        narrow::<TimestampSecondType>(&v, nulls, d)
                    }
                    DataType::Timestamp(TimeUnit::Millisecond, _) => {
                        narrow::<TimestampMillisecondType>(&v, nulls, d)
                    }
                    DataType::Timestamp(TimeUnit::Microsecond, _) => {
                        narrow::<TimestampMicrosecondType>(&v, nulls, d)
                    }
                    DataType::Timestamp(TimeUnit::Nanosecond, _) => {
                        narrow::<TimestampNanosecondType>(&v, nulls, d)
                    }
                    _ => return Err(Bail),
                }
            }
            Values::Float { single, values } => {
                let v = std::mem::replace(values, Vec::with_capacity(values.len()));
                if *single {
                    let v: ScalarBuffer<f32> = v.iter().map(|&x| x as f32).collect();
                    Arc::new(PrimitiveArray::<Float32Type>::new(v, nulls))
                } else {
                    Arc::new(PrimitiveArray::<Float64Type>::new(v.into(), nulls))
                }
            }
            Values::Bool(b) => Arc::new(BooleanArray::new(b.finish(), nulls)),
            Values::Str { offsets, data } => {
                let mut fresh = Vec::with_capacity(offsets.len());
                fresh.push(0);
                let offsets = std::mem::replace(offsets, fresh);
                let data = std::mem::replace(data, Vec::with_capacity(data.len()));
                match d {
                    DataType::LargeUtf8 => Arc::new(
                        LargeStringArray::try_new(
                            OffsetBuffer::new(offsets.into()),
                            Buffer::from_vec(data),
                            nulls,
                        )
                        .map_err(|_| Bail)?,
                    ),
                    DataType::Utf8 => {
                        let offsets = offsets
                            .iter()
                            .map(|&o| i32::try_from(o).map_err(|_| Bail))
                            .collect::<Step<Vec<i32>>>()?;
                        Arc::new(
                            StringArray::try_new(
                                OffsetBuffer::new(offsets.into()),
                                Buffer::from_vec(data),
                                nulls,
                            )
                            .map_err(|_| Bail)?,
                        )
                    }
                    _ => {
                        let mut b = StringViewBuilder::with_capacity(offsets.len() - 1);
                        for (i, w) in offsets.windows(2).enumerate() {
                            if nulls.as_ref().is_some_and(|n| n.is_null(i)) {
                                b.append_null();
                            } else {
                                let s = std::str::from_utf8(&data[w[0] as usize..w[1] as usize])
                                    .map_err(|_| Bail)?;
                                b.append_value(s);
                            }
                        }
                        Arc::new(b.finish())
                    }
                }
            }
        })
    }
}

/// Exact narrowing of values already checked against the column's range.
mod num_cast {
    pub trait FromI64 {
        fn from_i64(v: i64) -> Self;
    }
    macro_rules! from_i64 {
        ($($t:ty),+) => {$(
            impl FromI64 for $t {
                fn from_i64(v: i64) -> Self {
                    v as $t
                }
            }
        )+};
    }
    from_i64!(i8, i16, i32, i64, u8, u16, u32, u64);
}

/// The flat-object decoder of one schema.
pub(super) struct FlatJson {
    schema: SchemaRef,
    names: Vec<Vec<u8>>,
    columns: Vec<Column>,
    rows: usize,
    /// Per column, the row (stamp) that last set it.
    seen: Vec<u64>,
    stamp: u64,
    /// An unescaped string.
    scratch: Vec<u8>,
    /// `json.fail-on-missing-field`: a row without a declared field gives
    /// up (the general path names the field).
    require_all: bool,
}

impl FlatJson {
    /// `None` when a column's type is outside the fast path.
    pub(super) fn new(schema: &SchemaRef, require_all: bool) -> Option<Self> {
        let columns = schema
            .fields()
            .iter()
            .map(|f| Column::new(f.data_type(), f.is_nullable()))
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            schema: Arc::clone(schema),
            names: schema
                .fields()
                .iter()
                .map(|f| f.name().as_bytes().to_vec())
                .collect(),
            seen: vec![u64::MAX; columns.len()],
            columns,
            rows: 0,
            stamp: 0,
            scratch: Vec::new(),
            require_all,
        })
    }

    /// Decodes `bytes` — JSON objects separated by whitespace, or with
    /// `ends` exactly one per record `bytes[previous end..end]` — into
    /// batches of up to `batch_size` rows appended to `out`. `false` when
    /// the input leaves the fast path: then nothing was appended and the
    /// decoder is empty again, for the caller to decode the same bytes the
    /// general way.
    pub(super) fn decode(
        &mut self,
        bytes: &[u8],
        ends: Option<&[usize]>,
        batch_size: usize,
        out: &mut VecDeque<RecordBatch>,
    ) -> bool {
        let before = out.len();
        let done = self.decode_all(bytes, ends, batch_size.max(1), out);
        if done.is_err() {
            out.truncate(before);
            for c in &mut self.columns {
                // Built from the same type before, so it builds again.
                if let Some(fresh) = Column::new(&c.data_type, c.nullable) {
                    *c = fresh;
                }
            }
            self.rows = 0;
            // The abandoned row's marks must not count for the next one.
            self.stamp += 1;
        }
        done.is_ok()
    }

    fn decode_all(
        &mut self,
        bytes: &[u8],
        ends: Option<&[usize]>,
        batch_size: usize,
        out: &mut VecDeque<RecordBatch>,
    ) -> Step {
        std::str::from_utf8(bytes).map_err(|_| Bail)?;
        match ends {
            Some(ends) => {
                let mut start = 0;
                for &end in ends {
                    let mut c = Cursor {
                        b: bytes.get(start..end).ok_or(Bail)?,
                        i: 0,
                    };
                    c.ws();
                    self.object(&mut c)?;
                    c.ws();
                    if c.i != c.b.len() {
                        return Err(Bail);
                    }
                    self.end_row(batch_size, out)?;
                    start = end;
                }
            }
            None => {
                let mut c = Cursor { b: bytes, i: 0 };
                loop {
                    c.ws();
                    if c.i == c.b.len() {
                        break;
                    }
                    self.object(&mut c)?;
                    self.end_row(batch_size, out)?;
                }
            }
        }
        if self.rows > 0 {
            out.push_back(self.batch()?);
        }
        Ok(())
    }

    fn end_row(&mut self, batch_size: usize, out: &mut VecDeque<RecordBatch>) -> Step {
        for (k, c) in self.columns.iter_mut().enumerate() {
            if self.seen[k] != self.stamp {
                if self.require_all {
                    return Err(Bail);
                }
                c.push_null()?;
            }
        }
        self.stamp += 1;
        self.rows += 1;
        if self.rows >= batch_size {
            out.push_back(self.batch()?);
        }
        Ok(())
    }

    fn batch(&mut self) -> Step<RecordBatch> {
        let columns = self
            .columns
            .iter_mut()
            .map(Column::finish)
            .collect::<Step<Vec<_>>>()?;
        self.rows = 0;
        RecordBatch::try_new(Arc::clone(&self.schema), columns).map_err(|_| Bail)
    }

    /// One object, its declared fields into their columns.
    fn object(&mut self, c: &mut Cursor) -> Step {
        c.expect(b'{')?;
        c.ws();
        if c.eat(b'}') {
            return Ok(());
        }
        let mut guess = 0;
        loop {
            let key = c.plain_string()?;
            c.ws();
            c.expect(b':')?;
            c.ws();
            let column = if self.names.get(guess).is_some_and(|n| same(n, key)) {
                Some(guess)
            } else {
                self.names.iter().position(|n| n.as_slice() == key)
            };
            match column {
                Some(k) => {
                    if self.seen[k] == self.stamp {
                        return Err(Bail);
                    }
                    self.seen[k] = self.stamp;
                    self.value(k, c)?;
                    guess = k + 1;
                }
                None => c.skip_value(0)?,
            }
            c.ws();
            match c.next()? {
                b',' => c.ws(),
                b'}' => return Ok(()),
                _ => return Err(Bail),
            }
        }
    }

    fn value(&mut self, k: usize, c: &mut Cursor) -> Step {
        let column = &mut self.columns[k];
        match c.peek()? {
            b'n' => {
                c.literal(b"null")?;
                column.push_null()
            }
            b'"' => {
                let s = c.string(&mut self.scratch)?;
                column.push_str(s)
            }
            b't' | b'f' => {
                let v = c.peek()? == b't';
                c.literal(if v { b"true" } else { b"false" })?;
                match &mut column.values {
                    Values::Bool(b) => b.append(v),
                    _ => return Err(Bail),
                }
                column.nulls.append_non_null();
                Ok(())
            }
            _ => {
                let (text, int) = c.number()?;
                match &mut column.values {
                    Values::Float { single, values } => {
                        // Validated JSON number syntax, which Rust's float
                        // parser takes, correctly rounded (as arrow-json's).
                        let text = std::str::from_utf8(text).map_err(|_| Bail)?;
                        let v = if *single {
                            f64::from(text.parse::<f32>().map_err(|_| Bail)?)
                        } else {
                            text.parse::<f64>().map_err(|_| Bail)?
                        };
                        values.push(v);
                        column.nulls.append_non_null();
                        Ok(())
                    }
                    _ => column.push_int(int.ok_or(Bail)?),
                }
            }
        }
    }
}
#[cfg(test)]
#[path = "flat_json_tests.rs"]
mod tests;
