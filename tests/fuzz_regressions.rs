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
