//! A Rust Flight client lists and reads a job's Flight sink.

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::Int64Type;
use arrow_flight::{FlightClient, Ticket};
use weir_core::spec::SourceSpec;
use weir_core::time::WatermarkStrategy;
use weir_operators::connectors::{ColumnGen, GeneratorSpec};
use weir_tests::{listed, read};

/// A job writing `n = 0..rows` into the Flight sink `sink`.
fn numbers_into_sink(env: &weir_core::StreamExecutionEnvironment, rows: u64, sink: &str) {
    let spec = GeneratorSpec::new(Some(rows)).column("n", ColumnGen::Sequence);
    env.from_source(
        SourceSpec::from(spec),
        WatermarkStrategy::no_watermarks(),
        "numbers",
    )
    .unwrap()
    .sink_to(weir_flight::flight_sink(sink), "results")
    .unwrap();
}

/// The error starting a small Flight-sink job configured by `configure`.
fn start_error(sink: &str, configure: impl FnOnce(&mut weir_core::WeirConfig)) -> String {
    let env = weir_worker::local_environment().unwrap();
    env.configure(configure);
    numbers_into_sink(&env, 10, sink);
    env.execute_async(sink)
        .err()
        .expect("the job must not start")
        .to_string()
}

/// A plaintext Flight client of `addr`.
async fn connect(addr: std::net::SocketAddr) -> FlightClient {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    FlightClient::new(channel)
}

#[test]
fn a_flight_client_lists_and_reads_a_sink() {
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(2);
    let rows = 50_000u64;
    numbers_into_sink(&env, rows, "flight-sink-test");
    let job = env.execute_async("flight-sink").unwrap();
    let addr = job
        .sink_endpoint()
        .expect("a job with a Flight sink serves it");
    assert!(
        addr.ip().is_loopback(),
        "listeners bind loopback by default"
    );

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (batches, unknown, tail, bad_offset) = runtime.block_on(async move {
        let mut client = connect(addr).await;
        let info = listed(&mut client, "flight-sink-test").await;
        let schema = client
            .get_schema(arrow_flight::FlightDescriptor::new_path(vec![
                "flight-sink-test".into(),
            ]))
            .await
            .unwrap();
        assert_eq!(schema.field(0).name(), "n");
        let ticket = info.endpoint[0]
            .ticket
            .clone()
            .expect("an endpoint with a ticket");
        assert!(
            !String::from_utf8_lossy(&ticket.ticket).contains('/'),
            "tickets are opaque ids"
        );
        let id = String::from_utf8(ticket.ticket.to_vec()).unwrap();
        let batches: Vec<RecordBatch> = read(&mut client, ticket).await;
        let unknown = client
            .do_get(Ticket::new("not-a-ticket"))
            .await
            .err()
            .map(|e| e.to_string());
        // Resume from a row offset: the job has finished, so the sink's
        // order is settled and the tail equals the full read's tail.
        let tail: Vec<RecordBatch> =
            read(&mut client, Ticket::new(format!("{id}:{}", rows - 10))).await;
        let bad_offset = client
            .do_get(Ticket::new(format!("{id}:ten")))
            .await
            .err()
            .map(|e| e.to_string());
        (batches, unknown, tail, bad_offset)
    });
    let column = |batches: &[RecordBatch]| -> Vec<i64> {
        batches
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect()
    };
    let all = column(&batches);
    assert_eq!(
        column(&tail),
        all[all.len() - 10..],
        "a ticket offset resumes at that row"
    );
    let bad_offset = bad_offset.expect("a malformed offset is refused");
    assert!(bad_offset.contains("not a row number"), "{bad_offset}");
    let mut values: Vec<i64> = batches
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    values.sort();
    assert_eq!(
        values,
        (0..rows as i64).collect::<Vec<_>>(),
        "every row, exactly once"
    );
    let unknown = unknown.expect("an unknown ticket is refused");
    assert!(unknown.contains("unknown ticket"), "{unknown}");
    job.wait().unwrap();
}

#[test]
fn a_sink_with_a_token_refuses_clients_without_it() {
    let env = weir_worker::local_environment().unwrap();
    env.configure(|c| c.sink_token = Some(weir_core::Secret::new("open-sesame").unwrap()));
    let rows = 1_000u64;
    numbers_into_sink(&env, rows, "flight-sink-token-test");
    let job = env.execute_async("flight-sink-token").unwrap();
    let addr = job.sink_endpoint().unwrap();

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (anonymous, wrong, read) = runtime.block_on(async move {
        let mut client = connect(addr).await;
        let anonymous = client.list_flights("").await.err().map(|e| e.to_string());
        client.add_header("authorization", "Bearer wrong").unwrap();
        let wrong = client.list_flights("").await.err().map(|e| e.to_string());
        client
            .add_header("authorization", "Bearer open-sesame")
            .unwrap();
        let info = listed(&mut client, "flight-sink-token-test").await;
        let ticket = info.endpoint[0].ticket.clone().unwrap();
        let batches: Vec<RecordBatch> = read(&mut client, ticket).await;
        let read: usize = batches.iter().map(|b| b.num_rows()).sum();
        (anonymous, wrong, read)
    });
    let anonymous = anonymous.expect("a client without a token is refused");
    assert!(
        anonymous.contains("bearer token is required"),
        "{anonymous}"
    );
    let wrong = wrong.expect("a wrong token is refused");
    assert!(wrong.contains("invalid token"), "{wrong}");
    assert_eq!(read, rows as usize);
    job.wait().unwrap();
}

#[test]
fn a_public_sink_listener_without_a_token_is_refused() {
    let err = start_error("flight-sink-public", |c| {
        c.sink_bind = "0.0.0.0:0".parse().unwrap()
    });
    assert!(err.contains("sink_token"), "{err}");
}

#[test]
fn a_sink_retains_its_newest_rows_and_refuses_dropped_offsets() {
    let env = weir_worker::local_environment().unwrap();
    env.configure(|c| {
        c.sink_retention = weir_core::SinkRetention {
            max_rows: Some(100),
            ..Default::default()
        }
    });
    let rows = 10_000u64;
    numbers_into_sink(&env, rows, "flight-sink-retention-test");
    let job = env.execute_async("flight-sink-retention").unwrap();
    let addr = job.sink_endpoint().unwrap();
    while !job.is_finished() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (late, dropped) = runtime.block_on(async move {
        let mut client = connect(addr).await;
        let info = client
            .get_flight_info(arrow_flight::FlightDescriptor::new_path(vec![
                "flight-sink-retention-test".into(),
            ]))
            .await
            .unwrap();
        assert_eq!(info.total_records, 100, "retained rows");
        let ticket = info.endpoint[0].ticket.clone().unwrap();
        let id = String::from_utf8(ticket.ticket.to_vec()).unwrap();
        let late: Vec<RecordBatch> = read(&mut client, ticket).await;
        let dropped = client
            .do_get(Ticket::new(format!("{id}:0")))
            .await
            .err()
            .map(|e| e.to_string());
        (late, dropped)
    });
    let values: Vec<i64> = late
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    assert_eq!(
        values,
        (rows as i64 - 100..rows as i64).collect::<Vec<_>>(),
        "a late client reads the newest 100 rows"
    );
    let dropped = dropped.expect("an offset before the retained rows is refused");
    assert!(dropped.contains("rows 0..9900 were dropped"), "{dropped}");
    job.wait().unwrap();
}

#[test]
fn a_sink_served_over_tls_is_read_by_a_client_trusting_its_certificate() {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert_pem = certified.cert.pem();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("sink.crt"), dir.path().join("sink.key"));
    std::fs::write(&cert, &cert_pem).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();

    let env = weir_worker::local_environment().unwrap();
    env.configure(|c| c.sink_tls = Some(weir_core::TlsFiles { cert, key }));
    let rows = 5_000u64;
    numbers_into_sink(&env, rows, "flight-sink-tls-test");
    let job = env.execute_async("flight-sink-tls").unwrap();
    let port = job.sink_endpoint().unwrap().port();

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (plain, read) = runtime.block_on(async move {
        // A plaintext client gets no answer from a TLS listener (an
        // answer it waits for in vain counts as none: the probe once hung a
        // whole test run).
        let probe = async {
            match tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
                .unwrap()
                .connect()
                .await
            {
                Ok(channel) => FlightClient::new(channel).list_flights("").await.is_ok(),
                Err(_) => false,
            }
        };
        let plain = tokio::time::timeout(std::time::Duration::from_secs(10), probe)
            .await
            .unwrap_or(false);
        let tls = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(cert_pem))
            .domain_name("localhost");
        let channel = tonic::transport::Endpoint::from_shared(format!("https://localhost:{port}"))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut client = FlightClient::new(channel);
        let info = client
            .get_flight_info(arrow_flight::FlightDescriptor::new_path(vec![
                "flight-sink-tls-test".into(),
            ]))
            .await
            .unwrap();
        let batches: Vec<RecordBatch> = tokio::time::timeout(
            std::time::Duration::from_secs(60),
            read(&mut client, info.endpoint[0].ticket.clone().unwrap()),
        )
        .await
        .expect("the TLS client read the sink's rows within a minute");
        (plain, batches.iter().map(|b| b.num_rows()).sum::<usize>())
    });
    assert!(!plain, "a plaintext client must not be served");
    assert_eq!(read, rows as usize);
    job.wait().unwrap();
}

#[test]
fn a_missing_tls_certificate_is_named() {
    let err = start_error("flight-sink-tls-missing", |c| {
        c.sink_tls = Some(weir_core::TlsFiles {
            cert: "/nonexistent/sink.crt".into(),
            key: "/nonexistent/sink.key".into(),
        })
    });
    assert!(err.contains("/nonexistent/sink.crt"), "{err}");
}

#[test]
fn a_malformed_tls_certificate_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("sink.crt"), dir.path().join("sink.key"));
    std::fs::write(&cert, "not a certificate").unwrap();
    std::fs::write(&key, "not a key").unwrap();
    let err = start_error("flight-sink-tls-malformed", |c| {
        c.sink_tls = Some(weir_core::TlsFiles { cert, key })
    });
    assert!(err.contains("TLS configuration"), "{err}");
}
