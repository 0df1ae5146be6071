//! The seed job lowers to exactly two vertices joined by one hash edge.

use orders_per_minute::{build_job, generated_orders};
use weir_core::api::StreamExecutionEnvironment;
use weir_core::config::WeirConfig;
use weir_core::graph::Partitioner;

#[test]
fn orders_per_minute_lowers_to_two_chained_vertices() {
    let env = StreamExecutionEnvironment::new(WeirConfig::default());
    env.set_parallelism(4);
    build_job(
        &env,
        generated_orders(1000),
        weir_operators::connectors::blackhole(),
    )
    .unwrap();

    let stream = env.stream_graph("orders").unwrap();
    let names: Vec<&str> = stream.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names.len(), 4, "{names:?}");
    assert_eq!(names[0], "Source: orders");
    assert_eq!(names[1], "ParseOrder");
    assert!(names[2].starts_with("Window(TumblingEventTimeWindows(60000)"));
    assert_eq!(names[3], "Sink: orders_per_minute");
    // key_by is an edge, not a node.
    assert_eq!(stream.edges.len(), 3);

    let job = env.job_graph("orders").unwrap();
    assert_eq!(job.vertices.len(), 2, "{}", job.explain());
    let a = &job.vertices[0];
    let b = &job.vertices[1];
    let node_names = |v: &weir_core::graph::JobVertex| -> Vec<String> {
        v.nodes.iter().map(|&n| job.nodes[n].name.clone()).collect()
    };
    assert_eq!(node_names(a), vec!["Source: orders", "ParseOrder"]);
    let b_names = node_names(b);
    assert_eq!(b_names.len(), 2);
    assert!(b_names[0].starts_with("Window("));
    assert_eq!(b_names[1], "Sink: orders_per_minute");
    assert_eq!(job.edges.len(), 1);
    assert_eq!((job.edges[0].source, job.edges[0].target), (0, 1));
    assert!(
        matches!(&job.edges[0].partitioner, Partitioner::Hash { keys, .. } if keys == &["user_id"])
    );

    let exec = job.execution_graph();
    assert_eq!(exec.subtasks.len(), 8);
    assert_eq!(exec.channels.len(), 16, "hash edge is all-to-all");

    let explain = env.explain("orders").unwrap();
    assert!(explain.contains("== Stream graph =="));
    assert!(
        explain.contains("A Source: orders -> ParseOrder [p=4]"),
        "{explain}"
    );
    assert!(explain.contains("<- A HASH(user_id)"), "{explain}");
    assert!(
        explain.contains("A -> B HASH(user_id): 16 channels (4x4)"),
        "{explain}"
    );
}

#[test]
fn chaining_controls_split_vertices() {
    let env = StreamExecutionEnvironment::new(WeirConfig::default());
    env.disable_operator_chaining();
    build_job(
        &env,
        generated_orders(10),
        weir_operators::connectors::blackhole(),
    )
    .unwrap();
    assert_eq!(env.job_graph("j").unwrap().vertices.len(), 4);

    // Different parallelism breaks the chain and turns forward into rebalance.
    let env = StreamExecutionEnvironment::new(WeirConfig::default());
    let s = env
        .from_source(
            generated_orders(10),
            weir_core::time::WatermarkStrategy::no_watermarks(),
            "orders",
        )
        .unwrap()
        .filter(datafusion_expr::col("user_id").gt(datafusion_expr::lit(3)))
        .unwrap()
        .set_parallelism(3)
        .unwrap();
    s.sink_to(weir_operators::connectors::blackhole(), "out")
        .unwrap();
    let job = env.job_graph("j").unwrap();
    assert_eq!(job.vertices.len(), 3, "{}", job.explain());
    assert!(
        job.edges
            .iter()
            .all(|e| e.partitioner == Partitioner::Rebalance)
    );
}

#[test]
fn start_new_chain_and_disable_chaining_split_the_chain() {
    use datafusion_expr::{col, lit};
    use weir_core::time::WatermarkStrategy;
    let env = StreamExecutionEnvironment::new(WeirConfig::default());
    let none = WatermarkStrategy::no_watermarks;
    env.from_source(generated_orders(10), none(), "orders")
        .unwrap()
        .filter(col("user_id").gt(lit(3)))
        .unwrap()
        .name("f1")
        .unwrap()
        .filter(col("user_id").gt(lit(4)))
        .unwrap()
        .name("f2")
        .unwrap()
        .start_new_chain()
        .unwrap()
        .filter(col("user_id").gt(lit(5)))
        .unwrap()
        .name("f3")
        .unwrap()
        .sink_to(weir_operators::connectors::blackhole(), "out")
        .unwrap()
        .disable_chaining()
        .unwrap();
    let job = env.job_graph("j").unwrap();
    let names: Vec<&str> = job.vertices.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["Source: orders -> f1", "f2 -> f3", "Sink: out"]);
    assert!(
        job.edges
            .iter()
            .all(|e| e.partitioner == Partitioner::Forward)
    );
}

#[test]
fn batch_mode_rejects_unbounded_sources() {
    use weir_core::config::RuntimeMode;
    use weir_core::spec::SourceSpec;
    use weir_operators::connectors::{ColumnGen, GeneratorSpec};
    let env = StreamExecutionEnvironment::new(WeirConfig::default());
    env.set_runtime_mode(RuntimeMode::Batch);
    let unbounded = SourceSpec::from(GeneratorSpec::new(None).column("n", ColumnGen::Sequence));
    env.from_source(
        unbounded,
        weir_core::time::WatermarkStrategy::no_watermarks(),
        "g",
    )
    .unwrap()
    .sink_to(weir_operators::connectors::blackhole(), "out")
    .unwrap();
    let err = env.job_graph("j").unwrap_err().to_string();
    assert!(
        err.contains("batch mode needs every source to be bounded"),
        "{err}"
    );
}
