//! Flink SQL functions whose names or behaviour DataFusion's library lacks.
//! They live here, not in the SQL crate, so expressions using them travel
//! in shipped job graphs like DataFusion's built-ins.
//!
//! | function | Flink's meaning |
//! |---|---|
//! | `HOUR(ts)`, `MINUTE(ts)`, `SECOND(ts)` | field of a timestamp, BIGINT |
//! | `DATE_FORMAT(ts, 'yyyy-MM-dd HH:mm:ss')` | Java date pattern → STRING |
//! | `TO_TIMESTAMP_LTZ(n [, precision])` | epoch seconds (0) or ms (3) → TIMESTAMP_LTZ(3) |
//! | `SPLIT_INDEX(s, sep, i)` | i-th (0-based) piece of `s` split by `sep`, NULL if none |
//! | `REGEXP_EXTRACT(s, re [, group])` | the group of the first match, NULL if none |
//! | `PROCTIME()` | the wall clock: a processing-time attribute for windows |
//! | `MOD(a, b)` | remainder with the sign of `a` (Java's `%`) |
//! | `COUNT_CHAR(s, c)` | occurrences of character `c` in `s` (Nexmark's q14 UDF) |
//!
//! Timestamps are read in UTC (Weir's session time zone).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use arrow::array::{
    Array, ArrayRef, AsArray, Int32Array, Int64Array, Int64Builder, StringBuilder,
    TimestampMillisecondArray,
};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Int64Type, TimeUnit, TimestampMillisecondType};
use datafusion_common::{DataFusionError, Result, exec_err, plan_err};
use datafusion_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// Flink's functions, each a DataFusion scalar UDF.
pub fn flink_functions() -> Vec<Arc<ScalarUDF>> {
    let f = |k: Kind| Arc::new(ScalarUDF::new_from_impl(FlinkFunction::new(k)));
    vec![
        f(Kind::Hour),
        f(Kind::Minute),
        f(Kind::Second),
        f(Kind::DateFormat),
        f(Kind::ToTimestampLtz),
        f(Kind::SplitIndex),
        f(Kind::RegexpExtract),
        f(Kind::CountChar),
        f(Kind::Mod),
        f(Kind::Proctime),
        f(Kind::RegexpReplace),
        f(Kind::Initcap),
        f(Kind::Ascii),
        f(Kind::Concat),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Hour,
    Minute,
    Second,
    DateFormat,
    ToTimestampLtz,
    SplitIndex,
    RegexpExtract,
    CountChar,
    Mod,
    Proctime,
    RegexpReplace,
    Initcap,
    Ascii,
    Concat,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct FlinkFunction {
    kind: Kind,
    name: &'static str,
    signature: Signature,
}

impl FlinkFunction {
    fn new(kind: Kind) -> Self {
        let (name, arities): (&str, &[usize]) = match kind {
            Kind::Hour => ("hour", &[1]),
            Kind::Minute => ("minute", &[1]),
            Kind::Second => ("second", &[1]),
            Kind::DateFormat => ("date_format", &[2]),
            Kind::ToTimestampLtz => ("to_timestamp_ltz", &[1, 2]),
            Kind::SplitIndex => ("split_index", &[3]),
            Kind::RegexpExtract => ("regexp_extract", &[2, 3]),
            Kind::CountChar => ("count_char", &[2]),
            Kind::Mod => ("mod", &[2]),
            Kind::Proctime => ("proctime", &[0]),
            Kind::RegexpReplace => ("regexp_replace", &[3]),
            Kind::Initcap => ("initcap", &[1]),
            Kind::Ascii => ("ascii", &[1]),
            Kind::Concat => ("concat", &[]),
        };
        let signature = if arities == [0] {
            Signature::nullary(Volatility::Volatile)
        } else if arities.is_empty() {
            Signature::variadic_any(Volatility::Immutable)
        } else {
            Signature::one_of(
                arities
                    .iter()
                    .map(|&n| datafusion_expr::TypeSignature::Any(n))
                    .collect(),
                Volatility::Immutable,
            )
        };
        Self {
            kind,
            name,
            signature,
        }
    }
}

fn ms_timestamps(a: &ArrayRef, function: &str) -> Result<TimestampMillisecondArray> {
    match a.data_type() {
        DataType::Timestamp(_, _) | DataType::Date32 | DataType::Date64 => {
            let c = cast(a, &DataType::Timestamp(TimeUnit::Millisecond, None))?;
            Ok(c.as_primitive::<TimestampMillisecondType>().clone())
        }
        other => exec_err!("{function} takes a TIMESTAMP, not {other}"),
    }
}

/// Patterns kept compiled at most; past them the table starts over.
const PATTERNS_KEPT: usize = 256;

/// The compiled patterns by their text.
static PATTERNS: LazyLock<Mutex<HashMap<String, Arc<regex::Regex>>>> =
    LazyLock::new(Default::default);

/// `pattern` compiled, shared by every call of the regular expression
/// functions in the process: a pattern compiles once, not once per batch,
/// and the matching caches that warm up as it runs (its lazy DFA's states)
/// carry over from batch to batch. `function` names the caller in the
/// error for a bad pattern.
fn compiled(pattern: &str, function: &str) -> Result<Arc<regex::Regex>> {
    let mut patterns = PATTERNS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(re) = patterns.get(pattern) {
        return Ok(Arc::clone(re));
    }
    let re = regex::Regex::new(pattern).map_err(|e| {
        DataFusionError::Execution(format!(
            "{function}: bad regular expression '{pattern}': {e}"
        ))
    })?;
    let re = Arc::new(re);
    if patterns.len() >= PATTERNS_KEPT {
        patterns.clear();
    }
    patterns.insert(pattern.to_string(), Arc::clone(&re));
    Ok(re)
}

/// A constant string argument: `Some(None)` for a NULL literal, `None`
/// when the argument is a column.
fn constant_str(arg: &ColumnarValue) -> Option<Option<String>> {
    match arg {
        ColumnarValue::Scalar(s) => s.try_as_str().map(|v| v.map(str::to_string)),
        ColumnarValue::Array(_) => None,
    }
}

/// A constant integer argument, as [`constant_str`].
fn constant_int(arg: &ColumnarValue) -> Option<Option<i64>> {
    let ColumnarValue::Scalar(s) = arg else {
        return None;
    };
    match s.cast_to(&DataType::Int64).ok()? {
        datafusion_common::ScalarValue::Int64(v) => Some(v),
        _ => None,
    }
}

impl FlinkFunction {
    /// `REGEXP_EXTRACT` and `SPLIT_INDEX` with constant pattern, separator
    /// and index (as queries write them): the pattern compiled once, no
    /// per-row copies of the constants, no per-row lookups. `None` when an
    /// argument varies by row (the general path takes it).
    fn with_constant_arguments(
        &self,
        args: &[ColumnarValue],
        n: usize,
    ) -> Result<Option<ArrayRef>> {
        match self.kind {
            Kind::RegexpExtract => {
                let Some(pattern) = args.get(1).and_then(constant_str) else {
                    return Ok(None);
                };
                let group = match args.get(2) {
                    Some(g) => match constant_int(g) {
                        Some(g) => g,
                        None => return Ok(None),
                    },
                    None => Some(0),
                };
                let s = strings(&args[0].to_array(n)?)?;
                let (Some(pattern), Some(group)) = (pattern, group.filter(|g| *g >= 0)) else {
                    return Ok(Some(arrow::array::new_null_array(&DataType::Utf8, n)));
                };
                let re = compiled(&pattern, "REGEXP_EXTRACT")?;
                let group = group as usize;
                let mut locations = re.capture_locations();
                map_strings(&s, |text| {
                    re.captures_read(&mut locations, text)
                        .and_then(|_| locations.get(group))
                        .map(|(from, to)| &text[from..to])
                })
                .map(Some)
            }
            Kind::SplitIndex => {
                let (Some(sep), Some(index)) = (
                    args.get(1).and_then(constant_str),
                    args.get(2).and_then(constant_int),
                ) else {
                    return Ok(None);
                };
                let s = strings(&args[0].to_array(n)?)?;
                let (Some(sep), Some(index)) = (sep.filter(|s| !s.is_empty()), index) else {
                    return Ok(Some(arrow::array::new_null_array(&DataType::Utf8, n)));
                };
                if index < 0 {
                    return Ok(Some(arrow::array::new_null_array(&DataType::Utf8, n)));
                }
                // Only the pieces up to the one wanted are looked for; a
                // one-byte separator (the usual, ASCII) by a plain byte
                // loop: the pieces are short, and a search call per piece
                // cost more than the search (Nexmark q22's URLs).
                let index = index as usize;
                let single = (sep.len() == 1).then(|| sep.as_bytes()[0]);
                map_strings(&s, |text| match single {
                    Some(b) => nth_piece(text, b, index),
                    None => text.split(sep.as_str()).nth(index),
                })
                .map(Some)
            }
            Kind::DateFormat => {
                let Some(pattern) = args.get(1).and_then(constant_str) else {
                    return Ok(None);
                };
                let ts = ms_timestamps(&args[0].to_array(n)?, "DATE_FORMAT")?;
                let Some(pattern) = pattern else {
                    return Ok(Some(arrow::array::new_null_array(&DataType::Utf8, n)));
                };
                Ok(Some(date_format(&ts, &pattern)?))
            }
            _ => Ok(None),
        }
    }
}

/// `DATE_FORMAT` of every timestamp in `ts` by one Java `pattern`: a run of
/// rows within one second (one millisecond when the pattern shows
/// fractions) is formatted once, its text copied for the others.
fn date_format(ts: &TimestampMillisecondArray, pattern: &str) -> Result<ArrayRef> {
    let f = java_to_chrono(pattern);
    let fine = f.contains('f');
    let n = ts.len();
    let mut out = StringsOut::new(n, pattern.len(), "DATE_FORMAT: result");
    let mut text = String::new();
    let mut last: Option<i64> = None;
    for i in 0..n {
        let formatted =
            ts.is_valid(i) && format_run(ts.value(i), (&f, fine, pattern), &mut last, &mut text)?;
        out.push(formatted.then_some(text.as_str()))?;
    }
    out.finish()
}

/// A string column written as values and offsets directly (a string
/// builder's per-value bookkeeping was a tenth of Nexmark q22).
struct StringsOut {
    values: Vec<u8>,
    offsets: Vec<i32>,
    valid: arrow::array::BooleanBufferBuilder,
    /// What the column is, for the error when it passes 2 GiB.
    what: &'static str,
}

impl StringsOut {
    /// Room for `n` values of about `each` bytes.
    fn new(n: usize, each: usize, what: &'static str) -> Self {
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0);
        Self {
            values: Vec::with_capacity(n * each),
            offsets,
            valid: arrow::array::BooleanBufferBuilder::new(n),
            what,
        }
    }

    /// The next value, `None` for NULL.
    #[inline(always)]
    fn push(&mut self, value: Option<&str>) -> Result<()> {
        if let Some(v) = value {
            self.values.extend_from_slice(v.as_bytes());
        }
        let end = i32::try_from(self.values.len())
            .map_err(|_| DataFusionError::Execution(format!("{} over 2 GiB", self.what)))?;
        self.offsets.push(end);
        self.valid.append(value.is_some());
        Ok(())
    }

    fn finish(mut self) -> Result<ArrayRef> {
        let nulls = arrow::buffer::NullBuffer::new(self.valid.finish());
        let nulls = (nulls.null_count() > 0).then_some(nulls);
        // Offsets rise and the values are whole UTF-8 strings.
        Ok(Arc::new(arrow::array::StringArray::try_new(
            arrow::buffer::OffsetBuffer::new(self.offsets.into()),
            self.values.into(),
            nulls,
        )?))
    }
}

/// `text` becomes `ms` formatted by `format` (chrono's format, whether
/// it shows fractions, the Java pattern it came from), unless `last` says
/// it already holds the text of `ms`'s run: its second, or its millisecond
/// when the format shows fractions. False for a time out of range.
fn format_run(
    ms: i64,
    (format, fine, pattern): (&str, bool, &str),
    last: &mut Option<i64>,
    text: &mut String,
) -> Result<bool> {
    let key = if fine { ms } else { ms.div_euclid(1000) };
    if *last == Some(key) {
        return Ok(true);
    }
    *last = None;
    let Some(t) = chrono::DateTime::from_timestamp_millis(ms) else {
        return Ok(false);
    };
    text.clear();
    write!(text, "{}", t.naive_utc().format(format))
        .map_err(|_| DataFusionError::Execution(format!("DATE_FORMAT: bad pattern '{pattern}'")))?;
    *last = Some(key);
    Ok(true)
}

/// Piece `index` of `text` split at the ASCII byte `sep` (as
/// `text.split(sep).nth(index)`).
fn nth_piece(text: &str, sep: u8, index: usize) -> Option<&str> {
    let bytes = text.as_bytes();
    let start = match index {
        0 => 0,
        _ => nth_byte(bytes, sep, index - 1, 0)? + 1,
    };
    let end = nth_byte(bytes, sep, 0, start).unwrap_or(bytes.len());
    // Next to an ASCII byte: a character boundary.
    text.get(start..end)
}

/// Where the `n`-th (0: the first) byte `b` at or after `from` in `bytes`
/// is. Eight bytes a step: a word's bytes equal to `b` found at once (as
/// zero bytes of the word XOR `b` repeated) and counted, where a loop
/// byte by byte was most of Nexmark q22 (three `SPLIT_INDEX`es of each
/// URL).
fn nth_byte(bytes: &[u8], b: u8, mut n: usize, from: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let repeated = ONES * u64::from(b);
    let mut at = from;
    while let Some(word) = bytes.get(at..at + 8) {
        let Ok(word) = <[u8; 8]>::try_from(word) else {
            break;
        };
        let x = u64::from_le_bytes(word) ^ repeated;
        // The high bit of each zero byte of `x` (exactly: no borrow
        // between bytes, as `x - ONES` would have).
        let mut zeros = !(((x & LOW7) + LOW7) | x | LOW7);
        // Bit by bit rather than a population count: the baseline x86-64
        // target has no instruction for one, and a word holds few `b`s.
        while zeros != 0 {
            if n == 0 {
                return Some(at + zeros.trailing_zeros() as usize / 8);
            }
            n -= 1;
            zeros &= zeros - 1;
        }
        at += 8;
    }
    bytes
        .get(at..)?
        .iter()
        .enumerate()
        .filter(|&(_, &c)| c == b)
        .nth(n)
        .map(|(i, _)| at + i)
}

fn strings(a: &ArrayRef) -> Result<arrow::array::StringArray> {
    Ok(cast(a, &DataType::Utf8)?.as_string::<i32>().clone())
}

/// `f` of every non-null string (NULL stays NULL, `None` gives NULL).
fn map_strings<'a>(
    s: &'a arrow::array::StringArray,
    mut f: impl FnMut(&'a str) -> Option<&'a str>,
) -> Result<ArrayRef> {
    let n = s.len();
    let mut out = StringsOut::new(n, 16, "a string result");
    for i in 0..n {
        out.push(if s.is_valid(i) { f(s.value(i)) } else { None })?;
    }
    out.finish()
}

fn integers(a: &ArrayRef) -> Result<Int64Array> {
    Ok(cast(a, &DataType::Int64)?
        .as_primitive::<Int64Type>()
        .clone())
}

/// `MOD(a, b)`: both operands as their common numeric type.
fn mod_type(a: &DataType, b: &DataType) -> Result<DataType> {
    let (l, r) = datafusion_expr::type_coercion::binary::BinaryTypeCoercer::new(
        a,
        &datafusion_expr::Operator::Modulo,
        b,
    )
    .get_input_types()?;
    if l != r || !l.is_numeric() {
        return plan_err!("MOD takes two numbers, not {a} and {b}");
    }
    Ok(l)
}

/// A Java `Matcher.replaceAll` replacement (`$1` a group, `\\x` the
/// character `x`) in the `regex` crate's syntax (`${1}`, `$$`).
fn java_replacement(java: &str) -> String {
    let mut out = String::with_capacity(java.len());
    let mut chars = java.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('$') => out.push_str("$$"),
                Some(other) => out.push(other),
                None => {}
            },
            '$' => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                if digits.is_empty() {
                    out.push_str("$$");
                } else {
                    out.push_str(&format!("${{{digits}}}"));
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// Flink's (Calcite's) INITCAP: words are runs of ASCII letters and digits;
/// the first letter of each is upper-cased, the other ASCII letters lower-
/// cased; every other character is left as it is and ends a word.
fn initcap(s: &str, out: &mut String) {
    let mut start = true;
    for c in s.chars() {
        let alnum = c.is_ascii_alphanumeric();
        if !alnum {
            start = true;
            out.push(c);
        } else if start {
            start = false;
            out.push(c.to_ascii_uppercase());
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
}

/// A Java `SimpleDateFormat` pattern as a chrono format string.
fn java_to_chrono(pattern: &str) -> String {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' {
            // Quoted literal; '' is a quote.
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                if chars[i] == '%' {
                    out.push_str("%%");
                } else {
                    out.push(chars[i]);
                }
                i += 1;
            }
            i += 1;
            continue;
        }
        let mut run = 1;
        while i + run < chars.len() && chars[i + run] == c {
            run += 1;
        }
        let spec = match (c, run) {
            ('y', 2) => "%y".to_string(),
            ('y', _) => "%Y".to_string(),
            ('M', 1) => "%-m".to_string(),
            ('M', 2) => "%m".to_string(),
            ('M', 3) => "%b".to_string(),
            ('M', _) => "%B".to_string(),
            ('d', 1) => "%-d".to_string(),
            ('d', _) => "%d".to_string(),
            ('H', 1) => "%-H".to_string(),
            ('H', _) => "%H".to_string(),
            ('h', _) => "%I".to_string(),
            ('m', 1) => "%-M".to_string(),
            ('m', _) => "%M".to_string(),
            ('s', 1) => "%-S".to_string(),
            ('s', _) => "%S".to_string(),
            ('S', n) => format!("%{}f", n.min(9)),
            ('E', n) if n >= 4 => "%A".to_string(),
            ('E', _) => "%a".to_string(),
            ('a', _) => "%p".to_string(),
            ('D', _) => "%j".to_string(),
            ('%', n) => "%%".repeat(n),
            (other, n) => other.to_string().repeat(n),
        };
        out.push_str(&spec);
        i += run;
    }
    out
}

impl ScalarUDFImpl for FlinkFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        let check_ts = || match &args[0] {
            DataType::Timestamp(_, _) | DataType::Date32 | DataType::Date64 | DataType::Null => {
                Ok(())
            }
            other => plan_err!(
                "{}() takes a TIMESTAMP, not {other}",
                self.name.to_uppercase()
            ),
        };
        Ok(match self.kind {
            Kind::Hour | Kind::Minute | Kind::Second => {
                check_ts()?;
                DataType::Int64
            }
            Kind::DateFormat => {
                check_ts()?;
                DataType::Utf8
            }
            Kind::ToTimestampLtz => {
                if !(args[0].is_numeric() || args[0] == DataType::Null) {
                    return plan_err!("TO_TIMESTAMP_LTZ() takes a number, not {}", args[0]);
                }
                DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()))
            }
            Kind::SplitIndex
            | Kind::RegexpExtract
            | Kind::RegexpReplace
            | Kind::Initcap
            | Kind::Concat => DataType::Utf8,
            Kind::Ascii => DataType::Int32,
            Kind::CountChar => DataType::Int64,
            Kind::Mod => mod_type(&args[0], &args[1])?,
            Kind::Proctime => DataType::Timestamp(TimeUnit::Millisecond, None),
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        if let Some(out) = self.with_constant_arguments(&args.args, n)? {
            return Ok(ColumnarValue::Array(out));
        }
        let arrays = args
            .args
            .iter()
            .map(|a| a.to_array(n))
            .collect::<Result<Vec<_>>>()?;
        let name = self.name.to_uppercase();
        let out: ArrayRef = match self.kind {
            Kind::Hour | Kind::Minute | Kind::Second => {
                let (unit, modulo) = match self.kind {
                    Kind::Hour => (3_600_000, 24),
                    Kind::Minute => (60_000, 60),
                    _ => (1000, 60),
                };
                let ts = ms_timestamps(&arrays[0], &name)?;
                Arc::new(arrow::compute::kernels::arity::unary::<_, _, Int64Type>(
                    &ts,
                    |ms| ms.div_euclid(unit).rem_euclid(modulo),
                ))
            }
            Kind::DateFormat => {
                let ts = ms_timestamps(&arrays[0], &name)?;
                let patterns = strings(&arrays[1])?;
                let mut b = StringBuilder::with_capacity(n, n * 20);
                // Per pattern: chrono's format, and whether it shows
                // fractions of a second (looked up when the pattern
                // differs from the row before's).
                let mut formats: HashMap<String, (String, bool)> = HashMap::new();
                let mut current: Option<(usize, String, bool)> = None;
                // The text of the last row formatted and its second (its
                // millisecond when the pattern shows fractions): a
                // stream's timestamps come in runs within a second, and a
                // run with one pattern is formatted once.
                let mut text = String::new();
                let mut last: Option<i64> = None;
                for i in 0..n {
                    if ts.is_null(i) || patterns.is_null(i) {
                        b.append_null();
                        continue;
                    }
                    let p = patterns.value(i);
                    let (f, fine) = match &mut current {
                        Some((row, f, fine)) if patterns.value(*row) == p => {
                            *row = i;
                            (&*f, *fine)
                        }
                        slot => {
                            let (f, fine) = formats
                                .entry(p.to_string())
                                .or_insert_with(|| {
                                    let f = java_to_chrono(p);
                                    let fine = f.contains('f');
                                    (f, fine)
                                })
                                .clone();
                            last = None;
                            let (_, f, fine) = slot.insert((i, f, fine));
                            (&*f, *fine)
                        }
                    };
                    if format_run(ts.value(i), (f, fine, p), &mut last, &mut text)? {
                        b.append_value(&text);
                    } else {
                        b.append_null();
                    }
                }
                Arc::new(b.finish())
            }
            Kind::ToTimestampLtz => {
                let values = integers(&arrays[0])?;
                let precision = match arrays.get(1) {
                    None => 3,
                    Some(p) => {
                        let p = integers(p)?;
                        if p.is_empty() || p.is_null(0) {
                            3
                        } else {
                            p.value(0)
                        }
                    }
                };
                let factor = match precision {
                    0 => 1000,
                    3 => 1,
                    other => {
                        return exec_err!(
                            "TO_TIMESTAMP_LTZ: precision must be 0 (seconds) or 3 (milliseconds), not {other}"
                        );
                    }
                };
                let ms: Int64Array =
                    arrow::compute::kernels::arity::try_unary(&values, |v: i64| {
                        v.checked_mul(factor).ok_or_else(|| {
                            arrow::error::ArrowError::ComputeError(format!(
                                "TO_TIMESTAMP_LTZ: {v} seconds is out of the timestamp range"
                            ))
                        })
                    })?;
                Arc::new(
                    TimestampMillisecondArray::from(
                        ms.into_data()
                            .into_builder()
                            .data_type(DataType::Timestamp(TimeUnit::Millisecond, None))
                            .build()?,
                    )
                    .with_timezone("UTC"),
                )
            }
            Kind::SplitIndex => {
                let s = strings(&arrays[0])?;
                let sep = strings(&arrays[1])?;
                let idx = integers(&arrays[2])?;
                let mut b = StringBuilder::with_capacity(n, n * 8);
                for i in 0..n {
                    if s.is_null(i) || sep.is_null(i) || idx.is_null(i) || idx.value(i) < 0 {
                        b.append_null();
                        continue;
                    }
                    let sep = sep.value(i);
                    let piece = if sep.is_empty() {
                        None
                    } else {
                        s.value(i).split(sep).nth(idx.value(i) as usize)
                    };
                    b.append_option(piece);
                }
                Arc::new(b.finish())
            }
            Kind::RegexpExtract => {
                let s = strings(&arrays[0])?;
                let re = strings(&arrays[1])?;
                let group = match arrays.get(2) {
                    Some(g) => Some(integers(g)?),
                    None => None,
                };
                // This batch's patterns, so that a row takes no lock.
                let mut patterns: HashMap<String, Arc<regex::Regex>> = HashMap::new();
                let mut b = StringBuilder::with_capacity(n, n * 8);
                for i in 0..n {
                    if s.is_null(i) || re.is_null(i) {
                        b.append_null();
                        continue;
                    }
                    let pattern = re.value(i);
                    if !patterns.contains_key(pattern) {
                        let r = compiled(pattern, "REGEXP_EXTRACT")?;
                        patterns.insert(pattern.to_string(), r);
                    }
                    let g = group
                        .as_ref()
                        .map(|g| if g.is_null(i) { -1 } else { g.value(i) })
                        .unwrap_or(0);
                    let found = (g >= 0)
                        .then(|| patterns[pattern].captures(s.value(i)))
                        .flatten()
                        .and_then(|c| c.get(g as usize))
                        .map(|m| m.as_str());
                    b.append_option(found);
                }
                Arc::new(b.finish())
            }
            Kind::RegexpReplace => {
                let (s, re, with) = (
                    strings(&arrays[0])?,
                    strings(&arrays[1])?,
                    strings(&arrays[2])?,
                );
                // The pattern and replacement are nearly always constants:
                // keep the last compiled pair and compare by reference to
                // it, allocating only when they change.
                let mut last: Option<(String, String, Arc<regex::Regex>, String)> = None;
                let mut b = StringBuilder::with_capacity(n, n * 8);
                for i in 0..n {
                    if s.is_null(i) || re.is_null(i) || with.is_null(i) {
                        b.append_null();
                        continue;
                    }
                    let (pattern, with) = (re.value(i), with.value(i));
                    let fresh = last
                        .as_ref()
                        .is_none_or(|(p, w, _, _)| p != pattern || w != with);
                    if fresh {
                        let r = compiled(pattern, "REGEXP_REPLACE")?;
                        last = Some((pattern.into(), with.into(), r, java_replacement(with)));
                    }
                    let Some((_, _, r, replacement)) = &last else {
                        continue;
                    };
                    // Java's replaceAll: every match, not the first only.
                    b.append_value(r.replace_all(s.value(i), replacement.as_str()));
                }
                Arc::new(b.finish())
            }
            Kind::Initcap => {
                let s = strings(&arrays[0])?;
                let mut b = StringBuilder::with_capacity(n, s.values().len());
                let mut text = String::new();
                for i in 0..n {
                    if s.is_null(i) {
                        b.append_null();
                        continue;
                    }
                    text.clear();
                    initcap(s.value(i), &mut text);
                    b.append_value(&text);
                }
                Arc::new(b.finish())
            }
            Kind::Ascii => {
                let s = strings(&arrays[0])?;
                // Flink answers the first byte of the UTF-8 encoding, as a
                // signed Java byte (-61 for 'É'), and 0 for ''.
                let out: Int32Array = s
                    .iter()
                    .map(|v| v.map(|v| v.bytes().next().map_or(0, |b| b as i8 as i32)))
                    .collect();
                Arc::new(out)
            }
            Kind::Concat => {
                // Flink: NULL when any argument is NULL, as arrow's kernel
                // has it (DataFusion's concat skips NULLs).
                if arrays.is_empty() {
                    return exec_err!("CONCAT needs at least one argument");
                }
                let parts = arrays.iter().map(strings).collect::<Result<Vec<_>>>()?;
                let refs: Vec<&arrow::array::StringArray> = parts.iter().collect();
                Arc::new(
                    arrow::compute::kernels::concat_elements::concat_elements_utf8_many(&refs)?,
                )
            }
            Kind::Proctime => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis() as i64)
                    .unwrap_or(0);
                Arc::new(TimestampMillisecondArray::from(vec![now; n]))
            }
            Kind::Mod => {
                let t = mod_type(arrays[0].data_type(), arrays[1].data_type())?;
                let (a, b) = (cast(&arrays[0], &t)?, cast(&arrays[1], &t)?);
                // Arrow's remainder truncates toward zero, as Java's `%`.
                arrow::compute::kernels::numeric::rem(&a, &b)?
            }
            Kind::CountChar => {
                let s = strings(&arrays[0])?;
                let c = strings(&arrays[1])?;
                let mut b = Int64Builder::with_capacity(n);
                for i in 0..n {
                    if s.is_null(i) || c.is_null(i) {
                        b.append_null();
                        continue;
                    }
                    match c.value(i).chars().next() {
                        Some(ch) => {
                            b.append_value(s.value(i).chars().filter(|&x| x == ch).count() as i64)
                        }
                        None => b.append_value(0),
                    }
                }
                Arc::new(b.finish())
            }
        };
        Ok(ColumnarValue::Array(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::StringArray;
    use arrow::datatypes::Field;

    fn call(kind: Kind, args: Vec<ArrayRef>) -> ArrayRef {
        let f = FlinkFunction::new(kind);
        let types: Vec<DataType> = args.iter().map(|a| a.data_type().clone()).collect();
        let ret = f.return_type(&types).unwrap();
        let n = args[0].len();
        let out = f
            .invoke_with_args(ScalarFunctionArgs {
                arg_fields: args
                    .iter()
                    .map(|a| Arc::new(Field::new("a", a.data_type().clone(), true)))
                    .collect(),
                args: args.into_iter().map(ColumnarValue::Array).collect(),
                number_rows: n,
                return_field: Arc::new(Field::new("r", ret, true)),
                config_options: Default::default(),
            })
            .unwrap();
        out.to_array(n).unwrap()
    }

    /// `kind` over column `text` with constant `rest`, as a query writes
    /// it (scalars) and with the constants repeated as columns: the same
    /// rows either way.
    fn constant_and_column(
        kind: Kind,
        text: ArrayRef,
        rest: Vec<datafusion_common::ScalarValue>,
    ) -> ArrayRef {
        let f = FlinkFunction::new(kind);
        let n = text.len();
        let mut types = vec![text.data_type().clone()];
        types.extend(rest.iter().map(|r| r.data_type()));
        let ret = f.return_type(&types).unwrap();
        let invoke = |args: Vec<ColumnarValue>| {
            f.invoke_with_args(ScalarFunctionArgs {
                arg_fields: types
                    .iter()
                    .map(|t| Arc::new(Field::new("a", t.clone(), true)))
                    .collect(),
                args,
                number_rows: n,
                return_field: Arc::new(Field::new("r", ret.clone(), true)),
                config_options: Default::default(),
            })
            .unwrap()
            .to_array(n)
            .unwrap()
        };
        let mut scalars = vec![ColumnarValue::Array(Arc::clone(&text))];
        scalars.extend(rest.iter().cloned().map(ColumnarValue::Scalar));
        let fast = invoke(scalars);
        let mut columns = vec![ColumnarValue::Array(text)];
        columns.extend(
            rest.iter()
                .map(|r| ColumnarValue::Array(r.to_array_of_size(n).unwrap())),
        );
        assert_eq!(&fast, &invoke(columns), "{kind:?} {rest:?}");
        fast
    }

    proptest::proptest! {
        #[test]
        fn nth_piece_is_splits(text in "[a/é,.-]{0,40}", sep in proptest::prop_oneof![proptest::strategy::Just(b'/'), proptest::strategy::Just(b',')], index in 0usize..12) {
            proptest::prop_assert_eq!(nth_piece(&text, sep, index), text.split(sep as char).nth(index));
        }
    }

    /// DATE_FORMAT formats a run of rows within one second once: each
    /// row's text must still be its own (fractions, patterns changing
    /// between rows, NULLs, times before 1970).
    #[test]
    fn date_format_of_runs_equals_each_row_alone() {
        let ms: Vec<Option<i64>> = vec![
            Some(1_700_000_000_000),
            Some(1_700_000_000_001),
            Some(1_700_000_000_999),
            Some(1_700_000_001_000),
            None,
            Some(1_700_000_001_000),
            Some(-1),
            Some(-1_000),
            Some(-999),
            Some(1_700_000_001_500),
            Some(1_700_000_001_500),
        ];
        let patterns = [
            "yyyy-MM-dd HH:mm:ss",
            "HH:mm:ss.SSS",
            "yyyy-MM-dd HH:mm:ss",
            "HH:mm:ss.SSS",
            "yyyy",
        ];
        let ts: ArrayRef = Arc::new(TimestampMillisecondArray::from(ms.clone()));
        for pick in [
            &(|_: usize| 0usize) as &dyn Fn(usize) -> usize,
            &|_| 1,
            &|i| 1 - i % 2,
            &|i| (i / 3) % patterns.len(),
        ] {
            let p: ArrayRef = Arc::new(StringArray::from_iter_values(
                (0..ms.len()).map(|i| patterns[pick(i)]),
            ));
            let all = call(Kind::DateFormat, vec![Arc::clone(&ts), Arc::clone(&p)]);
            for i in 0..ms.len() {
                let alone = call(Kind::DateFormat, vec![ts.slice(i, 1), p.slice(i, 1)]);
                assert_eq!(all.slice(i, 1).as_ref(), alone.as_ref(), "row {i}");
            }
            let text = all.as_any().downcast_ref::<StringArray>().unwrap();
            if pick(0) == 1 && pick(1) == 0 {
                assert_eq!(text.value(0), "22:13:20.000");
                assert_eq!(text.value(1), "2023-11-14 22:13:20");
                assert_eq!(text.value(2), "22:13:20.999");
            }
        }
    }

    /// A constant DATE_FORMAT pattern (as queries write it) gives the rows
    /// a pattern column does: runs within a second and across, fractions,
    /// NULLs, times before 1970 and out of chrono's range, a NULL pattern.
    #[test]
    fn a_constant_date_format_pattern_gives_the_per_row_results() {
        use datafusion_common::ScalarValue as V;
        let ts: ArrayRef = Arc::new(TimestampMillisecondArray::from(vec![
            Some(1_700_000_000_000),
            Some(1_700_000_000_001),
            Some(1_700_000_000_999),
            None,
            Some(1_700_000_001_000),
            Some(i64::MAX),
            Some(1_700_000_001_000),
            Some(-1),
            Some(-1_000),
            Some(1_700_086_400_000),
        ]));
        for pattern in [
            "yyyy-MM-dd",
            "HH:mm",
            "HH:mm:ss.SSS",
            "yyyy-MM-dd HH:mm:ss",
            "",
        ] {
            let out = constant_and_column(
                Kind::DateFormat,
                Arc::clone(&ts),
                vec![V::Utf8(Some(pattern.into()))],
            );
            assert_eq!(out.null_count(), 2, "{pattern}");
        }
        let days = constant_and_column(
            Kind::DateFormat,
            Arc::clone(&ts),
            vec![V::Utf8(Some("yyyy-MM-dd".into()))],
        );
        let days = days.as_string::<i32>();
        assert_eq!(days.value(0), "2023-11-14");
        assert_eq!(days.value(7), "1969-12-31");
        assert_eq!(days.value(9), "2023-11-15");
        let none = constant_and_column(Kind::DateFormat, ts, vec![V::Utf8(None)]);
        assert_eq!(none.null_count(), none.len());
    }

    #[test]
    fn constant_patterns_and_separators_give_the_per_row_results() {
        use datafusion_common::ScalarValue as V;
        let text: ArrayRef = Arc::new(StringArray::from(vec![
            Some("a,b,,c"),
            None,
            Some(""),
            Some(",lead"),
            Some("trail,"),
            Some("x=1&channel_id=42&y"),
            Some("channel_id=7"),
            Some("no id"),
        ]));
        for index in [-1, 0, 1, 2, 3, 9] {
            for sep in [",", ",,", "", "&"] {
                constant_and_column(
                    Kind::SplitIndex,
                    Arc::clone(&text),
                    vec![V::Utf8(Some(sep.into())), V::Int64(Some(index))],
                );
            }
        }
        constant_and_column(
            Kind::SplitIndex,
            Arc::clone(&text),
            vec![V::Utf8(None), V::Int64(Some(1))],
        );
        for group in [None, Some(-1), Some(0), Some(1), Some(2), Some(5)] {
            let ids = constant_and_column(
                Kind::RegexpExtract,
                Arc::clone(&text),
                vec![
                    V::Utf8(Some("(&|^)channel_id=([^&]*)".into())),
                    V::Int64(group),
                ],
            );
            if group == Some(2) {
                assert_eq!(ids.as_string::<i32>().value(5), "42");
            }
        }
        constant_and_column(
            Kind::RegexpExtract,
            Arc::clone(&text),
            vec![V::Utf8(Some("[a-z]+".into()))],
        );
        constant_and_column(Kind::RegexpExtract, text, vec![V::Utf8(None)]);
    }

    /// A pattern compiles once for the process; a bad one is an error
    /// naming the function and the pattern, and is not kept; the table
    /// stays within its bound.
    #[test]
    fn patterns_compile_once_and_the_table_is_bounded() {
        let a = compiled("(&|^)shared_id=([^&]*)", "REGEXP_EXTRACT").unwrap();
        let b = compiled("(&|^)shared_id=([^&]*)", "REGEXP_REPLACE").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let e = compiled("(unclosed", "REGEXP_REPLACE")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("REGEXP_REPLACE: bad regular expression '(unclosed'"),
            "{e}"
        );
        for i in 0..PATTERNS_KEPT + 10 {
            compiled(&format!("bounded{i}"), "REGEXP_EXTRACT").unwrap();
        }
        let kept = PATTERNS.lock().unwrap().len();
        assert!(kept <= PATTERNS_KEPT, "{kept} patterns kept");
    }

    fn ts(ms: &[i64]) -> ArrayRef {
        Arc::new(TimestampMillisecondArray::from(ms.to_vec()))
    }
    fn s(v: &[&str]) -> ArrayRef {
        Arc::new(StringArray::from(v.to_vec()))
    }

    #[test]
    fn flink_functions_behave_like_flink() {
        // 2023-11-14 22:13:20.123 UTC
        let t = 1_700_000_000_123;
        let hour = call(Kind::Hour, vec![ts(&[t, -1])]);
        assert_eq!(hour.as_primitive::<Int64Type>().values(), &[22, 23]);
        let f = call(
            Kind::DateFormat,
            vec![ts(&[t]), s(&["yyyy-MM-dd HH:mm:ss.SSS 'at' D"])],
        );
        assert_eq!(
            f.as_string::<i32>().value(0),
            "2023-11-14 22:13:20.123 at 318"
        );
        let parts = call(
            Kind::SplitIndex,
            vec![
                s(&["a,b,c", "a,b,c", "abc"]),
                s(&[",", ",", ","]),
                Arc::new(Int64Array::from(vec![1, 5, 0])),
            ],
        );
        let parts = parts.as_string::<i32>();
        assert_eq!(
            (parts.value(0), parts.is_null(1), parts.value(2)),
            ("b", true, "abc")
        );
        let url = "https://x/y?query=1&channel_id=42";
        let ids = call(
            Kind::RegexpExtract,
            vec![
                s(&[url, "none"]),
                s(&["(&|^)channel_id=([^&]*)"; 2]),
                Arc::new(Int64Array::from(vec![2, 2])),
            ],
        );
        let ids = ids.as_string::<i32>();
        assert_eq!((ids.value(0), ids.is_null(1)), ("42", true));
        let c = call(Kind::CountChar, vec![s(&["accbc"]), s(&["c"])]);
        assert_eq!(c.as_primitive::<Int64Type>().value(0), 3);
        let l = call(
            Kind::ToTimestampLtz,
            vec![
                Arc::new(Int64Array::from(vec![1_700_000_000])),
                Arc::new(Int64Array::from(vec![0])),
            ],
        );
        assert_eq!(
            l.as_primitive::<TimestampMillisecondType>().value(0),
            1_700_000_000_000
        );
        assert_eq!(
            l.data_type(),
            &DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()))
        );
    }
}
