//! Values as Flink's text formats write them (its `csv` and `json`
//! formats through Jackson): Java's number forms, SQL timestamps with the
//! fraction's trailing zeros dropped, decimals with theirs stripped.

use std::fmt::Write as _;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{
    DataType, Date32Type, Date64Type, Decimal128Type, Decimal256Type, Float16Type, Float32Type,
    Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, Time32MillisecondType,
    Time32SecondType, Time64MicrosecondType, Time64NanosecondType, TimeUnit,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use base64::Engine as _;
use weir_core::{Result, WeirError};

/// How timestamps are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampStyle {
    /// `2023-11-14 22:13:20.123` (Flink's `SQL`).
    Sql,
    /// `2023-11-14T22:13:20.123` (`ISO-8601`).
    Iso,
}

/// How a format writes values as text.
#[derive(Debug, Clone, Copy)]
pub struct TextStyle {
    /// Timestamps' form.
    pub timestamps: TimestampStyle,
    /// Decimals as plain numbers (`100`) rather than Java's `1E+2`.
    pub plain_decimals: bool,
}

/// Whether the text of `data_type` is a string to Jackson (quoted in JSON,
/// quoted in CSV when it needs to be) rather than a number or boolean.
pub fn is_textual(data_type: &DataType) -> bool {
    !(data_type.is_numeric() || matches!(data_type, DataType::Boolean | DataType::Null))
}

/// Append the text of `array[row]` (not null) to `out`. Nested values are
/// the caller's (JSON writes them itself; CSV refuses them).
pub fn write_scalar(
    out: &mut String,
    array: &ArrayRef,
    row: usize,
    style: TextStyle,
) -> Result<()> {
    macro_rules! int {
        ($t:ty) => {{
            let _ = write!(out, "{}", array.as_primitive::<$t>().value(row));
        }};
    }
    match array.data_type() {
        DataType::Boolean => out.push_str(if array.as_boolean().value(row) {
            "true"
        } else {
            "false"
        }),
        DataType::Int8 => int!(Int8Type),
        DataType::Int16 => int!(Int16Type),
        DataType::Int32 => int!(Int32Type),
        DataType::Int64 => int!(Int64Type),
        DataType::UInt8 => int!(UInt8Type),
        DataType::UInt16 => int!(UInt16Type),
        DataType::UInt32 => int!(UInt32Type),
        DataType::UInt64 => int!(UInt64Type),
        DataType::Float16 => java_float(
            out,
            array.as_primitive::<Float16Type>().value(row).to_f32() as f64,
            true,
        ),
        DataType::Float32 => java_float(
            out,
            array.as_primitive::<Float32Type>().value(row) as f64,
            true,
        ),
        DataType::Float64 => java_float(out, array.as_primitive::<Float64Type>().value(row), false),
        DataType::Decimal128(_, scale) => java_decimal(
            out,
            array.as_primitive::<Decimal128Type>().value(row),
            *scale as i32,
            style.plain_decimals,
        ),
        DataType::Decimal256(_, scale) => {
            let v = array.as_primitive::<Decimal256Type>().value(row);
            match v.to_i128() {
                Some(v) => java_decimal(out, v, *scale as i32, style.plain_decimals),
                None => {
                    return Err(WeirError::Execution(
                        "a DECIMAL beyond 38 digits cannot be written as text".into(),
                    ));
                }
            }
        }
        DataType::Utf8 => out.push_str(array.as_string::<i32>().value(row)),
        DataType::LargeUtf8 => out.push_str(array.as_string::<i64>().value(row)),
        DataType::Utf8View => out.push_str(array.as_string_view().value(row)),
        DataType::Binary => out.push_str(
            &base64::engine::general_purpose::STANDARD.encode(array.as_binary::<i32>().value(row)),
        ),
        DataType::LargeBinary => out.push_str(
            &base64::engine::general_purpose::STANDARD.encode(array.as_binary::<i64>().value(row)),
        ),
        DataType::Date32 => {
            let days = array.as_primitive::<Date32Type>().value(row);
            write_date(out, days as i64 * 86_400_000)
        }
        DataType::Date64 => write_date(out, array.as_primitive::<Date64Type>().value(row)),
        DataType::Time32(TimeUnit::Second) => {
            let s = array.as_primitive::<Time32SecondType>().value(row) as i64;
            write_time(out, s * 1_000_000_000)
        }
        DataType::Time32(_) => {
            let ms = array.as_primitive::<Time32MillisecondType>().value(row) as i64;
            write_time(out, ms * 1_000_000)
        }
        DataType::Time64(TimeUnit::Microsecond) => {
            let us = array.as_primitive::<Time64MicrosecondType>().value(row);
            write_time(out, us * 1000)
        }
        DataType::Time64(_) => {
            write_time(out, array.as_primitive::<Time64NanosecondType>().value(row))
        }
        DataType::Timestamp(unit, tz) => {
            let (secs, nanos) = match unit {
                TimeUnit::Second => (array.as_primitive::<TimestampSecondType>().value(row), 0),
                TimeUnit::Millisecond => split(
                    array.as_primitive::<TimestampMillisecondType>().value(row),
                    1000,
                    1_000_000,
                ),
                TimeUnit::Microsecond => split(
                    array.as_primitive::<TimestampMicrosecondType>().value(row),
                    1_000_000,
                    1000,
                ),
                TimeUnit::Nanosecond => split(
                    array.as_primitive::<TimestampNanosecondType>().value(row),
                    1_000_000_000,
                    1,
                ),
            };
            write_timestamp(out, secs, nanos, style.timestamps);
            // TIMESTAMP_LTZ carries its zone: UTC, as Flink writes it.
            if tz.is_some() {
                out.push('Z');
            }
        }
        other => {
            return Err(WeirError::Execution(format!(
                "values of type {other} cannot be written as text"
            )));
        }
    }
    Ok(())
}

fn split(v: i64, per_second: i64, nanos_per_unit: i64) -> (i64, u32) {
    (
        v.div_euclid(per_second),
        (v.rem_euclid(per_second) * nanos_per_unit) as u32,
    )
}

fn write_date(out: &mut String, ms: i64) {
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(d) => {
            let _ = write!(out, "{}", d.format("%Y-%m-%d"));
        }
        None => {
            let _ = write!(out, "{ms}");
        }
    }
}

fn write_time(out: &mut String, nanos_of_day: i64) {
    let secs = nanos_of_day.div_euclid(1_000_000_000);
    let frac = nanos_of_day.rem_euclid(1_000_000_000) as u32;
    let _ = write!(
        out,
        "{:02}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    );
    write_fraction(out, frac);
}

/// `.123` for 123 ms, nothing for 0: the fraction without trailing zeros.
fn write_fraction(out: &mut String, nanos: u32) {
    if nanos == 0 {
        return;
    }
    let digits = format!("{nanos:09}");
    out.push('.');
    out.push_str(digits.trim_end_matches('0'));
}

fn write_timestamp(out: &mut String, secs: i64, nanos: u32, style: TimestampStyle) {
    match chrono::DateTime::from_timestamp(secs, 0) {
        Some(t) => {
            let f = match style {
                TimestampStyle::Sql => "%Y-%m-%d %H:%M:%S",
                TimestampStyle::Iso => "%Y-%m-%dT%H:%M:%S",
            };
            let _ = write!(out, "{}", t.format(f));
            write_fraction(out, nanos);
        }
        None => {
            let _ = write!(out, "{secs}");
        }
    }
}

/// Java's `Double.toString` (and `Float.toString` for `f32` values): plain
/// between 10⁻³ and 10⁷ with at least one fraction digit (`100.0`),
/// computerized scientific notation outside (`1.0E20`, `1.0E-7`), with
/// the shortest digits that read back to the same value.
pub fn java_float(out: &mut String, v: f64, single: bool) {
    if v.is_nan() {
        out.push_str("NaN");
        return;
    }
    if v.is_infinite() {
        out.push_str(if v > 0.0 { "Infinity" } else { "-Infinity" });
        return;
    }
    if v == 0.0 {
        out.push_str(if v.is_sign_negative() { "-0.0" } else { "0.0" });
        return;
    }
    // Shortest round-trip digits and exponent: `d.ddde±x`.
    let sci = if single {
        format!("{:e}", v as f32)
    } else {
        format!("{v:e}")
    };
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    if negative {
        out.push('-');
    }
    let magnitude = v.abs();
    if (1e-3..1e7).contains(&magnitude) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', int_len - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        } else {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            out.push_str(&digits);
        }
    } else {
        out.push_str(&digits[..1]);
        out.push('.');
        out.push_str(if digits.len() > 1 { &digits[1..] } else { "0" });
        let _ = write!(out, "E{exp}");
    }
}

/// Java's `BigDecimal.stripTrailingZeros().toString()` (what Flink's
/// Jackson writes): `12.50` is `12.5`, `100` is `1E+2`; with `plain`,
/// `toPlainString()` of the stripped value (`100`).
pub fn java_decimal(out: &mut String, unscaled: i128, scale: i32, plain: bool) {
    let (mut u, mut s) = (unscaled, scale);
    if u == 0 {
        out.push('0');
        return;
    }
    while u % 10 == 0 {
        u /= 10;
        s -= 1;
    }
    if u < 0 {
        out.push('-');
    }
    let c = u.unsigned_abs().to_string();
    let len = c.len() as i32;
    let adjusted = len - 1 - s;
    if plain || (s >= 0 && adjusted >= -6) {
        if s <= 0 {
            out.push_str(&c);
            out.extend(std::iter::repeat_n('0', (-s) as usize));
        } else if len > s {
            out.push_str(&c[..(len - s) as usize]);
            out.push('.');
            out.push_str(&c[(len - s) as usize..]);
        } else {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (s - len) as usize));
            out.push_str(&c);
        }
    } else {
        out.push_str(&c[..1]);
        if len > 1 {
            out.push('.');
            out.push_str(&c[1..]);
        }
        let _ = write!(
            out,
            "E{}{}",
            if adjusted >= 0 { "+" } else { "-" },
            adjusted.abs()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(v: f64, single: bool) -> String {
        let mut s = String::new();
        java_float(&mut s, v, single);
        s
    }

    fn d(u: i128, scale: i32, plain: bool) -> String {
        let mut s = String::new();
        java_decimal(&mut s, u, scale, plain);
        s
    }

    /// The forms PyFlink 2.3's csv and json sinks wrote for these values.
    #[test]
    fn numbers_read_as_java_writes_them() {
        assert_eq!(f(1.5, false), "1.5");
        assert_eq!(f(-2.25, false), "-2.25");
        assert_eq!(f(1e20, false), "1.0E20");
        assert_eq!(f(0.1, false), "0.1");
        assert_eq!(f(0.0, false), "0.0");
        assert_eq!(f(100.0, true), "100.0");
        assert_eq!(f(1e-7, true), "1.0E-7");
        assert_eq!(f(1e10, true), "1.0E10");
        assert_eq!(f(0.001, true), "0.001");
        assert_eq!(f(1e7, true), "1.0E7");
        assert_eq!(f(0.1f32 as f64, true), "0.1");
        assert_eq!(f(1234.5678, false), "1234.5678");
        assert_eq!(d(1250, 2, false), "12.5");
        assert_eq!(d(-5, 2, false), "-0.05");
        assert_eq!(d(10000, 2, false), "1E+2");
        assert_eq!(d(0, 2, false), "0");
        assert_eq!(d(9999999999, 2, false), "99999999.99");
        assert_eq!(d(110, 2, false), "1.1");
        assert_eq!(d(1000, 2, false), "1E+1");
        assert_eq!(d(-100, 2, false), "-1");
        assert_eq!(d(1, 3, false), "0.001");
        assert_eq!(d(1500, 0, false), "1.5E+3");
        assert_eq!(d(1, 7, false), "1E-7");
        assert_eq!(d(10000, 2, true), "100");
        assert_eq!(d(1, 7, true), "0.0000001");
    }
}
