//! A group table for string keys that are short codes (`GROUP BY
//! l_returnflag, l_linestatus`, country codes, channel names, formatted
//! days): each key of at most 7 bytes is packed with its length into 64
//! bits, one or two key columns into one `u128` per row, and rows are
//! grouped by that integer in a small open-addressing table, instead of
//! hashing and comparing variable-length bytes row by row. The strings come
//! back from the packed values when the groups are emitted.
//!
//! The first key longer than 7 bytes widens the table: keys of up to 15
//! bytes pack into 128 bits each, one or two columns into a `[u128; 2]`
//! (Nexmark's `GROUP BY channel, DATE_FORMAT(dateTime, 'yyyy-MM-dd')`). The
//! first key longer than that moves the groups, in id order, into
//! DataFusion's table for the real key types, which goes on from there; ids
//! never change.
//!
//! An integer key beside a string one (`GROUP BY auction,
//! DATE_FORMAT(dateTime, 'yyyy-MM-dd')`, Nexmark q17) packs wide from the
//! start: its 64 bits with a flag above them, so that NULL stays 0.

use arrow::array::{Array, ArrayRef, AsArray, GenericStringArray, OffsetSizeTrait, StringArray};
use arrow::buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion_common::{DataFusionError, Result};
use datafusion_expr::EmitTo;
use datafusion_physical_plan::aggregates::group_values::GroupValues;

use crate::dense_groups::holding;

/// The longest key that packs: 7 bytes, with the length (plus one, so that
/// a null packs as 0 and the empty string does not) in the eighth.
const MAX_LEN: usize = 7;

/// The longest key that packs wide: 15 bytes, the length in the sixteenth.
const WIDE_LEN: usize = 15;

/// The group table of one or two string key columns.
pub(crate) struct ShortStrings {
    /// The real key columns' schema.
    schema: SchemaRef,
    mode: Mode,
    /// The current batch's packed keys (kept to reuse the allocation).
    packed: Vec<u128>,
    /// The same, packed wide.
    wide: Vec<[u128; 2]>,
}

enum Mode {
    Packed(PackedTable<u128>),
    /// Keys of up to [`WIDE_LEN`] bytes.
    Wide(PackedTable<[u128; 2]>),
    /// Keys in DataFusion's table for the real key types.
    Bytes(Box<dyn GroupValues>),
}

impl ShortStrings {
    /// Whether `schema` is one or two string columns, or a string and an
    /// integer column, which this table takes.
    pub(crate) fn takes(schema: &Schema) -> bool {
        let fields = schema.fields();
        (1..=2).contains(&fields.len())
            && fields.iter().any(|f| is_string(f.data_type()))
            && fields
                .iter()
                .all(|f| is_string(f.data_type()) || is_integer(f.data_type()))
    }

    /// A table for `schema`'s keys ([`Self::takes`]).
    pub(crate) fn new(schema: SchemaRef) -> Self {
        let integers = schema.fields().iter().any(|f| is_integer(f.data_type()));
        Self {
            schema,
            mode: match integers {
                true => Mode::Wide(PackedTable::new()),
                false => Mode::Packed(PackedTable::new()),
            },
            packed: Vec::new(),
            wide: Vec::new(),
        }
    }

    /// Go on with keys packed wide, with the same ids.
    fn widen(&mut self) {
        if let Mode::Packed(table) = &mut self.mode {
            let mut wide = PackedTable::new();
            let keys: Vec<[u128; 2]> = table
                .emit(EmitTo::All)
                .into_iter()
                .map(|k| [widened(k as u64), widened((k >> 64) as u64)])
                .collect();
            wide.intern(&keys, &mut Vec::new());
            self.mode = Mode::Wide(wide);
        }
    }

    /// Go on in DataFusion's table for the real key types, with the same ids.
    fn unpacked(&mut self) -> Result<&mut Box<dyn GroupValues>> {
        let keys = match &mut self.mode {
            Mode::Packed(table) => Some(unpack(&self.schema, &table.emit(EmitTo::All))?),
            Mode::Wide(table) => Some(unpack_wide(&self.schema, &table.emit(EmitTo::All))?),
            Mode::Bytes(_) => None,
        };
        if let Some(keys) = keys {
            self.mode = Mode::Bytes(holding(&self.schema, &keys)?);
        }
        match &mut self.mode {
            Mode::Bytes(table) => Ok(table),
            _ => unreachable!("just replaced"),
        }
    }
}

impl GroupValues for ShortStrings {
    fn intern(&mut self, cols: &[ArrayRef], groups: &mut Vec<usize>) -> Result<()> {
        if let Mode::Packed(table) = &mut self.mode {
            if pack(cols, &mut self.packed)? {
                table.intern(&self.packed, groups);
                return Ok(());
            }
            self.widen();
        }
        if let Mode::Wide(table) = &mut self.mode
            && pack_wide(cols, &mut self.wide)?
        {
            table.intern(&self.wide, groups);
            return Ok(());
        }
        self.unpacked()?.intern(cols, groups)
    }

    fn size(&self) -> usize {
        self.packed.capacity() * 16
            + self.wide.capacity() * 32
            + match &self.mode {
                Mode::Packed(t) => t.size(),
                Mode::Wide(t) => t.size(),
                Mode::Bytes(t) => t.size(),
            }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn len(&self) -> usize {
        match &self.mode {
            Mode::Packed(t) => t.keys.len(),
            Mode::Wide(t) => t.keys.len(),
            Mode::Bytes(t) => t.len(),
        }
    }

    fn emit(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        match &mut self.mode {
            Mode::Packed(table) => unpack(&self.schema, &table.emit(emit_to)),
            Mode::Wide(table) => unpack_wide(&self.schema, &table.emit(emit_to)),
            Mode::Bytes(table) => table.emit(emit_to),
        }
    }

    fn clear_shrink(&mut self, num_rows: usize) {
        self.packed = Vec::new();
        self.wide = Vec::new();
        match &mut self.mode {
            Mode::Packed(t) => *t = PackedTable::new(),
            Mode::Wide(t) => *t = PackedTable::new(),
            Mode::Bytes(t) => t.clear_shrink(num_rows),
        }
    }
}

/// No group in this slot.
const EMPTY: u32 = u32::MAX;

/// A packed key: compared whole, folded to 64 bits for the slot.
trait Key: Copy + Eq {
    fn fold(self) -> u64;
}

impl Key for u128 {
    #[inline]
    fn fold(self) -> u64 {
        (self as u64) ^ ((self >> 64) as u64).rotate_left(29)
    }
}

impl Key for [u128; 2] {
    #[inline]
    fn fold(self) -> u64 {
        self[0].fold()
            ^ self[1]
                .fold()
                .rotate_left(43)
                .wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// Packed keys to group ids: open addressing with linear probing over a
/// power-of-two slot array kept at most half full; a few groups stay in
/// the first cache lines.
struct PackedTable<K> {
    /// Per group id, its packed key.
    keys: Vec<K>,
    /// Per slot, a group id or [`EMPTY`].
    slots: Vec<u32>,
    /// 64 minus the slot count's bits: a hash's top bits pick the slot.
    shift: u32,
}

impl<K: Key> PackedTable<K> {
    fn new() -> Self {
        Self::with_slots(64)
    }

    fn with_slots(slots: usize) -> Self {
        Self {
            keys: Vec::new(),
            slots: vec![EMPTY; slots],
            shift: 64 - slots.trailing_zeros(),
        }
    }

    fn slot(&self, key: K) -> usize {
        (key.fold().wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    fn intern(&mut self, packed: &[K], groups: &mut Vec<usize>) {
        groups.clear();
        groups.reserve(packed.len());
        for &key in packed {
            let mask = self.slots.len() - 1;
            let mut slot = self.slot(key);
            let id = loop {
                let id = self.slots[slot];
                if id == EMPTY {
                    let id = self.keys.len() as u32;
                    self.slots[slot] = id;
                    self.keys.push(key);
                    if self.keys.len() * 2 > self.slots.len() {
                        self.rehash(self.slots.len() * 2);
                    }
                    break id;
                }
                if self.keys[id as usize] == key {
                    break id;
                }
                slot = (slot + 1) & mask;
            };
            groups.push(id as usize);
        }
    }

    /// Rebuilds the slots, `slots` of them, for the keys held.
    fn rehash(&mut self, slots: usize) {
        let keys = std::mem::take(&mut self.keys);
        *self = Self::with_slots(slots);
        let mask = slots - 1;
        for (id, &key) in keys.iter().enumerate() {
            let mut slot = self.slot(key);
            while self.slots[slot] != EMPTY {
                slot = (slot + 1) & mask;
            }
            self.slots[slot] = id as u32;
        }
        self.keys = keys;
    }

    /// Removes the groups `emit_to` names; the rest are numbered from 0.
    fn emit(&mut self, emit_to: EmitTo) -> Vec<K> {
        match emit_to {
            EmitTo::All => std::mem::replace(self, Self::new()).keys,
            EmitTo::First(n) => {
                let n = n.min(self.keys.len());
                let first = self.keys.drain(..n).collect();
                let slots = (self.keys.len() * 2).next_power_of_two().max(64);
                self.rehash(slots);
                first
            }
        }
    }

    fn size(&self) -> usize {
        self.keys.capacity() * std::mem::size_of::<K>() + self.slots.capacity() * 4
    }
}

fn is_string(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// The integer key types packed beside a string.
fn is_integer(t: &DataType) -> bool {
    matches!(t, DataType::Int32 | DataType::Int64)
}

/// An integer key packed wide: its 64 bits and a flag above them (a NULL
/// is 0).
const INTEGER: u128 = 1 << 64;

/// Packs `cols` (one or two columns) into `out`, one `u128` per row; false
/// when some key is longer than [`MAX_LEN`].
fn pack(cols: &[ArrayRef], out: &mut Vec<u128>) -> Result<bool> {
    out.clear();
    out.resize(cols[0].len(), 0);
    let out = out.as_mut_slice();
    let first = pack_column(cols[0].as_ref(), |row, word| out[row] = word as u128)?;
    Ok(first
        && match cols.get(1) {
            Some(second) => pack_column(second.as_ref(), |row, word| {
                out[row] |= (word as u128) << 64
            })?,
            None => true,
        })
}

/// Per length, the mask of a `u64`'s low bytes the key keeps.
const LOW_BYTES: [u64; MAX_LEN + 1] = {
    let mut masks = [0u64; MAX_LEN + 1];
    let mut n = 1;
    while n <= MAX_LEN {
        masks[n] = u64::MAX >> (64 - 8 * n);
        n += 1;
    }
    masks
};

fn low_bytes(n: usize) -> u64 {
    LOW_BYTES[n]
}

/// One key, as `(length + 1) << 56 | bytes`.
fn packed(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word[..bytes.len()].copy_from_slice(bytes);
    ((bytes.len() as u64 + 1) << 56) | u64::from_le_bytes(word)
}

/// Hands every row's packed key to `put` (nulls as 0); false at the first
/// key longer than [`MAX_LEN`].
fn pack_column(col: &dyn Array, put: impl FnMut(usize, u64)) -> Result<bool> {
    match col.data_type() {
        DataType::Utf8 => Ok(pack_offsets(col.as_string::<i32>(), put)),
        DataType::LargeUtf8 => Ok(pack_offsets(col.as_string::<i64>(), put)),
        DataType::Utf8View => {
            let views = col.as_string_view();
            let mut put = put;
            for (row, &view) in views.views().iter().enumerate() {
                let len = view as u32 as usize;
                if views.is_null(row) {
                    continue;
                }
                if len > MAX_LEN {
                    return Ok(false);
                }
                // A short view holds its bytes inline, after the length.
                put(
                    row,
                    ((len as u64 + 1) << 56) | ((view >> 32) as u64 & low_bytes(len)),
                );
            }
            Ok(true)
        }
        other => Err(DataFusionError::Internal(format!(
            "short string keys: a {other} column"
        ))),
    }
}

/// Hands `put` each non-null value of `col` as its row, the values buffer
/// and the value's start and length; false at the first value longer than
/// `max` bytes.
fn each_short<O: OffsetSizeTrait>(
    col: &GenericStringArray<O>,
    max: usize,
    mut put: impl FnMut(usize, &[u8], usize, usize),
) -> bool {
    let offsets = col.value_offsets();
    let data = col.value_data();
    let nulls = col.nulls().filter(|n| n.null_count() > 0);
    for (row, w) in offsets.windows(2).enumerate() {
        if nulls.is_some_and(|n| n.is_null(row)) {
            continue;
        }
        let (start, end) = (w[0].as_usize(), w[1].as_usize());
        if end - start > max {
            return false;
        }
        put(row, data, start, end - start);
    }
    true
}

fn pack_offsets<O: OffsetSizeTrait>(
    col: &GenericStringArray<O>,
    mut put: impl FnMut(usize, u64),
) -> bool {
    each_short(col, MAX_LEN, |row, data, start, len| {
        put(
            row,
            match data.get(start..start + 8) {
                // Eight bytes read at once, the key's kept.
                Some(word) => {
                    let word = u64::from_le_bytes(word.try_into().expect("eight bytes"));
                    ((len as u64 + 1) << 56) | (word & low_bytes(len))
                }
                None => packed(&data[start..start + len]),
            },
        )
    })
}

/// The key columns of `schema` from packed keys.
fn unpack(schema: &Schema, keys: &[u128]) -> Result<Vec<ArrayRef>> {
    unpack_by(schema, keys.len(), MAX_LEN, |row, c| {
        widened((keys[row] >> (64 * c)) as u64)
    })
}

/// The key columns of `schema` from `rows` keys, column `c` of row `r`
/// packed wide as `word(r, c)`.
fn unpack_by(
    schema: &Schema,
    rows: usize,
    longest: usize,
    word: impl Fn(usize, usize) -> u128,
) -> Result<Vec<ArrayRef>> {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(c, field)| {
            if is_integer(field.data_type()) {
                let ints: arrow::array::Int64Array = (0..rows)
                    .map(|row| {
                        let word = word(row, c);
                        (word != 0).then_some(word as u64 as i64)
                    })
                    .collect();
                return Ok(cast(&ints, field.data_type())?);
            }
            // Each key's sixteen bytes written at once and the ones past
            // it cut off; the text is checked as UTF-8 once, whole.
            let mut values: Vec<u8> = Vec::with_capacity(rows * longest + 16);
            let mut offsets: Vec<i32> = Vec::with_capacity(rows + 1);
            let mut valid: Vec<bool> = Vec::with_capacity(rows);
            offsets.push(0);
            for row in 0..rows {
                let word = word(row, c);
                valid.push(word != 0);
                if word != 0 {
                    let len = ((word >> 120) - 1) as usize;
                    let at = values.len();
                    values.extend_from_slice(&word.to_le_bytes());
                    values.truncate(at + len);
                }
                let end = i32::try_from(values.len())
                    .map_err(|_| DataFusionError::Internal("short string keys: too long".into()))?;
                offsets.push(end);
            }
            let nulls = NullBuffer::from(valid);
            let strings = StringArray::try_new(
                OffsetBuffer::new(ScalarBuffer::from(offsets)),
                values.into(),
                (nulls.null_count() > 0).then_some(nulls),
            )
            .map_err(|e| DataFusionError::Internal(format!("short string keys: {e}")))?;
            Ok(cast(&strings, field.data_type())?)
        })
        .collect()
}

/// A narrow packed key (`(length + 1) << 56 | bytes`, 0 for NULL) packed
/// wide (`(length + 1) << 120 | bytes`).
fn widened(word: u64) -> u128 {
    if word == 0 {
        return 0;
    }
    (u128::from(word >> 56) << 120) | u128::from(word & (u64::MAX >> 8))
}

/// One key packed wide, as `(length + 1) << 120 | bytes`.
fn packed_wide(bytes: &[u8]) -> u128 {
    let mut word = [0u8; 16];
    word[..bytes.len()].copy_from_slice(bytes);
    ((bytes.len() as u128 + 1) << 120) | u128::from_le_bytes(word)
}

/// As [`pack`], each key in 128 bits; false when some key is longer than
/// [`WIDE_LEN`].
fn pack_wide(cols: &[ArrayRef], out: &mut Vec<[u128; 2]>) -> Result<bool> {
    out.clear();
    out.resize(cols[0].len(), [0; 2]);
    let out = out.as_mut_slice();
    for (c, col) in cols.iter().enumerate() {
        let packed = match col.data_type() {
            DataType::Int64 | DataType::Int32 => {
                let ints = cast(col, &DataType::Int64)?;
                let ints = ints.as_primitive::<arrow::datatypes::Int64Type>();
                let values = ints.values();
                match ints.nulls().filter(|n| n.null_count() > 0) {
                    None => {
                        for (o, &v) in out.iter_mut().zip(values.iter()) {
                            o[c] = INTEGER | u128::from(v as u64);
                        }
                    }
                    Some(nulls) => {
                        for (row, o) in out.iter_mut().enumerate() {
                            if nulls.is_valid(row) {
                                o[c] = INTEGER | u128::from(values[row] as u64);
                            }
                        }
                    }
                }
                true
            }
            DataType::Utf8 => pack_offsets_wide(col.as_string::<i32>(), |r, w| out[r][c] = w),
            DataType::LargeUtf8 => pack_offsets_wide(col.as_string::<i64>(), |r, w| out[r][c] = w),
            DataType::Utf8View => {
                let views = col.as_string_view();
                let mut fits = true;
                for (row, value) in views.iter().enumerate() {
                    match value {
                        Some(v) if v.len() > WIDE_LEN => {
                            fits = false;
                            break;
                        }
                        Some(v) => out[row][c] = packed_wide(v.as_bytes()),
                        None => {}
                    }
                }
                fits
            }
            other => {
                return Err(DataFusionError::Internal(format!(
                    "short string keys: a {other} column"
                )));
            }
        };
        if !packed {
            return Ok(false);
        }
    }
    Ok(true)
}

fn pack_offsets_wide<O: OffsetSizeTrait>(
    col: &GenericStringArray<O>,
    mut put: impl FnMut(usize, u128),
) -> bool {
    each_short(col, WIDE_LEN, |row, data, start, len| {
        put(
            row,
            match data.get(start..start + 16) {
                // Sixteen bytes read at once, the key's kept.
                Some(word) => {
                    let word = u128::from_le_bytes(word.try_into().expect("sixteen bytes"));
                    let kept = if len == 0 {
                        0
                    } else {
                        u128::MAX >> (128 - 8 * len)
                    };
                    ((len as u128 + 1) << 120) | (word & kept)
                }
                None => packed_wide(&data[start..start + len]),
            },
        )
    })
}

/// The key columns of `schema` from keys packed wide.
fn unpack_wide(schema: &Schema, keys: &[[u128; 2]]) -> Result<Vec<ArrayRef>> {
    unpack_by(schema, keys.len(), WIDE_LEN, |row, c| keys[row][c])
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{LargeStringArray, StringArray, StringViewArray};
    use arrow::datatypes::Field;
    use datafusion_physical_plan::aggregates::group_values::new_group_values;
    use datafusion_physical_plan::aggregates::order::GroupOrdering;
    use proptest::prelude::*;

    use super::*;

    fn column(ty: &DataType, values: &[Option<String>]) -> ArrayRef {
        let strings = StringArray::from(values.to_vec());
        // An integer column: each string's own number (its bytes), so equal
        // strings give equal numbers and a few different ones collide.
        let number = |v: &Option<String>| {
            v.as_ref().map(|s| {
                s.bytes()
                    .fold(-3i64, |n, b| n.wrapping_mul(31) ^ i64::from(b))
                    % 5
            })
        };
        match ty {
            DataType::Int64 => {
                return Arc::new(arrow::array::Int64Array::from_iter(
                    values.iter().map(number),
                ));
            }
            DataType::Int32 => {
                return Arc::new(arrow::array::Int32Array::from_iter(
                    values
                        .iter()
                        .map(|v| number(v).map(|n| n as i32 * 100_000_007)),
                ));
            }
            _ => {}
        }
        match ty {
            DataType::Utf8 => Arc::new(strings),
            DataType::LargeUtf8 => Arc::new(LargeStringArray::from(values.to_vec())),
            _ => Arc::new(StringViewArray::from(values.to_vec())),
        }
    }

    /// Interns every batch, then emits the groups (the first `first` of
    /// them, then the rest): every row's id must name its own key, the
    /// keys must come back in their own types, and there must be as many
    /// groups as DataFusion's table for the real types finds.
    fn check(types: &[DataType], batches: &[Vec<Vec<Option<String>>>], first: Option<usize>) {
        let schema = Arc::new(Schema::new(
            types
                .iter()
                .enumerate()
                .map(|(i, t)| Field::new(format!("k{i}"), t.clone(), true))
                .collect::<Vec<_>>(),
        ));
        assert!(ShortStrings::takes(&schema));
        let mut table = ShortStrings::new(Arc::clone(&schema));
        let mut reference = new_group_values(Arc::clone(&schema), &GroupOrdering::None).unwrap();
        let mut interned = Vec::new();
        for batch in batches {
            let cols: Vec<ArrayRef> = types
                .iter()
                .zip(batch)
                .map(|(t, values)| column(t, values))
                .collect();
            let (mut ids, mut want) = (Vec::new(), Vec::new());
            table.intern(&cols, &mut ids).unwrap();
            reference.intern(&cols, &mut want).unwrap();
            assert_eq!(table.len(), reference.len());
            interned.push((cols, ids));
        }
        let groups = table.len();
        let mut parts = Vec::new();
        // After emitting the first n groups, the first batch again: its ids
        // count from the groups left.
        let mut again = None;
        if let Some(n) = first.filter(|&n| n < groups) {
            parts.push(table.emit(EmitTo::First(n)).unwrap());
            assert_eq!(table.len(), groups - n);
            let cols = interned[0].0.clone();
            let mut ids = Vec::new();
            table.intern(&cols, &mut ids).unwrap();
            again = Some((cols, ids));
        }
        parts.push(table.emit(EmitTo::All).unwrap());
        assert!(table.is_empty());
        let column = |parts: &[Vec<ArrayRef>], c: usize| {
            let column: Vec<&dyn Array> = parts.iter().map(|p| p[c].as_ref()).collect();
            arrow::compute::concat(&column).unwrap()
        };
        let keys: Vec<ArrayRef> = (0..types.len()).map(|c| column(&parts, c)).collect();
        for (key, ty) in keys.iter().zip(types) {
            assert!(key.len() >= groups);
            assert_eq!(key.data_type(), ty);
        }
        let rest: Vec<ArrayRef> = (0..types.len())
            .map(|c| column(&parts[parts.len() - 1..], c))
            .collect();
        for (cols, ids, keys) in interned
            .into_iter()
            .map(|(c, i)| (c, i, &keys))
            .chain(again.map(|(c, i)| (c, i, &rest)))
        {
            let ids = arrow::array::UInt32Array::from_iter_values(ids.iter().map(|&i| i as u32));
            for (col, key) in cols.iter().zip(keys) {
                let named = arrow::compute::take(key.as_ref(), &ids, None).unwrap();
                assert_eq!(named.as_ref(), col.as_ref());
            }
        }
    }

    /// Short keys pack narrow; long ones (up to 30 bytes) pack wide or
    /// not at all.
    fn key(long: bool) -> impl Strategy<Value = Option<String>> {
        let text = if long {
            "[a-zé€\\x00]{0,10}"
        } else {
            "[a-zé€\\x00]{0,2}"
        };
        prop_oneof![1 => Just(None), 8 => proptest::string::string_regex(text).unwrap().prop_map(Some)]
    }

    fn string_type() -> impl Strategy<Value = DataType> {
        prop_oneof![
            Just(DataType::Utf8),
            Just(DataType::LargeUtf8),
            Just(DataType::Utf8View)
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn every_id_names_its_key(
            types in proptest::collection::vec(string_type(), 1..3)
                .prop_flat_map(|types| {
                    // Now and then an integer column beside the first string.
                    let n = types.len();
                    (Just(types), prop_oneof![
                        2 => Just(None),
                        1 => Just(Some(DataType::Int64)),
                        1 => Just(Some(DataType::Int32)),
                    ], 0..=n)
                })
                .prop_map(|(mut types, integer, at)| {
                    if let Some(t) = integer {
                        types.truncate(1);
                        types.insert(at.min(1), t);
                    }
                    types
                }),
            long in proptest::collection::vec(any::<bool>(), 1..4),
            rows in proptest::collection::vec(1usize..90, 1..4),
            seed in proptest::collection::vec(key(false), 200),
            longs in proptest::collection::vec(key(true), 200),
            first in proptest::option::of(0usize..10),
        ) {
            let mut pick = seed.iter().cycle().zip(longs.iter().cycle());
            let batches: Vec<Vec<Vec<Option<String>>>> = rows
                .iter()
                .enumerate()
                .map(|(b, &n)| {
                    let late_long = long.get(b).copied().unwrap_or(false);
                    types
                        .iter()
                        .map(|_| {
                            (0..n)
                                .map(|_| {
                                    let (short, long) = pick.next().unwrap();
                                    if late_long { long.clone() } else { short.clone() }
                                })
                                .collect()
                        })
                        .collect()
                })
                .collect();
            check(&types, &batches, first);
        }
    }

    #[test]
    fn packs_at_the_end_of_a_buffer_and_keeps_empty_apart_from_null() {
        let values = |v: &[Option<&str>]| v.iter().map(|s| s.map(str::to_string)).collect();
        // "xyz" ends the value buffer: it cannot be read eight bytes at once.
        let keys: Vec<Option<String>> =
            values(&[Some(""), None, Some("a"), Some("a\0"), Some("xyz")]);
        for ty in [DataType::Utf8, DataType::LargeUtf8, DataType::Utf8View] {
            check(std::slice::from_ref(&ty), &[vec![keys.clone()]], None);
            check(
                &[ty.clone(), ty],
                &[vec![keys.clone(), keys.clone()]],
                Some(2),
            );
        }
    }

    #[test]
    fn longer_keys_widen_the_table_and_long_ones_move_the_groups_with_their_ids() {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Utf8, true)]));
        let mut table = ShortStrings::new(schema);
        let mut ids = Vec::new();
        let short: ArrayRef = Arc::new(StringArray::from(vec!["A", "N", "A"]));
        table.intern(&[short], &mut ids).unwrap();
        assert!(matches!(table.mode, Mode::Packed(_)));
        let longer: ArrayRef = Arc::new(StringArray::from(vec!["N", "a longer key", "A"]));
        table.intern(&[longer], &mut ids).unwrap();
        assert!(matches!(table.mode, Mode::Wide(_)));
        assert_eq!(ids, [1, 2, 0]);
        let long: ArrayRef = Arc::new(StringArray::from(vec![
            "more than fifteen bytes",
            "a longer key",
            "N",
        ]));
        table.intern(&[long], &mut ids).unwrap();
        assert!(matches!(table.mode, Mode::Bytes(_)));
        assert_eq!(ids, [3, 2, 1]);
        let keys = table.emit(EmitTo::All).unwrap().remove(0);
        assert_eq!(
            keys.as_ref(),
            &StringArray::from(vec!["A", "N", "a longer key", "more than fifteen bytes"])
                as &dyn Array
        );
    }

    #[test]
    fn many_groups_and_three_columns() {
        // Thousands of groups: the slots grow many times.
        let keys: Vec<Option<String>> = (0..5000).map(|i| Some(format!("{i:x}"))).collect();
        check(
            &[DataType::Utf8],
            &[vec![keys.clone()], vec![keys]],
            Some(1234),
        );
        let three = Schema::new(vec![
            Field::new("a", DataType::Utf8, true),
            Field::new("b", DataType::Utf8, true),
            Field::new("c", DataType::Utf8, true),
        ]);
        assert!(!ShortStrings::takes(&three));
    }
}
