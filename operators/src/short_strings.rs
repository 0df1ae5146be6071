//! A group table for string keys that are short codes (`GROUP BY
//! l_returnflag, l_linestatus`, country codes, channel names): each key of
//! at most 7 bytes is packed with its length into one `u64`, and the packed
//! values are grouped as integers — one key column in a `u64` table, two in
//! one 128-bit table, more as several `u64` columns — instead of hashing
//! and comparing variable-length bytes row by row. The strings come back
//! from the packed values when the groups are emitted.
//!
//! The first key longer than 7 bytes moves the groups, in id order, into
//! DataFusion's table for the real key types, which goes on from there; ids
//! never change.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Decimal128Array, GenericStringArray, OffsetSizeTrait, StringBuilder,
    UInt64Array,
};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Decimal128Type, Field, Schema, SchemaRef, UInt64Type};
use datafusion_common::{DataFusionError, Result};
use datafusion_expr::EmitTo;
use datafusion_physical_plan::aggregates::group_values::{GroupValues, new_group_values};
use datafusion_physical_plan::aggregates::order::GroupOrdering;

use crate::dense_groups::holding;

/// The longest key that packs: 7 bytes, with the length (plus one, so that
/// a null packs as 0 and the empty string does not) in the eighth.
const MAX_LEN: usize = 7;

/// The group table of string keys.
pub(crate) struct ShortStrings {
    /// The real key columns' schema.
    schema: SchemaRef,
    mode: Mode,
}

enum Mode {
    /// Packed keys, in DataFusion's table for the packed columns.
    Packed(Box<dyn GroupValues>),
    /// Keys in DataFusion's table for the real key types.
    Bytes(Box<dyn GroupValues>),
}

impl ShortStrings {
    /// Whether every column of `schema` is a string column this table takes.
    pub(crate) fn takes(schema: &Schema) -> bool {
        !schema.fields().is_empty()
            && schema.fields().iter().all(|f| {
                matches!(
                    f.data_type(),
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
                )
            })
    }

    /// A table for `schema`'s keys, which must all be strings ([`Self::takes`]).
    pub(crate) fn new(schema: SchemaRef) -> Result<Self> {
        let packed = new_group_values(packed_schema(schema.fields().len()), &GroupOrdering::None)?;
        Ok(Self {
            schema,
            mode: Mode::Packed(packed),
        })
    }

    /// Go on in DataFusion's table for the real key types, with the same ids.
    fn unpacked(&mut self) -> Result<&mut Box<dyn GroupValues>> {
        if let Mode::Packed(packed) = &mut self.mode {
            let keys = unpack(&self.schema, &packed.emit(EmitTo::All)?)?;
            self.mode = Mode::Bytes(holding(&self.schema, &keys)?);
        }
        match &mut self.mode {
            Mode::Bytes(table) => Ok(table),
            Mode::Packed(_) => unreachable!("just replaced"),
        }
    }

    fn table(&self) -> &dyn GroupValues {
        match &self.mode {
            Mode::Packed(t) | Mode::Bytes(t) => t.as_ref(),
        }
    }
}

/// The packed columns for `keys` string columns.
fn packed_schema(keys: usize) -> SchemaRef {
    let fields = match keys {
        2 => vec![Field::new("packed", DataType::Decimal128(38, 0), false)],
        n => (0..n)
            .map(|i| Field::new(format!("packed{i}"), DataType::UInt64, false))
            .collect(),
    };
    Arc::new(Schema::new(fields))
}

impl GroupValues for ShortStrings {
    fn intern(&mut self, cols: &[ArrayRef], groups: &mut Vec<usize>) -> Result<()> {
        if let Mode::Packed(table) = &mut self.mode
            && let Some(packed) = pack(cols)?
        {
            return table.intern(&packed, groups);
        }
        self.unpacked()?.intern(cols, groups)
    }

    fn size(&self) -> usize {
        self.table().size()
    }

    fn is_empty(&self) -> bool {
        self.table().is_empty()
    }

    fn len(&self) -> usize {
        self.table().len()
    }

    fn emit(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        match &mut self.mode {
            Mode::Packed(table) => unpack(&self.schema, &table.emit(emit_to)?),
            Mode::Bytes(table) => table.emit(emit_to),
        }
    }

    fn clear_shrink(&mut self, num_rows: usize) {
        match &mut self.mode {
            Mode::Packed(t) | Mode::Bytes(t) => t.clear_shrink(num_rows),
        }
    }
}

/// `cols` packed, or `None` when some key is longer than [`MAX_LEN`].
fn pack(cols: &[ArrayRef]) -> Result<Option<Vec<ArrayRef>>> {
    let mut packed = Vec::with_capacity(cols.len());
    for col in cols {
        match pack_column(col.as_ref())? {
            Some(p) => packed.push(p),
            None => return Ok(None),
        }
    }
    Ok(Some(if let [a, b] = packed.as_slice() {
        let pairs: Decimal128Array = a
            .iter()
            .zip(b)
            .map(|(&a, &b)| (a as i128) | ((b as i128) << 64))
            .collect::<Vec<_>>()
            .into();
        vec![Arc::new(pairs.with_precision_and_scale(38, 0)?) as ArrayRef]
    } else {
        packed
            .into_iter()
            .map(|p| Arc::new(UInt64Array::from(p)) as ArrayRef)
            .collect()
    }))
}

/// The low `n` bytes of a `u64`.
fn low_bytes(n: usize) -> u64 {
    if n == 0 { 0 } else { u64::MAX >> (64 - 8 * n) }
}

/// One key, as `(length + 1) << 56 | bytes`.
fn packed(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word[..bytes.len()].copy_from_slice(bytes);
    ((bytes.len() as u64 + 1) << 56) | u64::from_le_bytes(word)
}

fn pack_column(col: &dyn Array) -> Result<Option<Vec<u64>>> {
    match col.data_type() {
        DataType::Utf8 => Ok(pack_offsets(col.as_string::<i32>())),
        DataType::LargeUtf8 => Ok(pack_offsets(col.as_string::<i64>())),
        DataType::Utf8View => {
            let views = col.as_string_view();
            let mut out = Vec::with_capacity(views.len());
            for (i, &view) in views.views().iter().enumerate() {
                let len = view as u32 as usize;
                out.push(if views.is_null(i) {
                    0
                } else if len > MAX_LEN {
                    return Ok(None);
                } else {
                    // A short view holds its bytes inline, after the length.
                    ((len as u64 + 1) << 56) | ((view >> 32) as u64 & low_bytes(len))
                });
            }
            Ok(Some(out))
        }
        other => Err(DataFusionError::Internal(format!(
            "short string keys: a {other} column"
        ))),
    }
}

fn pack_offsets<O: OffsetSizeTrait>(col: &GenericStringArray<O>) -> Option<Vec<u64>> {
    let offsets = col.value_offsets();
    let data = col.value_data();
    let mut out = Vec::with_capacity(col.len());
    for (i, w) in offsets.windows(2).enumerate() {
        let (start, end) = (w[0].as_usize(), w[1].as_usize());
        let len = end - start;
        if col.is_null(i) {
            out.push(0);
        } else if len > MAX_LEN {
            return None;
        } else if let Some(word) = data.get(start..start + 8) {
            // Eight bytes read at once, the key's kept.
            let word = u64::from_le_bytes(word.try_into().expect("eight bytes"));
            out.push(((len as u64 + 1) << 56) | (word & low_bytes(len)));
        } else {
            out.push(packed(&data[start..end]));
        }
    }
    Some(out)
}

/// The key columns of `schema` from packed columns.
fn unpack(schema: &Schema, packed: &[ArrayRef]) -> Result<Vec<ArrayRef>> {
    let words: Vec<Vec<u64>> = if schema.fields().len() == 2 {
        let pairs = packed[0].as_primitive::<Decimal128Type>();
        vec![
            pairs.values().iter().map(|&p| p as u64).collect(),
            pairs.values().iter().map(|&p| (p >> 64) as u64).collect(),
        ]
    } else {
        packed
            .iter()
            .map(|p| p.as_primitive::<UInt64Type>().values().to_vec())
            .collect()
    };
    schema
        .fields()
        .iter()
        .zip(words)
        .map(|(field, words)| {
            let mut strings = StringBuilder::with_capacity(words.len(), words.len() * MAX_LEN);
            for word in words {
                if word == 0 {
                    strings.append_null();
                    continue;
                }
                let len = ((word >> 56) - 1) as usize;
                let bytes = word.to_le_bytes();
                let text = std::str::from_utf8(&bytes[..len])
                    .map_err(|e| DataFusionError::Internal(format!("short string keys: {e}")))?;
                strings.append_value(text);
            }
            Ok(cast(&strings.finish(), field.data_type())?)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use arrow::array::{LargeStringArray, StringArray, StringViewArray};
    use proptest::prelude::*;

    use super::*;

    fn column(ty: &DataType, values: &[Option<String>]) -> ArrayRef {
        let strings = StringArray::from(values.to_vec());
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
        let mut table = ShortStrings::new(Arc::clone(&schema)).unwrap();
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
        if let Some(n) = first.filter(|&n| n < groups) {
            parts.push(table.emit(EmitTo::First(n)).unwrap());
            assert_eq!(table.len(), groups - n);
        }
        parts.push(table.emit(EmitTo::All).unwrap());
        assert!(table.is_empty());
        let keys: Vec<ArrayRef> = (0..types.len())
            .map(|c| {
                let column: Vec<&dyn Array> = parts.iter().map(|p| p[c].as_ref()).collect();
                arrow::compute::concat(&column).unwrap()
            })
            .collect();
        for (key, ty) in keys.iter().zip(types) {
            assert_eq!(key.len(), groups);
            assert_eq!(key.data_type(), ty);
        }
        for (cols, ids) in interned {
            let ids = arrow::array::UInt32Array::from_iter_values(ids.iter().map(|&i| i as u32));
            for (col, key) in cols.iter().zip(&keys) {
                let named = arrow::compute::take(key.as_ref(), &ids, None).unwrap();
                assert_eq!(named.as_ref(), col.as_ref());
            }
        }
    }

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
            types in proptest::collection::vec(string_type(), 1..4),
            long in proptest::collection::vec(any::<bool>(), 1..4),
            rows in proptest::collection::vec(1usize..40, 1..4),
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
    fn a_long_key_moves_the_groups_with_their_ids() {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Utf8, true)]));
        let mut table = ShortStrings::new(schema).unwrap();
        let mut ids = Vec::new();
        let short: ArrayRef = Arc::new(StringArray::from(vec!["A", "N", "A"]));
        table.intern(&[short], &mut ids).unwrap();
        assert!(matches!(table.mode, Mode::Packed(_)));
        let long: ArrayRef = Arc::new(StringArray::from(vec!["N", "a longer key", "A"]));
        table.intern(&[long], &mut ids).unwrap();
        assert!(matches!(table.mode, Mode::Bytes(_)));
        assert_eq!(ids, [1, 2, 0]);
        let keys = table.emit(EmitTo::All).unwrap().remove(0);
        assert_eq!(
            keys.as_ref(),
            &StringArray::from(vec!["A", "N", "a longer key"]) as &dyn Array
        );
    }
}
