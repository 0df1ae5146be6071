//! Helpers shared by Weir's end-to-end tests.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use futures::TryStreamExt;

/// Every row of `batches` rendered as text, sorted: a canonical form for
/// comparing results regardless of batch boundaries and subtask order.
pub fn sorted_rows(batches: &[RecordBatch]) -> Vec<String> {
    let options = FormatOptions::default().with_null("NULL");
    let mut rows = Vec::new();
    for b in batches {
        let formatters: Vec<_> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
            .collect();
        for r in 0..b.num_rows() {
            let cells: Vec<String> = formatters.iter().map(|f| f.value(r).to_string()).collect();
            rows.push(cells.join("|"));
        }
    }
    rows.sort();
    rows
}

/// Schema of the (key, value, ts) test events.
pub fn event_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::Int64, false),
        Field::new("value", DataType::Int64, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]))
}

/// A batch of (key, value, ts) events.
pub fn event_batch(rows: &[(i64, i64, i64)]) -> RecordBatch {
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
        Arc::new(TimestampMillisecondArray::from_iter_values(
            rows.iter().map(|r| r.2),
        )),
    ];
    RecordBatch::try_new(event_schema(), cols).unwrap()
}

/// The `FlightInfo` that `list_flights` gives for the sink `name`.
pub async fn listed(
    client: &mut arrow_flight::FlightClient,
    name: &str,
) -> arrow_flight::FlightInfo {
    let infos: Vec<arrow_flight::FlightInfo> = client
        .list_flights("")
        .await
        .unwrap()
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    infos
        .into_iter()
        .find(|i| {
            i.flight_descriptor
                .as_ref()
                .is_some_and(|d| d.path == [name])
        })
        .unwrap_or_else(|| panic!("the sink {name} is listed"))
}

/// Every batch `do_get` streams for `ticket`.
pub async fn read(
    client: &mut arrow_flight::FlightClient,
    ticket: arrow_flight::Ticket,
) -> Vec<RecordBatch> {
    client
        .do_get(ticket)
        .await
        .unwrap()
        .try_collect::<Vec<_>>()
        .await
        .unwrap()
}
