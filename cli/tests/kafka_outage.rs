//! A broker taken down and up mid-run, alone in its test binary: bringing
//! librdkafka's mock broker back re-binds its port, which another mock
//! cluster in the same process could have taken meanwhile (seen in CI:
//! the mock aborts the process).

use std::time::Duration;

use weir_sql::SqlSession;
use weir_tests::KafkaBroker;

mod common;

use common::kafka::{orders, table};

#[test]
fn a_broker_outage_mid_run_loses_nothing() {
    const ROWS: i64 = 6000;
    let kafka = KafkaBroker::start(1);
    kafka.create_topic("src", 2);
    kafka.create_topic("dst", 1);
    let tmp = tempfile::tempdir().unwrap();
    let b = kafka.bootstrap();
    let script = format!(
        "SET 'execution.checkpointing.interval' = '200 ms';
SET 'execution.checkpointing.dir' = '{chk}';
{src}
CREATE TABLE dst (id BIGINT, customer STRING, amount BIGINT) WITH (
  'connector' = 'kafka', 'topic' = 'dst', 'properties.bootstrap.servers' = '{b}',
  'format' = 'json', 'sink.delivery-guarantee' = 'exactly-once',
  'sink.transactional-id-prefix' = 'outage');
INSERT INTO dst SELECT * FROM orders;",
        chk = tmp.path().join("chk").display(),
        src = table(
            &b,
            "src",
            &format!(
                ", 'scan.bounded.mode' = 'specific-offsets', \
                 'scan.bounded.specific-offsets' = 'partition:0,offset:{half};partition:1,offset:{half}'",
                half = ROWS / 2
            )
        ),
    );
    let mut s = SqlSession::new();
    s.execute_script(&script).unwrap();
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(2);
    s.build_with(&env, &|| unreachable!("no query")).unwrap();
    let job = std::thread::spawn(move || env.execute("outage").map(|_| ()));
    kafka.produce("src", &orders(ROWS / 2, 2));
    std::thread::sleep(Duration::from_millis(500));
    kafka.cluster.broker_down(1).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    kafka.cluster.broker_up(1).unwrap();
    let rest: Vec<_> = orders(ROWS, 2)
        .into_iter()
        .skip((ROWS / 2) as usize)
        .collect();
    kafka.produce("src", &rest);
    job.join().unwrap().unwrap();
    let mut ids: Vec<i64> = kafka
        .consume_all("dst", true)
        .iter()
        .map(|(_, _, _, p)| {
            serde_json::from_slice::<serde_json::Value>(p).unwrap()["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..ROWS).collect::<Vec<i64>>());
}
