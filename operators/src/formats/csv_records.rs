//! CSV text split into records and fields, the grammar csv-core reads
//! (what arrow's CSV decoder runs, and before this module Weir's `csv`
//! format): a record ends at `\n`, `\r` or `\r\n`; blank lines are no
//! records; a field starting with the quote runs to the closing quote,
//! newlines and delimiters included, a doubled quote standing for one;
//! bytes after a closing quote, and a quote inside an unquoted field, are
//! text; a line starting with the comment byte (when one is set) is
//! skipped; the end of input ends the last record, quoted or not.
//!
//! csv-core steps a state machine byte by byte (half of reading Nexmark's
//! bids went there). Here a record is found field by field from an index
//! of the buffer's delimiters, line breaks and quotes (`csv_scan`, built
//! by SIMD compares): a field's end is one look at the index; a doubled
//! quote or text after a closing one (rare) sends the record down a byte
//! by byte path. Each field is copied once, straight into
//! its column's text, and a batch's columns become `StringArray`s sharing
//! those bytes; an empty field is NULL there (the format's conversion
//! decides what an empty field means).

use std::ops::Range;

use memchr::{memchr, memchr_iter};

use super::csv_columns::{Column, Read, Taken, too_long};
use super::csv_scan::{Specials, Split, split};
use weir_core::{Result, WeirError};

/// The bytes that shape a CSV text.
#[derive(Clone, Copy, Debug)]
pub(super) struct Dialect {
    pub delimiter: u8,
    /// `None`: nothing is quoted.
    pub quote: Option<u8>,
    /// Lines starting with it are skipped.
    pub comment: Option<u8>,
}

/// Where a record's fields are: ranges of the input, or of `unquoted`
/// (the record's fields with quotes taken out).
enum Fields {
    Input,
    Unquoted,
}

/// What one step over a buffer found.
enum Step {
    /// A record: its fields are in `fields`; the next starts at `next`.
    Record { next: usize, line: u64 },
    /// Blank or comment lines up to `next`.
    Skipped { next: usize },
    /// No whole record yet: more input is needed.
    Incomplete,
    /// A record already in the columns; the next starts at `next`.
    Pushed { next: usize },
}

/// Records read into text columns, a batch at a time.
pub(super) struct CsvRecords {
    dialect: Dialect,
    /// The fields' names (for errors).
    names: Vec<String>,
    /// Fields a record has.
    columns: usize,
    /// The fields read into columns, in column order (the others are
    /// counted and skipped).
    kept: Vec<usize>,
    /// Per field of a record, the column it goes to; `None` when a
    /// field goes to two columns (then records take the field by field
    /// path only).
    slots: Option<Vec<Option<usize>>>,
    batch_size: usize,
    /// Skip the first record (a header line).
    header: bool,
    /// Fewer or more fields than columns: pad with NULL / drop the rest
    /// (Flink's `ignore-parse-errors`) instead of failing.
    lenient: bool,
    /// The start of a record whose end has not arrived yet.
    pending: Vec<u8>,
    /// The file line of the next byte read (from 1).
    line: u64,
    /// The last record's fields, ranges of `source`.
    fields: Vec<Range<usize>>,
    source: Fields,
    unquoted: Vec<u8>,
    /// The shaping bytes of the buffer being split.
    specials: Specials,
    /// Per column (kept field), its values so far.
    texts: Vec<Column>,
    /// The file line each buffered record starts at.
    lines: Vec<u64>,
    /// Fields a short record lacked: (row, column), NULL whatever the
    /// column's type.
    missing: Vec<(usize, usize)>,
    /// Records padded or cut (with `lenient`).
    mended: u64,
}

/// A batch of records as text (or numbers, for typed columns).
pub(super) struct TextBatch {
    pub columns: Vec<Taken>,
    /// The file line each row starts at.
    pub lines: Vec<u64>,
    /// (row, column) of fields the record did not have.
    pub missing: Vec<(usize, usize)>,
}

impl CsvRecords {
    /// Records of the fields `names`, of which `kept` (indices) are read
    /// into columns.
    pub fn new(
        dialect: Dialect,
        names: Vec<String>,
        kept: Vec<usize>,
        batch_size: usize,
        header: bool,
        lenient: bool,
    ) -> Self {
        let columns = names.len();
        let width = kept.len();
        let mut slots = vec![None; columns];
        let mut direct = true;
        for (c, &f) in kept.iter().enumerate() {
            match slots.get_mut(f) {
                Some(slot @ None) => *slot = Some(c),
                _ => direct = false,
            }
        }
        Self {
            dialect,
            names,
            columns,
            kept,
            slots: direct.then_some(slots),
            batch_size: batch_size.max(1),
            header,
            lenient,
            pending: Vec::new(),
            line: 1,
            fields: Vec::new(),
            source: Fields::Input,
            unquoted: Vec::new(),
            specials: Specials::new(dialect.delimiter, dialect.quote),
            texts: (0..width).map(|_| Column::new(Read::Text, None)).collect(),
            lines: Vec::new(),
            missing: Vec::new(),
            mended: 0,
        }
    }

    /// Read the columns as `reads` says, `literal` the NULL literal.
    pub fn with_reads(mut self, reads: &[Read], literal: Option<&str>) -> Self {
        self.texts = reads.iter().map(|&r| Column::new(r, literal)).collect();
        self
    }

    /// Records buffered.
    pub fn rows(&self) -> usize {
        self.lines.len()
    }

    /// Read from a record in the middle of a file: no header there.
    pub fn start_mid_file(&mut self) {
        self.header = false;
    }

    /// Whether the input so far ended at the end of a record.
    pub fn between_records(&self) -> bool {
        self.pending.is_empty()
    }

    /// Whether a batch is full.
    pub fn full(&self) -> bool {
        self.rows() >= self.batch_size
    }

    /// Records padded or cut so far.
    pub fn mended(&self) -> u64 {
        self.mended
    }

    /// Read records from `bytes` until it ends or a batch is full; the
    /// bytes consumed (a record cut by the end of `bytes` is kept and
    /// completed by the next call).
    pub fn decode(&mut self, bytes: &[u8]) -> Result<usize> {
        let mut used = 0;
        if !self.pending.is_empty() {
            // Complete the pending record a line at a time: it usually
            // ends at the first line break.
            let mut pending = std::mem::take(&mut self.pending);
            self.specials.reset();
            let mut start = 0;
            loop {
                if start == pending.len() {
                    pending.clear();
                    break;
                }
                if self.full() {
                    // Keep the rest for after the batch is taken.
                    pending.drain(..start);
                    self.pending = pending;
                    return Ok(used);
                }
                match self.step(&pending, start, false)? {
                    Step::Incomplete => {
                        if used == bytes.len() {
                            pending.drain(..start);
                            self.pending = pending;
                            return Ok(used);
                        }
                        let take =
                            memchr(b'\n', &bytes[used..]).map_or(bytes.len() - used, |p| p + 1);
                        pending.extend_from_slice(&bytes[used..used + take]);
                        used += take;
                    }
                    Step::Skipped { next } | Step::Pushed { next } => start = next,
                    Step::Record { next, line } => {
                        self.push(&pending, line)?;
                        start = next;
                    }
                }
            }
            self.pending = pending;
        }
        self.specials.reset();
        let bytes = &bytes[used..];
        let mut at = 0;
        while at < bytes.len() && !self.full() {
            match self.step_into_columns(bytes, at)? {
                Step::Incomplete => {
                    self.pending.extend_from_slice(&bytes[at..]);
                    return Ok(used + bytes.len());
                }
                Step::Skipped { next } | Step::Pushed { next } => at = next,
                Step::Record { next, line } => {
                    self.push(bytes, line)?;
                    at = next;
                }
            }
        }
        Ok(used + at)
    }

    /// The end of input: the record it cut off, if any, is whole.
    pub fn end_of_input(&mut self) -> Result<()> {
        let pending = std::mem::take(&mut self.pending);
        self.specials.reset();
        let mut start = 0;
        while start < pending.len() {
            match self.step(&pending, start, true)? {
                Step::Incomplete => break,
                Step::Skipped { next } | Step::Pushed { next } => start = next,
                Step::Record { next, line } => {
                    self.push(&pending, line)?;
                    start = next;
                }
            }
        }
        Ok(())
    }

    /// The buffered records as text columns, or `None` when there are
    /// none.
    pub fn take(&mut self) -> Result<Option<TextBatch>> {
        if self.lines.is_empty() {
            return Ok(None);
        }
        let lines = std::mem::take(&mut self.lines);
        let mut columns = Vec::with_capacity(self.kept.len());
        for (c, text) in self.texts.iter_mut().enumerate() {
            match text.take(lines.len()) {
                Ok(taken) => columns.push(taken),
                Err(row) => {
                    return Err(WeirError::Execution(format!(
                        "invalid UTF-8 in column '{}' at line {}",
                        self.names[self.kept[c]], lines[row]
                    )));
                }
            }
        }
        Ok(Some(TextBatch {
            columns,
            lines,
            missing: std::mem::take(&mut self.missing),
        }))
    }

    /// Append the record `step` found at the start of `buf` to the
    /// columns.
    fn push(&mut self, buf: &[u8], line: u64) -> Result<()> {
        if self.header {
            self.header = false;
            return Ok(());
        }
        self.count(self.fields.len(), line)?;
        let source: &[u8] = match self.source {
            Fields::Input => buf,
            Fields::Unquoted => &self.unquoted,
        };
        let row = self.lines.len();
        for (c, (text, &field)) in self.texts.iter_mut().zip(&self.kept).enumerate() {
            let value = match self.fields.get(field) {
                Some(r) => &source[r.clone()],
                None => {
                    self.missing.push((row, c));
                    &[]
                }
            };
            if text.push(value).is_err() {
                return Err(too_long(&self.names[field], line));
            }
        }
        self.lines.push(line);
        Ok(())
    }

    /// One record (or the blank and comment lines before one) at `at` in
    /// `buf`, the buffer `self.specials` indexes. With `eof`, the end of
    /// `buf` ends a record. Positions (`next`, the fields) are of `buf`.
    fn step(&mut self, buf: &[u8], at: usize, eof: bool) -> Result<Step> {
        // Blank lines and comments: no record.
        match buf.get(at) {
            None => return Ok(Step::Incomplete),
            Some(b'\n') => {
                self.line += 1;
                return Ok(Step::Skipped { next: at + 1 });
            }
            Some(b'\r') => return Ok(Step::Skipped { next: at + 1 }),
            Some(&b) if Some(b) == self.dialect.comment => {
                return Ok(match memchr(b'\n', &buf[at..]) {
                    Some(p) => {
                        self.line += 1;
                        Step::Skipped { next: at + p + 1 }
                    }
                    None if eof => Step::Skipped { next: buf.len() },
                    None => Step::Incomplete,
                });
            }
            Some(_) => {}
        }
        let line = self.line;
        self.source = Fields::Input;
        let fields = &mut self.fields;
        fields.clear();
        let shape = (self.dialect.delimiter, self.dialect.quote);
        let (end, breaks) = match split(&mut self.specials, buf, at, shape, eof, |r| {
            fields.push(r);
            true
        }) {
            Split::Done { end, breaks } => (end, breaks),
            Split::Incomplete | Split::Refused => return Ok(Step::Incomplete),
            Split::Quoted(q) => return self.quoted(buf, at, q, eof),
        };
        let next = self.finish(buf, end, breaks);
        Ok(Step::Record { next, line })
    }

    /// Past a record of `buf` ending at `end` (its line break) with
    /// `breaks` line breaks inside quotes: where the next one starts.
    fn finish(&mut self, buf: &[u8], end: usize, breaks: u64) -> usize {
        self.line += breaks;
        // The line break ends the record; a `\n` after a `\r` is skipped
        // as a blank line.
        match buf.get(end) {
            Some(b'\n') => {
                self.line += 1;
                end + 1
            }
            Some(_) => end + 1,
            None => end,
        }
    }

    /// Check a record's field count `got`: an error, or (lenient) a
    /// record counted as mended.
    fn count(&mut self, got: usize, line: u64) -> Result<()> {
        if got != self.columns {
            if !self.lenient {
                return Err(WeirError::Execution(format!(
                    "line {line} has {got} field{} where the table has {} column{}",
                    if got == 1 { "" } else { "s" },
                    self.columns,
                    if self.columns == 1 { "" } else { "s" },
                )));
            }
            self.mended += 1;
        }
        Ok(())
    }

    /// [`Self::step`] and [`Self::push`] in one, on the main path: each
    /// field goes into its column as it is found, and a field no column
    /// reads is only counted. A record cut off by the end of `buf`, or
    /// holding a quote the index path does not take, is taken back out
    /// of the columns and left to the field by field path; so are blank,
    /// comment and header lines.
    fn step_into_columns(&mut self, buf: &[u8], at: usize) -> Result<Step> {
        let first = buf.get(at).copied();
        if self.header
            || matches!(first, None | Some(b'\n' | b'\r'))
            || first == self.dialect.comment
        {
            return self.step(buf, at, false);
        }
        let Some(slots) = self.slots.as_deref() else {
            return self.step(buf, at, false);
        };
        let row = self.lines.len();
        let line = self.line;
        let shape = (self.dialect.delimiter, self.dialect.quote);
        let texts = &mut self.texts;
        let mut field = 0;
        let mut overflow = false;
        let outcome = split(&mut self.specials, buf, at, shape, false, |r| {
            if let Some(&Some(c)) = slots.get(field)
                && texts[c].push(&buf[r]).is_err()
            {
                overflow = true;
                return false;
            }
            field += 1;
            true
        });
        let (end, breaks) = match outcome {
            Split::Done { end, breaks } => (end, breaks),
            Split::Refused if overflow => {
                return Err(too_long(&self.names[field], line));
            }
            Split::Incomplete | Split::Quoted(_) | Split::Refused => {
                for text in &mut self.texts {
                    text.truncate(row);
                }
                return self.step(buf, at, false);
            }
        };
        self.count(field, line)?;
        // Fields a short record lacks (lenient): NULL.
        for f in field..self.columns {
            if let Some(Some(c)) = self.slots.as_ref().and_then(|s| s.get(f)).copied() {
                // An empty value cannot pass an offset's range.
                let _ = self.texts[c].push(&[]);
                self.missing.push((row, c));
            }
        }
        self.lines.push(line);
        Ok(Step::Pushed {
            next: self.finish(buf, end, breaks),
        })
    }

    /// A record holding a quote, at `at` in `whole`: byte by byte, as
    /// csv-core, the fields unquoted into `self.unquoted`.
    fn quoted(&mut self, whole: &[u8], at: usize, quote: u8, eof: bool) -> Result<Step> {
        let buf = &whole[at..];
        #[derive(Clone, Copy)]
        enum State {
            Start,
            Plain,
            Quoted,
            /// Just after a quote inside a quoted field.
            AfterQuote,
        }
        let line = self.line;
        let delimiter = self.dialect.delimiter;
        self.fields.clear();
        self.unquoted.clear();
        let mut state = State::Start;
        let mut field_start = 0;
        let mut i = 0;
        let mut breaks = 0;
        let end = loop {
            let Some(&b) = buf.get(i) else {
                if !eof {
                    return Ok(Step::Incomplete);
                }
                break buf.len();
            };
            let ends_record = b == b'\n' || b == b'\r';
            match state {
                State::Quoted => {
                    // Copy up to the next quote at once.
                    match memchr(quote, &buf[i..]) {
                        Some(p) => {
                            let run = &buf[i..i + p];
                            breaks += memchr_iter(b'\n', run).count() as u64;
                            self.unquoted.extend_from_slice(run);
                            i += p + 1;
                            state = State::AfterQuote;
                        }
                        None => {
                            if !eof {
                                return Ok(Step::Incomplete);
                            }
                            let run = &buf[i..];
                            self.unquoted.extend_from_slice(run);
                            break buf.len();
                        }
                    }
                    continue;
                }
                State::Start if b == quote => state = State::Quoted,
                State::AfterQuote if b == quote => {
                    self.unquoted.push(quote);
                    state = State::Quoted;
                }
                _ if b == delimiter => {
                    self.fields.push(field_start..self.unquoted.len());
                    field_start = self.unquoted.len();
                    state = State::Start;
                }
                _ if ends_record => break i,
                _ => {
                    self.unquoted.push(b);
                    state = State::Plain;
                }
            }
            i += 1;
        };
        self.fields.push(field_start..self.unquoted.len());
        self.source = Fields::Unquoted;
        self.line += breaks;
        let next = match buf.get(end) {
            Some(b'\n') => {
                self.line += 1;
                end + 1
            }
            Some(_) => end + 1,
            None => end,
        };
        Ok(Step::Record {
            next: at + next,
            line,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const COMMA: Dialect = Dialect {
        delimiter: b',',
        quote: Some(b'"'),
        comment: None,
    };

    /// A text column's values.
    fn as_text(column: &Taken) -> &arrow::array::StringArray {
        match column {
            Taken::Text(text) => text,
            Taken::Int64(_) => panic!("a text column"),
        }
    }

    /// Every record of `text` fed in `chunks`-sized pieces: its fields
    /// (a lacking field as `None`) and the line it starts at.
    fn read(
        dialect: Dialect,
        columns: usize,
        text: &[u8],
        chunk: usize,
        batch: usize,
    ) -> Result<Vec<(Vec<Option<String>>, u64)>> {
        let all: Vec<usize> = (0..columns).collect();
        read_kept(dialect, columns, &all, text, chunk, batch)
    }

    /// [`read`] of the fields `kept` only.
    fn read_kept(
        dialect: Dialect,
        columns: usize,
        kept: &[usize],
        text: &[u8],
        chunk: usize,
        batch: usize,
    ) -> Result<Vec<(Vec<Option<String>>, u64)>> {
        let names = (0..columns).map(|c| format!("c{c}")).collect();
        let mut r = CsvRecords::new(dialect, names, kept.to_vec(), batch, false, true);
        let mut out = Vec::new();
        let mut collect = |b: TextBatch| {
            for row in 0..b.lines.len() {
                let fields = (0..kept.len())
                    .map(|c| {
                        (!b.missing.contains(&(row, c)))
                            .then(|| as_text(&b.columns[c]).value(row).to_string())
                    })
                    .collect();
                out.push((fields, b.lines[row]));
            }
        };
        let mut pos = 0;
        while pos < text.len() {
            let piece = &text[pos..(pos + chunk).min(text.len())];
            let used = r.decode(piece)?;
            pos += used;
            if r.full() {
                collect(r.take()?.expect("a full batch"));
            } else {
                assert_eq!(used, piece.len(), "only a full batch stops decoding");
            }
        }
        r.end_of_input()?;
        if let Some(b) = r.take()? {
            collect(b);
        }
        Ok(out)
    }

    /// csv-core's records of `text` (what arrow's CSV decoder reads).
    fn reference(dialect: Dialect, text: &[u8]) -> Vec<Vec<String>> {
        let mut builder = csv_core::ReaderBuilder::new();
        builder
            .delimiter(dialect.delimiter)
            .comment(dialect.comment);
        match dialect.quote {
            Some(q) => builder.quote(q),
            None => builder.quoting(false),
        };
        let mut reader = builder.build();
        let (mut out, mut ends) = (vec![0u8; text.len() + 1], vec![0usize; text.len() + 2]);
        let (mut input, mut o, mut e) = (text, 0, 0);
        let mut records = Vec::new();
        loop {
            let (result, read, written, ended) =
                reader.read_record(input, &mut out[o..], &mut ends[e..]);
            input = &input[read..];
            o += written;
            e += ended;
            match result {
                csv_core::ReadRecordResult::InputEmpty => {}
                csv_core::ReadRecordResult::Record => {
                    let mut start = 0;
                    records.push(
                        ends[..e]
                            .iter()
                            .map(|&end| {
                                let f = String::from_utf8(out[start..end].to_vec()).unwrap();
                                start = end;
                                f
                            })
                            .collect(),
                    );
                    (o, e) = (0, 0);
                }
                csv_core::ReadRecordResult::End => return records,
                other => panic!("buffers too small: {other:?}"),
            }
        }
    }

    fn texts() -> impl Strategy<Value = Vec<u8>> {
        let pieces = prop_oneof![
            Just("a"),
            Just("bc"),
            Just("é"),
            Just(","),
            Just(";"),
            Just("\""),
            Just("\"\""),
            Just("\n"),
            Just("\r"),
            Just("\r\n"),
            Just("#"),
            Just(" "),
        ];
        proptest::collection::vec(pieces, 0..60).prop_map(|p| p.concat().into_bytes())
    }

    /// Records of well-formed fields, plain or quoted (some holding
    /// delimiters, doubled quotes or line breaks), longer than the pieces
    /// above make them, with the odd stray quote.
    fn record_texts() -> impl Strategy<Value = Vec<u8>> {
        let field = prop_oneof![
            4 => "[a-z0-9 ]{0,40}",
            3 => "[a-z,;]{0,40}".prop_map(|s| format!("\"{s}\"")),
            1 => "[a-z\"\n]{0,20}".prop_map(|s| format!("\"{}\"", s.replace('"', "\"\""))),
            1 => "[a-z]{0,5}\"[a-z]{0,5}",
        ];
        let record = (
            proptest::collection::vec(field, 1..5),
            prop_oneof![Just(","), Just(";")],
            prop_oneof![Just("\n"), Just("\r\n"), Just("\r"), Just("\n\n")],
        )
            .prop_map(|(fields, delimiter, end)| fields.join(delimiter) + end);
        proptest::collection::vec(record, 0..12).prop_map(|r| r.concat().into_bytes())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Same records and fields as csv-core, however the input is cut
        /// and batched; a record's missing fields are lacking, extra ones
        /// dropped.
        #[test]
        fn records_are_csv_cores(
            text in prop_oneof![texts(), record_texts()],
            chunk in 1usize..20,
            batch in 1usize..5,
            dialect in (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(semi, quote, comment)| Dialect {
                delimiter: if semi { b';' } else { b',' },
                quote: quote.then_some(b'"'),
                comment: comment.then_some(b'#'),
            }),
        ) {
            // csv-core makes a comment cut off by the end of input an
            // empty record; Weir skips it as any comment.
            let mut text = text;
            if dialect.comment.is_some() {
                text.push(b'\n');
            }
            let columns = 3;
            let ours = read(dialect, columns, &text, chunk, batch).unwrap();
            let theirs = reference(dialect, &text);
            prop_assert_eq!(ours.len(), theirs.len(), "records of {:?}", String::from_utf8_lossy(&text));
            for ((fields, _), want) in ours.iter().zip(&theirs) {
                let want: Vec<Option<String>> = (0..columns).map(|c| want.get(c).cloned()).collect();
                prop_assert_eq!(fields, &want, "in {:?}", String::from_utf8_lossy(&text));
            }
            // Cut anywhere, the same as read whole.
            prop_assert_eq!(read(dialect, columns, &text, text.len().max(1), 1000).unwrap(), ours.clone());
            // Some fields, in any order: those of every record.
            let kept = [2, 0];
            let picked: Vec<_> = ours
                .iter()
                .map(|(fields, line)| (kept.iter().map(|&k| fields[k].clone()).collect::<Vec<_>>(), *line))
                .collect();
            prop_assert_eq!(read_kept(dialect, columns, &kept, &text, chunk, batch).unwrap(), picked);
        }
    }

    #[test]
    fn lines_count_file_lines() {
        let text = b"a,b\n\n# note\r\n\"x\ny\",z\r\nlast,one\n# end";
        let comment = Dialect {
            comment: Some(b'#'),
            ..COMMA
        };
        let got = read(comment, 2, text, 3, 10).unwrap();
        let lines: Vec<u64> = got.iter().map(|(_, l)| *l).collect();
        assert_eq!(lines, [1, 4, 6]);
        assert_eq!(got[1].0[0].as_deref(), Some("x\ny"));
        // The last line needs no line break.
        assert_eq!(got[2].0[1].as_deref(), Some("one"));
    }

    #[test]
    fn wrong_field_counts_fail_unless_lenient_and_utf8_is_checked() {
        let names = vec!["a".to_string(), "b".to_string()];
        let mut strict = CsvRecords::new(COMMA, names.clone(), vec![0, 1], 10, false, false);
        let err = strict.decode(b"1,2\n3\n").unwrap_err().to_string();
        assert!(
            err.contains("line 2 has 1 field where the table has 2 columns"),
            "{err}"
        );
        let mut lenient = CsvRecords::new(COMMA, names.clone(), vec![0, 1], 10, true, true);
        lenient.decode(b"h,h\n1\n1,2,3\n").unwrap();
        lenient.end_of_input().unwrap();
        let b = lenient.take().unwrap().unwrap();
        assert_eq!(b.lines, [2, 3], "the header is no record");
        assert_eq!(b.missing, [(0, 1)]);
        assert_eq!(as_text(&b.columns[1]).value(1), "2");
        assert_eq!(lenient.mended(), 2);
        // Text that is not UTF-8 names its column and line, also when two
        // invalid fields would make valid UTF-8 together.
        let mut r = CsvRecords::new(COMMA, names, vec![0, 1], 10, false, false);
        r.decode(b"ok,fine\n\xc3,\xa9\n").unwrap();
        let err = r.take().err().expect("invalid text").to_string();
        assert!(err.contains("column 'a' at line 2"), "{err}");
        let empty = CsvRecords::new(COMMA, vec!["a".into()], vec![0], 10, false, false).take();
        assert!(empty.unwrap().is_none());
    }
}
