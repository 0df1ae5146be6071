//! The JSON lexer of the flat fast path (`flat_json.rs`): a cursor over
//! one chunk that reads tokens in JSON's exact syntax and gives up
//! ([`Bail`]) on anything it does not take, leaving the decision to
//! arrow-json.

/// Gave up: the input is not of the plain kind the fast path takes.
pub(super) struct Bail;

pub(super) type Step<T = ()> = std::result::Result<T, Bail>;

/// Nesting deeper than this in a skipped value gives up (arrow-json decides).
const MAX_DEPTH: usize = 64;

/// Short byte strings equal, compared inline (no call for a few bytes).
pub(super) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// The bytes that end a run of plain string content: the closing quote,
/// a backslash, a control character (not allowed raw).
static STOPS: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 0x20 {
        t[c] = true;
        c += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

pub(super) struct Cursor<'a> {
    pub(super) b: &'a [u8],
    pub(super) i: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    pub(super) fn peek(&self) -> Step<u8> {
        self.b.get(self.i).copied().ok_or(Bail)
    }

    pub(super) fn next(&mut self) -> Step<u8> {
        let b = self.peek()?;
        self.i += 1;
        Ok(b)
    }

    pub(super) fn eat(&mut self, b: u8) -> bool {
        let hit = self.b.get(self.i) == Some(&b);
        self.i += usize::from(hit);
        hit
    }

    pub(super) fn expect(&mut self, b: u8) -> Step {
        if self.eat(b) { Ok(()) } else { Err(Bail) }
    }

    pub(super) fn literal(&mut self, word: &[u8]) -> Step {
        if self.b[self.i..].starts_with(word) {
            self.i += word.len();
            Ok(())
        } else {
            Err(Bail)
        }
    }

    /// A string without escapes (an object key); the quotes excluded.
    pub(super) fn plain_string(&mut self) -> Step<&'a [u8]> {
        let (text, escaped) = self.string_run()?;
        if escaped { Err(Bail) } else { Ok(text) }
    }

    /// From an opening quote to the closing quote or the first backslash:
    /// the text before it, and whether a backslash ended it (the cursor
    /// then on the backslash, else past the closing quote).
    fn string_run(&mut self) -> Step<(&'a [u8], bool)> {
        self.expect(b'"')?;
        let start = self.i;
        // Strings here are short: a table lookup a byte beats a vector
        // search's set-up.
        let rest = &self.b[start..];
        let n = rest
            .iter()
            .position(|&c| STOPS[usize::from(c)])
            .ok_or(Bail)?;
        match rest[n] {
            b'"' => {
                self.i = start + n + 1;
                Ok((&rest[..n], false))
            }
            b'\\' => {
                self.i = start + n;
                Ok((&rest[..n], true))
            }
            // JSON strings hold no raw control characters.
            _ => Err(Bail),
        }
    }

    /// A string, unescaped into `scratch` when it has escapes.
    pub(super) fn string<'s>(&'s mut self, scratch: &'s mut Vec<u8>) -> Step<&'s [u8]> {
        let (text, escaped) = self.string_run()?;
        if !escaped {
            return Ok(text);
        }
        scratch.clear();
        scratch.extend_from_slice(text);
        loop {
            match self.next()? {
                b'"' => return Ok(scratch.as_slice()),
                b'\\' => {
                    let c = match self.next()? {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{08}',
                        b'f' => '\u{0c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let high = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&high) {
                                self.literal(b"\\u")?;
                                let low = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&low) {
                                    return Err(Bail);
                                }
                                0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
                            } else {
                                high
                            };
                            char::from_u32(code).ok_or(Bail)?
                        }
                        _ => return Err(Bail),
                    };
                    let mut buf = [0; 4];
                    scratch.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                c if c < 0x20 => return Err(Bail),
                c => scratch.push(c),
            }
        }
    }

    fn hex4(&mut self) -> Step<u32> {
        let digits = self.b.get(self.i..self.i + 4).ok_or(Bail)?;
        self.i += 4;
        let text = std::str::from_utf8(digits).map_err(|_| Bail)?;
        if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Bail);
        }
        u32::from_str_radix(text, 16).map_err(|_| Bail)
    }

    /// A number in JSON's syntax: its text, and its value when it is an
    /// integer (no fraction, no exponent) that fits an i64.
    pub(super) fn number(&mut self) -> Step<(&'a [u8], Option<i64>)> {
        let start = self.i;
        let negative = self.eat(b'-');
        // Up to 18 digits cannot overflow a u64; longer ones are checked.
        let mut magnitude: u64 = 0;
        let mut fits = true;
        match self.next()? {
            b'0' => {}
            d @ b'1'..=b'9' => {
                magnitude = u64::from(d - b'0');
                while let Some(&d @ b'0'..=b'9') = self.b.get(self.i) {
                    self.i += 1;
                    match magnitude
                        .checked_mul(10)
                        .and_then(|m| m.checked_add(u64::from(d - b'0')))
                    {
                        Some(m) => magnitude = m,
                        None => fits = false,
                    }
                }
            }
            _ => return Err(Bail),
        }
        let mut integer = true;
        if self.eat(b'.') {
            integer = false;
            self.digit()?;
            self.digits();
        }
        if self.eat(b'e') || self.eat(b'E') {
            integer = false;
            if !self.eat(b'+') {
                self.eat(b'-');
            }
            self.digit()?;
            self.digits();
        }
        let value = if !(integer && fits) {
            None
        } else if negative {
            0i64.checked_sub_unsigned(magnitude)
        } else {
            i64::try_from(magnitude).ok()
        };
        Ok((&self.b[start..self.i], value))
    }

    fn digit(&mut self) -> Step {
        match self.next()? {
            b'0'..=b'9' => Ok(()),
            _ => Err(Bail),
        }
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    /// Any JSON value, checked and passed over.
    pub(super) fn skip_value(&mut self, depth: usize) -> Step {
        if depth > MAX_DEPTH {
            return Err(Bail);
        }
        match self.peek()? {
            b'"' => {
                let mut scratch = Vec::new();
                self.string(&mut scratch).map(|_| ())
            }
            b'n' => self.literal(b"null"),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            open @ (b'{' | b'[') => {
                self.i += 1;
                let close = if open == b'{' { b'}' } else { b']' };
                self.ws();
                if self.eat(close) {
                    return Ok(());
                }
                loop {
                    if open == b'{' {
                        let mut scratch = Vec::new();
                        self.string(&mut scratch)?;
                        self.ws();
                        self.expect(b':')?;
                        self.ws();
                    }
                    self.skip_value(depth + 1)?;
                    self.ws();
                    match self.next()? {
                        b',' => self.ws(),
                        c if c == close => return Ok(()),
                        _ => return Err(Bail),
                    }
                }
            }
            _ => self.number().map(|_| ()),
        }
    }
}
