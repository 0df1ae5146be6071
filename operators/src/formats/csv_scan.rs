//! Where a CSV text's shaping bytes are, found for a whole buffer at once.
//!
//! Splitting records field by field with `memchr3` restarted a vector
//! search for every field: on Nexmark's bids (seven fields, most under 16
//! bytes) the searches' setup was a quarter of reading the file. A
//! [`Specials`] index instead compares each 64-byte block of the buffer
//! with the four bytes that can end or open a field (the delimiter, `\n`,
//! `\r`, the quote) in one pass, keeping a bit per byte; the next such
//! byte after any position is then a shift and a trailing-zero count.
//!
//! [`split`] finds a record's fields with it.
//!
//! Blocks are indexed as far as the reader asks, a few at a time, so a
//! reader that stops at a full batch has not indexed the rest of its
//! buffer for nothing.

use std::ops::Range;

/// Blocks indexed at a time.
const AHEAD: usize = 32;

/// A bit per byte of a buffer, set where the byte is one of four.
pub(super) struct Specials {
    needles: [u8; 4],
    /// One per 64 bytes of the buffer, bit `j` for byte `64 * k + j`.
    masks: Vec<u64>,
    /// The masks of whole blocks (a last partial one follows them).
    whole: usize,
}

impl Specials {
    /// An index of `delimiter`, `\n`, `\r` and `quote` (when there is one).
    pub fn new(delimiter: u8, quote: Option<u8>) -> Self {
        Self {
            needles: [delimiter, b'\n', b'\r', quote.unwrap_or(delimiter)],
            masks: Vec::new(),
            whole: 0,
        }
    }

    /// Forget the buffer indexed: the next [`Specials::next`] is over
    /// another one.
    pub fn reset(&mut self) {
        self.masks.clear();
        self.whole = 0;
    }

    /// The first of the four bytes in `buf` at or after `from`. `buf`
    /// must be the buffer indexed since the last reset, or it grown at its
    /// end.
    #[inline]
    pub fn next(&mut self, buf: &[u8], from: usize) -> Option<usize> {
        let mut block = from / 64;
        if block >= self.whole {
            return self.next_slow(buf, from);
        }
        let mut mask = self.masks[block] & (u64::MAX << (from % 64));
        loop {
            if mask != 0 {
                return Some(block * 64 + mask.trailing_zeros() as usize);
            }
            block += 1;
            if block >= self.whole {
                return self.next_slow(buf, block * 64);
            }
            mask = self.masks[block];
        }
    }

    /// [`Specials::next`] past the blocks indexed: index more.
    #[inline(never)]
    fn next_slow(&mut self, buf: &[u8], mut from: usize) -> Option<usize> {
        while from < buf.len() {
            let block = from / 64;
            self.cover(buf, block);
            let mask = self.masks[block] & (u64::MAX << (from % 64));
            if mask != 0 {
                return Some(block * 64 + mask.trailing_zeros() as usize);
            }
            from = (block + 1) * 64;
        }
        None
    }

    /// Index `buf` through block `block` and a few more (as far as it
    /// goes).
    fn cover(&mut self, buf: &[u8], block: usize) {
        // A partial last block is indexed again with the bytes that
        // arrived since.
        self.masks.truncate(self.whole);
        let from = self.whole * 64;
        let until = ((block + AHEAD) * 64).min(buf.len());
        let whole = (until - from) / 64 * 64;
        whole_masks(&buf[from..from + whole], self.needles, &mut self.masks);
        self.whole = self.masks.len();
        if from + whole < until {
            self.masks
                .push(tail_mask(&buf[from + whole..until], self.needles));
        }
    }
}

/// The bits of a partial block.
fn tail_mask(bytes: &[u8], needles: [u8; 4]) -> u64 {
    let [a, b, c, d] = needles;
    bytes.iter().enumerate().fold(0, |mask, (j, &x)| {
        mask | (u64::from(x == a || x == b || x == c || x == d) << j)
    })
}

/// The masks of `bytes`, whole blocks, appended to `out`: 32 bytes
/// compared at a time where the processor has AVX2 (nearly every x86-64
/// since 2013), else 16.
#[cfg(target_arch = "x86_64")]
fn whole_masks(bytes: &[u8], needles: [u8; 4], out: &mut Vec<u64>) {
    let blocks = bytes.chunks_exact(64);
    out.reserve(blocks.len());
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the processor has AVX2, checked just above.
        unsafe { avx2_masks(blocks, needles, out) }
    } else {
        // SAFETY: SSE2 is part of every x86-64 processor (the target's
        // baseline).
        unsafe { sse2_masks(blocks, needles, out) }
    }
}

/// [`whole_masks`] sixteen bytes compared at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn sse2_masks(blocks: std::slice::ChunksExact<'_, u8>, needles: [u8; 4], out: &mut Vec<u64>) {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
    };
    let [a, b, c, d] = needles.map(|n| _mm_set1_epi8(n as i8));
    for block in blocks {
        let mut mask = 0u64;
        for (k, sixteen) in block.chunks_exact(16).enumerate() {
            // SAFETY: `sixteen` is 16 readable bytes; the load takes any
            // alignment.
            let v = unsafe { _mm_loadu_si128(sixteen.as_ptr().cast::<__m128i>()) };
            let hits = _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(v, a), _mm_cmpeq_epi8(v, b)),
                _mm_or_si128(_mm_cmpeq_epi8(v, c), _mm_cmpeq_epi8(v, d)),
            );
            mask |= u64::from(_mm_movemask_epi8(hits) as u16) << (16 * k);
        }
        out.push(mask);
    }
}

/// [`whole_masks`] 32 bytes compared at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn avx2_masks(blocks: std::slice::ChunksExact<'_, u8>, needles: [u8; 4], out: &mut Vec<u64>) {
    use std::arch::x86_64::{
        __m256i, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_movemask_epi8, _mm256_or_si256,
        _mm256_set1_epi8,
    };
    let [a, b, c, d] = needles.map(|n| _mm256_set1_epi8(n as i8));
    for block in blocks {
        let mut mask = 0u64;
        for (k, half) in block.chunks_exact(32).enumerate() {
            // SAFETY: `half` is 32 readable bytes; the load takes any
            // alignment.
            let v = unsafe { _mm256_loadu_si256(half.as_ptr().cast::<__m256i>()) };
            let hits = _mm256_or_si256(
                _mm256_or_si256(_mm256_cmpeq_epi8(v, a), _mm256_cmpeq_epi8(v, b)),
                _mm256_or_si256(_mm256_cmpeq_epi8(v, c), _mm256_cmpeq_epi8(v, d)),
            );
            mask |= u64::from(_mm256_movemask_epi8(hits) as u32) << (32 * k);
        }
        out.push(mask);
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn whole_masks(bytes: &[u8], needles: [u8; 4], out: &mut Vec<u64>) {
    // A vectorising compiler may do better here; other targets are not
    // measured yet.
    out.extend(
        bytes
            .chunks_exact(64)
            .map(|block| tail_mask(block, needles)),
    );
}

/// How [`split`] ended.
pub(super) enum Split {
    /// The record's fields are found; it ends at `end` (its line break,
    /// or the end of input), after `breaks` line breaks inside quotes.
    Done { end: usize, breaks: u64 },
    /// No whole record yet.
    Incomplete,
    /// A doubled quote or text after a closing quote: the record takes
    /// the byte by byte path.
    Quoted(u8),
    /// `emit` refused a field.
    Refused,
}

/// The fields of the CSV record at `at` in `buf` (which `specials`
/// indexes), each given to `emit` as a range of `buf` in order (`false`
/// from it stops the split): the usual field is found by one look at the
/// index. A function of its own so that its loop holds what it reads in
/// registers.
#[inline]
pub(super) fn split(
    specials: &mut Specials,
    buf: &[u8],
    at: usize,
    (delimiter, quote): (u8, Option<u8>),
    eof: bool,
    mut emit: impl FnMut(Range<usize>) -> bool,
) -> Split {
    let mut breaks = 0;
    let mut i = at;
    loop {
        if let Some(q) = quote
            && buf.get(i) == Some(&q)
        {
            // Quoted: to the closing quote, line breaks counted.
            let mut j = i + 1;
            let close = loop {
                match specials.next(buf, j) {
                    Some(p) if buf[p] == q => break p,
                    Some(p) => {
                        breaks += u64::from(buf[p] == b'\n');
                        j = p + 1;
                    }
                    None if eof => return Split::Quoted(q),
                    None => return Split::Incomplete,
                }
            };
            if !emit(i + 1..close) {
                return Split::Refused;
            }
            match buf.get(close + 1) {
                Some(&b) if b == delimiter => i = close + 2,
                Some(b'\n' | b'\r') => {
                    return Split::Done {
                        end: close + 1,
                        breaks,
                    };
                }
                None if eof => {
                    return Split::Done {
                        end: close + 1,
                        breaks,
                    };
                }
                None => return Split::Incomplete,
                // A doubled quote, or text after the closing one.
                Some(_) => return Split::Quoted(q),
            }
        } else {
            // A quote inside an unquoted field is text.
            let mut j = i;
            let found = loop {
                match specials.next(buf, j) {
                    Some(p) if Some(buf[p]) == quote && buf[p] != delimiter => j = p + 1,
                    found => break found,
                }
            };
            match found {
                Some(p) => {
                    if !emit(i..p) {
                        return Split::Refused;
                    }
                    if buf[p] != delimiter {
                        return Split::Done { end: p, breaks };
                    }
                    i = p + 1;
                }
                None if eof => {
                    if !emit(i..buf.len()) {
                        return Split::Refused;
                    }
                    return Split::Done {
                        end: buf.len(),
                        breaks,
                    };
                }
                None => return Split::Incomplete,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// Every position's next special byte is the one a plain search
        /// finds, also when the buffer grows between searches.
        #[test]
        fn next_is_a_plain_search(
            text in proptest::collection::vec(
                prop_oneof![Just(b','), Just(b'\n'), Just(b'\r'), Just(b'"'), Just(b'a'), Just(0xC3u8)],
                0..400,
            ),
            grown in 0usize..400,
        ) {
            let is_special = |b: &u8| matches!(b, b',' | b'\n' | b'\r' | b'"');
            let mut index = Specials::new(b',', Some(b'"'));
            let cut = grown.min(text.len());
            for (buf, len) in [(&text[..cut], cut), (&text[..], text.len())] {
                for from in (0..=len + 1).rev().step_by(3).chain(0..len) {
                    let expected = buf.get(from..).and_then(|rest| rest.iter().position(is_special)).map(|p| from + p);
                    prop_assert_eq!(index.next(buf, from), expected, "from {}", from);
                }
            }
            index.reset();
            prop_assert_eq!(index.next(b"ab,", 0), Some(2));
        }
    }

    /// Both vector widths give the bits a byte-by-byte look gives.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn sse2_and_avx2_masks_are_byte_by_byte_ones() {
        let text: Vec<u8> = (0..64 * 40u32)
            .map(|i| b",\n\r\"ab\xC3x;"[(i.wrapping_mul(2_654_435_761) >> 7) as usize % 9])
            .collect();
        let needles = [b';', b'\n', b'\r', b'"'];
        let expected: Vec<u64> = text.chunks(64).map(|b| tail_mask(b, needles)).collect();
        let mut sse2 = Vec::new();
        // SAFETY: SSE2 is the x86-64 baseline.
        unsafe { sse2_masks(text.chunks_exact(64), needles, &mut sse2) };
        assert_eq!(sse2, expected);
        if std::arch::is_x86_feature_detected!("avx2") {
            let mut avx2 = Vec::new();
            // SAFETY: checked just above.
            unsafe { avx2_masks(text.chunks_exact(64), needles, &mut avx2) };
            assert_eq!(avx2, expected);
        }
    }

    #[test]
    fn without_a_quote_character_quotes_are_text() {
        let mut index = Specials::new(b';', None);
        assert_eq!(index.next(b"a\"b;c", 0), Some(3));
    }
}
