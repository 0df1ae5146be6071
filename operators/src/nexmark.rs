//! The Nexmark benchmark's data model: one table of events, each a Person,
//! an Auction or a Bid, as in the `nexmark` SQL connector of nexmark-flink
//! (`event_type` 0/1/2 and three nullable ROW columns): the configuration
//! and schema of the generator in `sources::nexmark`.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};

use weir_core::{Result, WeirError};

/// How Nexmark events are generated. Every event is a pure function of its
/// index and this configuration, so subtasks split the sequence and a
/// replay after recovery yields the same events.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NexmarkConfig {
    /// Number of events; `None` is unbounded (`events.num`).
    pub events: Option<u64>,
    /// Events per second the source emits over all subtasks; `None` emits
    /// as fast as possible (`max-emit-speed`).
    pub rate: Option<u64>,
    /// Event-time rate: event `n` happens at `base_time + n * 1000 / tps` ms
    /// (`first-event.rate` / `tps`).
    pub tps: u64,
    /// Event time of the first event, ms since the epoch (`base-time`).
    pub base_time_ms: i64,
    /// Persons per `person + auction + bid` events (`person.proportion`).
    pub person_proportion: u64,
    /// Auctions per cycle (`auction.proportion`).
    pub auction_proportion: u64,
    /// Bids per cycle (`bid.proportion`).
    pub bid_proportion: u64,
    /// A hot auction is chosen with probability `1 - 1/ratio`.
    pub hot_auction_ratio: u64,
    /// A hot seller is chosen with probability `1 - 1/ratio`.
    pub hot_seller_ratio: u64,
    /// A hot bidder is chosen with probability `1 - 1/ratio`.
    pub hot_bidder_ratio: u64,
    /// Auctions open at a time.
    pub in_flight_auctions: u64,
    /// People active at a time.
    pub active_people: u64,
    /// Average encoded sizes the `extra` column pads to (bytes).
    pub avg_person_bytes: u64,
    /// See `avg_person_bytes`.
    pub avg_auction_bytes: u64,
    /// See `avg_person_bytes`.
    pub avg_bid_bytes: u64,
    /// Probability that an event's time lags its position. The Java
    /// generator declares this setting but never applies it, so its events
    /// are in order; 0 by default here too (`delayed-event.probability`).
    pub prob_delayed_event: f64,
    /// Largest lag of a delayed event, ms.
    pub occasional_delay_ms: i64,
}

impl Default for NexmarkConfig {
    fn default() -> Self {
        Self {
            events: None,
            rate: None,
            tps: 10_000,
            // 2023-11-14 22:13:20 UTC: a fixed start keeps runs comparable.
            base_time_ms: 1_700_000_000_000,
            person_proportion: 1,
            auction_proportion: 3,
            bid_proportion: 46,
            hot_auction_ratio: 2,
            hot_seller_ratio: 4,
            hot_bidder_ratio: 4,
            in_flight_auctions: 100,
            active_people: 1000,
            avg_person_bytes: 200,
            avg_auction_bytes: 500,
            avg_bid_bytes: 100,
            prob_delayed_event: 0.0,
            occasional_delay_ms: 3000,
        }
    }
}

impl NexmarkConfig {
    /// Check the values make sense.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: &str| Err(WeirError::plan(format!("nexmark: {what}")));
        if self.tps == 0 {
            return bad("the event rate (tps / first-event.rate) must be positive");
        }
        if self.rate == Some(0) {
            return bad("the emit rate must be positive");
        }
        if self.person_proportion == 0 || self.auction_proportion == 0 || self.bid_proportion == 0 {
            return bad("person, auction and bid proportions must each be positive");
        }
        if self.hot_auction_ratio == 0 || self.hot_seller_ratio == 0 || self.hot_bidder_ratio == 0 {
            return bad("hot ratios must be positive");
        }
        if [
            self.avg_person_bytes,
            self.avg_auction_bytes,
            self.avg_bid_bytes,
        ]
        .iter()
        .any(|&b| b > 60_000)
        {
            return bad("average event sizes (*.avg-size) may be at most 60000 bytes");
        }
        if !(0.0..=1.0).contains(&self.prob_delayed_event) || self.occasional_delay_ms < 0 {
            return bad("the delayed-event probability must be in [0, 1] and the delay ≥ 0");
        }
        Ok(())
    }

    /// Events per person/auction/bid cycle.
    pub fn total_proportion(&self) -> u64 {
        self.person_proportion + self.auction_proportion + self.bid_proportion
    }
}

fn ts() -> DataType {
    DataType::Timestamp(TimeUnit::Millisecond, None)
}

/// Fields of the `person` ROW.
pub fn person_fields() -> Fields {
    Fields::from(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("emailAddress", DataType::Utf8, true),
        Field::new("creditCard", DataType::Utf8, true),
        Field::new("city", DataType::Utf8, true),
        Field::new("state", DataType::Utf8, true),
        Field::new("dateTime", ts(), true),
        Field::new("extra", DataType::Utf8, true),
    ])
}

/// Fields of the `auction` ROW.
pub fn auction_fields() -> Fields {
    Fields::from(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("itemName", DataType::Utf8, true),
        Field::new("description", DataType::Utf8, true),
        Field::new("initialBid", DataType::Int64, true),
        Field::new("reserve", DataType::Int64, true),
        Field::new("dateTime", ts(), true),
        Field::new("expires", ts(), true),
        Field::new("seller", DataType::Int64, true),
        Field::new("category", DataType::Int64, true),
        Field::new("extra", DataType::Utf8, true),
    ])
}

/// Fields of the `bid` ROW.
pub fn bid_fields() -> Fields {
    Fields::from(vec![
        Field::new("auction", DataType::Int64, true),
        Field::new("bidder", DataType::Int64, true),
        Field::new("price", DataType::Int64, true),
        Field::new("channel", DataType::Utf8, true),
        Field::new("url", DataType::Utf8, true),
        Field::new("dateTime", ts(), true),
        Field::new("extra", DataType::Utf8, true),
    ])
}

/// The generator's schema: `event_type INT, person ROW<…>, auction ROW<…>,
/// bid ROW<…>`; the ROW of the other kinds is null in each row.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("event_type", DataType::Int32, false),
        Field::new("person", DataType::Struct(person_fields()), true),
        Field::new("auction", DataType::Struct(auction_fields()), true),
        Field::new("bid", DataType::Struct(bid_fields()), true),
    ]))
}
