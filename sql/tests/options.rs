//! `SET` options that reach the job's configuration.

use weir_core::api::StreamExecutionEnvironment;
use weir_core::config::{ExchangeCompression, WeirConfig};
use weir_sql::SqlSession;

const JOB: &str = "
CREATE TABLE src (a BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '10');
CREATE TABLE snk (a BIGINT) WITH ('connector' = 'blackhole');
INSERT INTO snk SELECT a FROM src;";

fn compression_of(script: &str) -> ExchangeCompression {
    let mut session = SqlSession::new();
    session.execute_script(script).unwrap();
    let env = StreamExecutionEnvironment::new(WeirConfig::default());
    session.build(&env).unwrap();
    env.job_graph("options")
        .unwrap()
        .config
        .exchange_compression
}

#[test]
fn exchange_compression_is_set_by_name_and_refuses_other_codecs() {
    assert_eq!(compression_of(JOB), ExchangeCompression::None);
    for (value, codec) in [
        ("lz4", ExchangeCompression::Lz4),
        ("ZSTD", ExchangeCompression::Zstd),
        ("none", ExchangeCompression::None),
    ] {
        let script = format!("SET 'weir.exchange.compression' = '{value}';{JOB}");
        assert_eq!(compression_of(&script), codec, "{value}");
    }
    let error = SqlSession::new()
        .execute_script("SET 'weir.exchange.compression' = 'gzip';")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("'weir.exchange.compression' = 'gzip': expected 'none', 'lz4' or 'zstd'"),
        "{error}"
    );
}
