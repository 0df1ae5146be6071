//! A table function written in Rust, registered with the SQL session and
//! called as Flink calls one: `CROSS JOIN LATERAL TABLE(f(x)) AS T(a, b)`
//! and `LEFT JOIN LATERAL TABLE(f(x)) AS T(a, b) ON TRUE`.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field};
use arrow::util::display::array_value_to_string;
use weir_core::spec::{CollectHandle, SinkSpec};
use weir_core::table_function::{TableFunction, TableRows};
use weir_core::{Result, WeirError};
use weir_sql::SqlSession;

/// `split(s, sep)`: one row per part of `s` — the part and its length
/// (Flink's documentation example of a table function).
#[derive(Debug)]
struct Split;

impl TableFunction for Split {
    fn name(&self) -> &str {
        "split"
    }

    fn fields(&self) -> Vec<Field> {
        vec![
            Field::new("word", DataType::Utf8, false),
            Field::new("length", DataType::Int64, false),
        ]
    }

    fn fields_for(&self, args: &[DataType]) -> Result<Vec<Field>> {
        if args != [DataType::Utf8, DataType::Utf8] {
            return Err(WeirError::plan(format!(
                "split(STRING, STRING) cannot take {args:?}"
            )));
        }
        Ok(self.fields())
    }

    fn eval(&self, args: &[ArrayRef]) -> Result<TableRows> {
        let (s, sep) = (args[0].as_string::<i32>(), args[1].as_string::<i32>());
        let mut rows = vec![];
        let mut words = vec![];
        for i in 0..s.len() {
            if s.is_null(i) || sep.is_null(i) {
                continue;
            }
            for w in s.value(i).split(sep.value(i)).filter(|w| !w.is_empty()) {
                rows.push(i as u32);
                words.push(w.to_string());
            }
        }
        let lengths: Int64Array = words.iter().map(|w| w.len() as i64).collect();
        Ok(TableRows {
            rows,
            columns: vec![
                Arc::new(StringArray::from(words)) as ArrayRef,
                Arc::new(lengths),
            ],
        })
    }
}

fn run(query: &str) -> Vec<String> {
    let mut s = SqlSession::new();
    s.functions_mut().register_table(Arc::new(Split));
    s.execute_script(&format!(
        "CREATE VIEW lines AS SELECT * FROM (VALUES (1, 'hello big world'), (2, ''), \
         (3, CAST(NULL AS STRING)), (4, 'one')) AS t (id, line);\n{query}"
    ))
    .map_err(|e| e.to_string())
    .unwrap_or_else(|e| panic!("{e}"));
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(2);
    let rows = CollectHandle::new();
    let sink = rows.clone();
    s.build_with(&env, &move || SinkSpec::from(sink.clone()))
        .unwrap();
    env.execute("lateral").unwrap();
    let mut out: Vec<String> = rows
        .batches()
        .iter()
        .flat_map(|b: &RecordBatch| {
            (0..b.num_rows())
                .map(|r| {
                    (0..b.num_columns())
                        .map(|c| array_value_to_string(b.column(c), r).unwrap())
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .collect::<Vec<_>>()
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_rust_table_function_joins_each_row_with_the_rows_it_makes() {
    assert_eq!(
        run(
            "SELECT id, word, length FROM lines CROSS JOIN LATERAL TABLE(split(line, ' ')) AS T(word, length);"
        ),
        ["1,big,3", "1,hello,5", "1,world,5", "4,one,3"]
    );
    // Conditions on its columns filter the joined rows.
    assert_eq!(
        run(
            "SELECT id, word FROM lines, LATERAL TABLE(split(line, ' ')) AS T(word, length) WHERE length > 3;"
        ),
        ["1,hello", "1,world"]
    );
}

#[test]
fn a_left_lateral_join_keeps_rows_it_makes_nothing_of() {
    assert_eq!(
        run(
            "SELECT id, word FROM lines LEFT JOIN LATERAL TABLE(split(line, ' ')) AS T(word, length) ON TRUE;"
        ),
        ["1,big", "1,hello", "1,world", "2,", "3,", "4,one"]
    );
}

#[test]
fn bad_calls_are_refused_with_the_function_named() {
    let mut s = SqlSession::new();
    s.functions_mut().register_table(Arc::new(Split));
    let err = |q: &str| {
        let mut s = SqlSession::new();
        s.functions_mut().register_table(Arc::new(Split));
        s.execute_script(&format!(
            "CREATE VIEW lines AS SELECT * FROM (VALUES (1, 'a b')) AS t (id, line);\n{q}"
        ))
        .and_then(|_| {
            let env = weir_worker::local_environment().unwrap();
            let rows = CollectHandle::new();
            s.build_with(&env, &move || SinkSpec::from(rows.clone()))
        })
        .unwrap_err()
        .to_string()
    };
    let e = err("SELECT * FROM lines, LATERAL TABLE(split(id, ' ')) AS T(w, n);");
    assert!(e.contains("split(STRING, STRING) cannot take"), "{e}");
    let e = err("SELECT * FROM lines, LATERAL TABLE(explode(line)) AS T(w);");
    assert!(
        e.contains("unknown table function 'explode'") && e.contains("split"),
        "{e}"
    );
    let e =
        err("SELECT * FROM lines LEFT JOIN LATERAL TABLE(split(line, ' ')) AS T(w, n) ON w = 'a';");
    assert!(e.contains("ON TRUE"), "{e}");
    drop(s);
}
