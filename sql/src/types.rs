//! Flink SQL types as Arrow types.

use std::sync::Arc;

use arrow::datatypes::{DataType as Arrow, Field, Fields, Schema, SchemaRef, TimeUnit};
use sqlparser::ast::{ArrayElemTypeDef, DataType, ExactNumberInfo, TimezoneInfo};

use weir_core::connector::MetadataColumn;

use crate::{Column, CreateTable, SqlError};

/// The Arrow type of a column of SQL type `t` (Flink's names; `TIMESTAMP`
/// and `TIMESTAMP_LTZ` have millisecond precision, as event time does in
/// Weir).
pub fn arrow_type(t: &DataType) -> Result<Arrow, String> {
    use DataType as T;
    Ok(match t {
        T::Boolean | T::Bool => Arrow::Boolean,
        T::TinyInt(_) => Arrow::Int8,
        T::SmallInt(_) => Arrow::Int16,
        T::Int(_) | T::Integer(_) => Arrow::Int32,
        T::BigInt(_) => Arrow::Int64,
        T::Float(_) | T::Real => Arrow::Float32,
        T::Double(_) | T::DoublePrecision => Arrow::Float64,
        T::Decimal(info) | T::Numeric(info) | T::Dec(info) => {
            let (p, s) = match *info {
                ExactNumberInfo::None => (10, 0),
                ExactNumberInfo::Precision(p) => (p, 0),
                ExactNumberInfo::PrecisionAndScale(p, s) => (p, s),
            };
            if !(1..=38).contains(&p) || s < 0 || s as u64 > p {
                return Err(format!(
                    "DECIMAL({p}, {s}): precision 1..=38, scale 0..=precision"
                ));
            }
            Arrow::Decimal128(p as u8, s as i8)
        }
        T::Char(_)
        | T::Character(_)
        | T::Varchar(_)
        | T::CharacterVarying(_)
        | T::CharVarying(_)
        | T::String(_)
        | T::Text => Arrow::Utf8,
        T::Binary(_) | T::Varbinary(_) | T::Bytes(_) => Arrow::Binary,
        T::Date => Arrow::Date32,
        T::Timestamp(_, TimezoneInfo::None | TimezoneInfo::WithoutTimeZone) => {
            Arrow::Timestamp(TimeUnit::Millisecond, None)
        }
        T::Timestamp(_, _) => Arrow::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
        T::Custom(name, _) if name.to_string().eq_ignore_ascii_case("TIMESTAMP_LTZ") => {
            Arrow::Timestamp(TimeUnit::Millisecond, Some("UTC".into()))
        }
        T::Array(ArrayElemTypeDef::AngleBracket(e) | ArrayElemTypeDef::SquareBracket(e, _)) => {
            Arrow::List(Arc::new(Field::new("element", arrow_type(e)?, true)))
        }
        T::Map(k, v) => Arrow::Map(
            Arc::new(Field::new(
                "entries",
                Arrow::Struct(Fields::from(vec![
                    Field::new("key", arrow_type(k)?, false),
                    Field::new("value", arrow_type(v)?, true),
                ])),
                false,
            )),
            false,
        ),
        T::Struct(fields, _) => Arrow::Struct(
            fields
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    let name = f
                        .field_name
                        .as_ref()
                        .map_or_else(|| format!("f{i}"), |n| n.value.clone());
                    Ok(Field::new(name, arrow_type(&f.field_type)?, true))
                })
                .collect::<Result<Fields, String>>()?,
        ),
        other => return Err(format!("type {other} is not supported")),
    })
}

/// The Arrow type of a column, an error naming it and where it is.
fn column_type(
    table: &CreateTable,
    name: &sqlparser::ast::Ident,
    data_type: &DataType,
) -> Result<Arrow, SqlError> {
    arrow_type(data_type).map_err(|m| SqlError {
        line: Some(name.span.start.line),
        column: Some(name.span.start.column),
        message: format!("column '{}' of table '{}': {m}", name.value, table.name),
    })
}

/// The Arrow schema of a table's physical columns (computed columns are
/// expressions over them, typed when the table is planned).
pub fn physical_schema(table: &CreateTable) -> Result<SchemaRef, SqlError> {
    let mut fields = Vec::new();
    for c in &table.columns {
        if let Column::Physical {
            name,
            data_type,
            not_null,
        } = c
        {
            let t = column_type(table, name, data_type)?;
            fields.push(Field::new(&name.value, t, !not_null));
        }
    }
    Ok(Arc::new(Schema::new(fields)))
}

/// A table's `METADATA` columns, in declared order.
pub fn metadata_columns(table: &CreateTable) -> Result<Vec<MetadataColumn>, SqlError> {
    let mut out = Vec::new();
    for c in &table.columns {
        if let Column::Metadata {
            name,
            data_type,
            key,
            is_virtual,
        } = c
        {
            let t = column_type(table, name, data_type)?;
            out.push(MetadataColumn {
                name: name.value.clone(),
                key: key.clone().unwrap_or_else(|| name.value.clone()),
                data_type: t,
                is_virtual: *is_virtual,
            });
        }
    }
    Ok(out)
}

/// What a table's source produces: its physical columns, then its
/// metadata columns.
pub(crate) fn scan_schema(physical: &Schema, metadata: &[MetadataColumn]) -> SchemaRef {
    let mut fields: Vec<Field> = physical
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.extend(
        metadata
            .iter()
            .map(|m| Field::new(&m.name, m.data_type.clone(), true)),
    );
    Arc::new(Schema::new(fields))
}

/// The Flink SQL name of an Arrow type, for messages.
pub fn sql_type_name(t: &Arrow) -> String {
    use arrow::datatypes::TimeUnit;
    match t {
        Arrow::Null => "NULL".into(),
        Arrow::Boolean => "BOOLEAN".into(),
        Arrow::Int8 => "TINYINT".into(),
        Arrow::Int16 => "SMALLINT".into(),
        Arrow::Int32 => "INT".into(),
        Arrow::Int64 => "BIGINT".into(),
        Arrow::UInt8 | Arrow::UInt16 | Arrow::UInt32 | Arrow::UInt64 => format!("{t} (unsigned)"),
        Arrow::Float32 => "FLOAT".into(),
        Arrow::Float64 => "DOUBLE".into(),
        Arrow::Decimal128(p, s) | Arrow::Decimal256(p, s) => format!("DECIMAL({p}, {s})"),
        Arrow::Utf8 | Arrow::LargeUtf8 | Arrow::Utf8View => "STRING".into(),
        Arrow::Binary | Arrow::LargeBinary | Arrow::BinaryView => "BYTES".into(),
        Arrow::Date32 | Arrow::Date64 => "DATE".into(),
        Arrow::Timestamp(unit, tz) => {
            let p = match unit {
                TimeUnit::Second => 0,
                TimeUnit::Millisecond => 3,
                TimeUnit::Microsecond => 6,
                TimeUnit::Nanosecond => 9,
            };
            if tz.is_some() {
                format!("TIMESTAMP_LTZ({p})")
            } else {
                format!("TIMESTAMP({p})")
            }
        }
        Arrow::Struct(fields) => format!(
            "ROW<{}>",
            fields
                .iter()
                .map(|f| format!("{} {}", f.name(), sql_type_name(f.data_type())))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Arrow::List(f) | Arrow::LargeList(f) => format!("ARRAY<{}>", sql_type_name(f.data_type())),
        Arrow::Map(entries, _) => match entries.data_type() {
            Arrow::Struct(kv) if kv.len() == 2 => format!(
                "MAP<{}, {}>",
                sql_type_name(kv[0].data_type()),
                sql_type_name(kv[1].data_type())
            ),
            other => other.to_string(),
        },
        Arrow::Interval(_) | Arrow::Duration(_) => "INTERVAL".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{WeirStatement, parse};

    fn table(sql: &str) -> CreateTable {
        match parse(sql).unwrap().remove(0) {
            WeirStatement::CreateTable(t) => *t,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn flink_types_map_to_arrow() {
        let t = table(
            "CREATE TABLE t (a INT NOT NULL, b BIGINT, c STRING, d DOUBLE, e DECIMAL(12, 2),
             f TIMESTAMP(3), g TIMESTAMP_LTZ(3), h BOOLEAN, i ROW<x INT, y VARCHAR>,
             j ARRAY<BIGINT>, k AS a + 1) WITH ('connector' = 'datagen')",
        );
        let s = physical_schema(&t).unwrap();
        assert_eq!(s.fields().len(), 10, "computed columns are not physical");
        assert_eq!(s.field(0).data_type(), &Arrow::Int32);
        assert!(!s.field(0).is_nullable());
        assert_eq!(s.field(4).data_type(), &Arrow::Decimal128(12, 2));
        assert_eq!(
            s.field(5).data_type(),
            &Arrow::Timestamp(TimeUnit::Millisecond, None)
        );
        assert_eq!(
            s.field(6).data_type(),
            &Arrow::Timestamp(TimeUnit::Millisecond, Some("UTC".into()))
        );
        assert!(matches!(s.field(8).data_type(), Arrow::Struct(f) if f.len() == 2));
        assert!(matches!(s.field(9).data_type(), Arrow::List(_)));
    }

    #[test]
    fn nested_types_close_with_double_angle_brackets() {
        let t = table(
            "CREATE TABLE t (a ARRAY<ROW<x INT, y ARRAY<STRING>>>, b MAP<STRING, ARRAY<INT>>, \
             c ROW<m MAP<INT, ROW<z BIGINT>>>) WITH ('connector' = 'datagen')",
        );
        let s = physical_schema(&t).unwrap();
        let Arrow::List(a) = s.field(0).data_type() else {
            panic!("{:?}", s.field(0))
        };
        assert!(matches!(a.data_type(), Arrow::Struct(f) if f.len() == 2));
        assert!(matches!(s.field(1).data_type(), Arrow::Map(_, _)));
        assert!(matches!(s.field(2).data_type(), Arrow::Struct(f) if f.len() == 1));
        let e = crate::parse("CREATE TABLE t (a ARRAY<INT>>) WITH ('connector' = 'datagen')");
        assert!(e.is_err());
    }

    #[test]
    fn an_unsupported_type_names_the_column_and_where_it_is() {
        let t = table("CREATE TABLE t (\n  a INT,\n  b GEOGRAPHY\n)");
        let e = physical_schema(&t).unwrap_err();
        assert_eq!((e.line, e.column), (Some(3), Some(3)), "{e}");
        assert!(e.message.contains("column 'b' of table 't'"), "{e}");
    }
}
