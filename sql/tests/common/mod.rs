//! What the SQL tests share: running a script's queries in-process.

use arrow::array::RecordBatch;
use arrow::util::display::array_value_to_string;
use weir_core::spec::{CollectHandle, SinkSpec};
use weir_sql::{SqlSession, StatementResult};

/// The result rows of the script's SELECTs (`|`-separated values) in the
/// order they reached the sink, and its EXPLAIN output.
pub fn run(script: &str, parallelism: usize) -> (Vec<String>, String) {
    let mut s = SqlSession::new();
    let explain = s
        .execute_script(script)
        .unwrap()
        .into_iter()
        .filter_map(|r| match r {
            StatementResult::Explain(t) => Some(t),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(parallelism);
    let rows = CollectHandle::new();
    let sink = rows.clone();
    s.build_with(&env, &move || SinkSpec::from(sink.clone()))
        .unwrap();
    env.execute("sql test").unwrap();
    (lines(&rows.batches()), explain)
}

/// The error a script's job fails with (planning or running it).
#[allow(dead_code)] // not every test binary checks failures
pub fn run_err(script: &str) -> String {
    let mut s = SqlSession::new();
    if let Err(e) = s.execute_script(script) {
        return e.to_string();
    }
    let env = weir_worker::local_environment().unwrap();
    let rows = CollectHandle::new();
    if let Err(e) = s.build_with(&env, &move || SinkSpec::from(rows.clone())) {
        return e.to_string();
    }
    match env.execute("sql test") {
        Ok(_) => panic!("the job ran"),
        Err(e) => e.to_string(),
    }
}

fn lines(batches: &[RecordBatch]) -> Vec<String> {
    let mut out = vec![];
    for b in batches {
        for r in 0..b.num_rows() {
            let values: Vec<String> = (0..b.num_columns())
                .map(|c| array_value_to_string(b.column(c), r).unwrap())
                .collect();
            out.push(values.join("|"));
        }
    }
    out
}
