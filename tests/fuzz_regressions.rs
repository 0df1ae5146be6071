//! Inputs the fuzzers (`fuzz/`, `scripts/fuzz.sh`) once crashed Weir with,
//! kept under `fuzz/regressions/TARGET/`: each must now be refused as bad
//! input, never panic or abort.

use std::path::{Path, PathBuf};

use weir_core::spec::SinkSpec;
use weir_core::time::WatermarkStrategy;

fn inputs(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/regressions")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no regression inputs in {}",
        dir.display()
    );
    files
}

#[test]
fn damaged_parquet_files_are_bad_input() {
    for file in inputs("parquet_reader") {
        let spec = match weir_operators::sources::parquet_source(&[&file], None) {
            Err(e) => {
                assert!(
                    !e.to_string().contains("panicked"),
                    "{}: {e}",
                    file.display()
                );
                continue;
            }
            Ok(spec) => spec,
        };
        let env = weir_worker::local_environment().unwrap();
        let collected = weir_core::spec::CollectHandle::new();
        env.from_source(spec, WatermarkStrategy::no_watermarks(), "damaged")
            .unwrap()
            .sink_to(SinkSpec::from(collected.clone()), "rows")
            .unwrap();
        if let Err(e) = env.execute("damaged parquet") {
            let e = e.to_string();
            assert!(
                !e.contains("panicked") && e.contains(&file.display().to_string()),
                "{}: {e}",
                file.display()
            );
        }
    }
}

#[test]
fn json_lines_of_many_documents_decode_and_end() {
    let schema = std::sync::Arc::new(arrow::datatypes::Schema::new(vec![
        arrow::datatypes::Field::new("id", arrow::datatypes::DataType::Int64, true),
        arrow::datatypes::Field::new("name", arrow::datatypes::DataType::Utf8, true),
    ]));
    for file in inputs("json_reader") {
        let bytes = std::fs::read(&file).unwrap();
        let schema = std::sync::Arc::clone(&schema);
        // A decoder that stopped taking bytes once hung here: run it on a
        // thread and give it ten seconds.
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let formats = weir_operators::formats::formats();
            let mut d = formats
                .get("json")
                .and_then(|f| f.decoder(&schema, &Default::default(), 16))
                .unwrap();
            let outcome = d.decode(&bytes).and_then(|_| d.finish()).map(|_| ());
            let _ = done.send(outcome.map_err(|e| e.to_string()));
        });
        let outcome = finished
            .recv_timeout(std::time::Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("{}: the decoder did not end", file.display()));
        if let Err(e) = outcome {
            assert!(!e.contains("panicked"), "{}: {e}", file.display());
        }
    }
}
