use super::*;
use arrow::array::{Int64Array, TimestampMillisecondArray};
use arrow::datatypes::TimeUnit;
use weir_core::config::WeirConfig;
use weir_core::spec::AggregateSpec;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]))
}

fn rows(r: &[(i64, i64, i64)]) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(r.iter().map(|x| x.0))),
            Arc::new(Int64Array::from_iter_values(r.iter().map(|x| x.1))),
            Arc::new(TimestampMillisecondArray::from_iter_values(
                r.iter().map(|x| x.2),
            )),
        ],
    )
    .unwrap()
}

fn spec(frame: OverFrame) -> OverAggregateSpec {
    OverAggregateSpec {
        keys: vec!["k".into()],
        rowtime: Some("ts".into()),
        frame,
        aggregates: vec![
            AggregateSpec::sum("v").alias("s"),
            AggregateSpec::count_star().alias("n"),
            AggregateSpec::max("v").alias("m"),
        ],
        input_schema: schema(),
    }
}

fn operator(spec: &OverAggregateSpec) -> OverAggregateOperator {
    let ctx = OperatorContext::single("over", WeirConfig::default());
    OverAggregateOperator::try_new("over".into(), spec, spec.output_schema().unwrap(), &ctx)
        .unwrap()
}

/// Output rows as `k,v,ts:sum,count,max`, in emission order.
fn lines(out: &[RecordBatch]) -> Vec<String> {
    let mut v = vec![];
    for b in out {
        for r in 0..b.num_rows() {
            let c = |i: usize| arrow::util::display::array_value_to_string(b.column(i), r).unwrap();
            v.push(format!("{},{}:{},{},{}", c(0), c(1), c(3), c(4), c(5)));
        }
    }
    v
}

fn feed(op: &mut OverAggregateOperator, batches: Vec<RecordBatch>, watermark: i64) -> Vec<String> {
    let mut out: Vec<RecordBatch> = vec![];
    for b in batches {
        op.process_batch(b, &mut out).unwrap();
    }
    op.on_watermark(Watermark(watermark), &mut out).unwrap();
    lines(&out)
}

#[test]
fn rows_frames_count_rows_in_time_order_whatever_the_arrival_order() {
    let mut op = operator(&spec(OverFrame::Rows(Some(1))));
    // Out of order; key 2 interleaved.
    let out = feed(
        &mut op,
        vec![
            rows(&[(1, 30, 300), (1, 10, 100), (2, 5, 150)]),
            rows(&[(1, 20, 200)]),
        ],
        250,
    );
    assert_eq!(out, ["1,10:10,1,10", "1,20:30,2,20", "2,5:5,1,5"]);
    // The frame carries over to the next watermark: 20 and 30.
    assert_eq!(feed(&mut op, vec![], 400), ["1,30:50,2,30"]);
}

#[test]
fn range_frames_take_peers_together_and_drop_rows_older_than_the_interval() {
    let mut op = operator(&spec(OverFrame::Range(Some(100))));
    let out = feed(
        &mut op,
        vec![rows(&[
            (1, 1, 100),
            (1, 2, 150),
            (1, 3, 200),
            (1, 4, 200),
            (1, 5, 301),
        ])],
        1000,
    );
    // At 200 the frame is [100, 200]: 1+2+3+4, both peers get it; at 301
    // it is [201, 301].
    assert_eq!(
        out,
        [
            "1,1:1,1,1",
            "1,2:3,2,2",
            "1,3:10,4,4",
            "1,4:10,4,4",
            "1,5:5,1,5"
        ]
    );
}

#[test]
fn unbounded_frames_accumulate_and_late_rows_are_dropped() {
    let mut op = operator(&spec(OverFrame::Rows(None)));
    assert_eq!(
        feed(&mut op, vec![rows(&[(1, 1, 100), (1, 2, 200)])], 200),
        ["1,1:1,1,1", "1,2:3,2,2"]
    );
    // 150 is behind the watermark (200): dropped.
    assert_eq!(
        feed(&mut op, vec![rows(&[(1, 7, 150), (1, 3, 300)])], 300),
        ["1,3:6,3,3"]
    );
    assert_eq!(op.late_dropped, 1);
}

#[test]
fn frames_and_waiting_rows_survive_a_snapshot() {
    let cases = [
        (OverFrame::Rows(Some(2)), ["1,4:7,3,4", "1,9:15,3,9"]),
        (OverFrame::Range(None), ["1,4:7,3,4", "1,9:16,4,9"]),
    ];
    for (frame, want) in cases {
        let s = spec(frame);
        let mut op = operator(&s);
        feed(
            &mut op,
            vec![rows(&[(1, 1, 100), (1, 2, 200), (1, 9, 900)])],
            500,
        );
        let tables = op.snapshot_state(1).unwrap();
        let mut restored = operator(&s);
        restored.restore_state(tables).unwrap();
        assert_eq!(
            feed(&mut restored, vec![rows(&[(1, 4, 600)])], 1000),
            want,
            "{frame}"
        );
    }
}

#[test]
fn in_processing_time_rows_are_worked_on_arrival_in_arrival_order() {
    let mut s = spec(OverFrame::Rows(Some(1)));
    s.rowtime = None;
    let mut op = operator(&s);
    let mut out: Vec<RecordBatch> = vec![];
    // Event times play no part: arrival order decides the frame.
    op.process_batch(rows(&[(1, 30, 300), (1, 10, 100), (2, 5, 0)]), &mut out)
        .unwrap();
    assert_eq!(lines(&out), ["1,30:30,1,30", "1,10:40,2,30", "2,5:5,1,5"]);
}
