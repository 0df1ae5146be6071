//! The Nexmark event generator, whole batches at a time.
//!
//! Event `n` (counting from 0 over all subtasks) is a person, an auction or a
//! bid by its position in a cycle of `person + auction + bid` proportions
//! (1 : 3 : 46 by default). Ids follow the benchmark's rules: new persons
//! and auctions get consecutive ids from 1000; bids mostly go to hot
//! auctions and come from hot bidders, the rest spread over the auctions
//! still open and the people still active; sellers likewise. Every random
//! choice is a hash of `(n, field)`, so the batch `[from, to)` is the same
//! whichever subtask generates it and however often.

use std::sync::{Arc, OnceLock};

use crate::nexmark::{NexmarkConfig, auction_fields, bid_fields, person_fields};
use arrow::array::{
    ArrayRef, Int32Array, Int64Builder, StringBuilder, StructArray, TimestampMillisecondBuilder,
};
use arrow::buffer::NullBuffer;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use weir_core::Result;

const FIRST_PERSON_ID: i64 = 1000;
const FIRST_AUCTION_ID: i64 = 1000;
const FIRST_CATEGORY_ID: i64 = 10;
const NUM_CATEGORIES: u64 = 5;
const PERSON_ID_LEAD: u64 = 10;
const AUCTION_ID_LEAD: u64 = 10;
const HOT_CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];
const HOT_URLS: [&str; 4] = [
    "https://www.nexmark.com/googl/item.htm?query=1",
    "https://www.nexmark.com/faceb/item.htm?query=1",
    "https://www.nexmark.com/baidu/item.htm?query=1",
    "https://www.nexmark.com/apple/item.htm?query=1",
];
const CHANNELS: u64 = 10_000;
const FIRST_NAMES: [&str; 11] = [
    "Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter",
];
const LAST_NAMES: [&str; 9] = [
    "Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris",
];
const CITIES: [&str; 10] = [
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
];
const STATES: [&str; 6] = ["AZ", "CA", "ID", "OR", "WA", "WY"];

use super::generator::splitmix64 as mix;

/// Random lowercase letters: strings are windows into this pool.
fn pool() -> &'static str {
    static POOL: OnceLock<String> = OnceLock::new();
    POOL.get_or_init(|| {
        (0..65_536u64)
            .map(|i| (b'a' + (mix(i ^ 0x5eed) % 26) as u8) as char)
            .collect()
    })
}

/// The random draws of one event: `draw(k)` is the k-th independent value.
#[derive(Clone, Copy)]
struct Draws(u64);

impl Draws {
    #[inline(always)]
    fn draw(self, k: u64) -> u64 {
        mix(self.0 ^ mix(k.wrapping_mul(0x2545_f491_4f6c_dd1d)))
    }
    #[inline(always)]
    fn below(self, k: u64, n: u64) -> u64 {
        self.draw(k) % n.max(1)
    }
    #[inline(always)]
    fn unit(self, k: u64) -> f64 {
        (self.draw(k) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    fn string(self, k: u64, len: usize) -> &'static str {
        let p = pool();
        let start = (self.draw(k) % (p.len() - len) as u64) as usize;
        &p[start..start + len]
    }
    /// Padding so the event averages `desired` bytes (±20%).
    fn extra(self, k: u64, current: u64, desired: u64) -> &'static str {
        if current >= desired {
            return "";
        }
        let avg = desired - current;
        let delta = avg / 5;
        let len = avg - delta + self.below(k, 2 * delta + 1);
        self.string(k + 1, len.min(60_000) as usize)
    }
    /// `round(10^(U·6) × 100)`.
    fn price(self, k: u64) -> i64 {
        (10f64.powf(self.unit(k) * 6.0) * 100.0).round() as i64
    }
}

struct Ids<'a> {
    c: &'a NexmarkConfig,
    total: u64,
}

impl Ids<'_> {
    fn last_base0_person(&self, n: u64) -> i64 {
        let (epoch, offset) = (n / self.total, n % self.total);
        let offset = offset.min(self.c.person_proportion - 1);
        (epoch * self.c.person_proportion + offset) as i64
    }
    fn last_base0_auction(&self, n: u64) -> i64 {
        let (mut epoch, mut offset) = ((n / self.total) as i64, n % self.total);
        let p = self.c.person_proportion;
        if offset < p {
            epoch -= 1;
            offset = self.c.auction_proportion - 1;
        } else if offset >= p + self.c.auction_proportion {
            offset = self.c.auction_proportion - 1;
        } else {
            offset -= p;
        }
        epoch * self.c.auction_proportion as i64 + offset as i64
    }
    fn next_base0_person(&self, n: u64, r: u64) -> i64 {
        let people = self.last_base0_person(n) + 1;
        let active = people.min(self.c.active_people as i64);
        people - active + (r % (active as u64 + PERSON_ID_LEAD)) as i64
    }
    fn next_base0_auction(&self, n: u64, r: u64) -> i64 {
        let max = self.last_base0_auction(n).max(0);
        let min = (max - self.c.in_flight_auctions as i64).max(0);
        min + (r % ((max - min) as u64 + 1 + AUCTION_ID_LEAD)) as i64
    }
}

fn event_time(c: &NexmarkConfig, n: u64, d: Draws) -> i64 {
    let at = c.base_time_ms + (n as u128 * 1000 / c.tps as u128) as i64;
    if c.occasional_delay_ms > 0 && d.unit(90) < c.prob_delayed_event {
        at - d.below(91, c.occasional_delay_ms as u64) as i64
    } else {
        at
    }
}

struct PersonColumns {
    id: Int64Builder,
    name: StringBuilder,
    email: StringBuilder,
    card: StringBuilder,
    city: StringBuilder,
    state: StringBuilder,
    time: TimestampMillisecondBuilder,
    extra: StringBuilder,
}

struct AuctionColumns {
    id: Int64Builder,
    item: StringBuilder,
    description: StringBuilder,
    initial: Int64Builder,
    reserve: Int64Builder,
    time: TimestampMillisecondBuilder,
    expires: TimestampMillisecondBuilder,
    seller: Int64Builder,
    category: Int64Builder,
    extra: StringBuilder,
}

struct BidColumns {
    auction: Int64Builder,
    bidder: Int64Builder,
    price: Int64Builder,
    channel: StringBuilder,
    url: StringBuilder,
    time: TimestampMillisecondBuilder,
    extra: StringBuilder,
}

macro_rules! nulls {
    ($($b:expr),*) => { $( $b.append_null(); )* };
}

/// Events `[from, to)` as one batch of [`weir_operators::nexmark::schema`].
pub fn generate(c: &NexmarkConfig, schema: &SchemaRef, from: u64, to: u64) -> Result<RecordBatch> {
    let len = (to - from) as usize;
    let total = c.total_proportion();
    let ids = Ids { c, total };
    let mut kinds = Vec::with_capacity(len);
    let sb = || StringBuilder::with_capacity(len, len * 8);
    let mut p = PersonColumns {
        id: Int64Builder::with_capacity(len),
        name: sb(),
        email: sb(),
        card: sb(),
        city: sb(),
        state: sb(),
        time: TimestampMillisecondBuilder::with_capacity(len),
        extra: sb(),
    };
    let mut a = AuctionColumns {
        id: Int64Builder::with_capacity(len),
        item: sb(),
        description: sb(),
        initial: Int64Builder::with_capacity(len),
        reserve: Int64Builder::with_capacity(len),
        time: TimestampMillisecondBuilder::with_capacity(len),
        expires: TimestampMillisecondBuilder::with_capacity(len),
        seller: Int64Builder::with_capacity(len),
        category: Int64Builder::with_capacity(len),
        extra: sb(),
    };
    let mut b = BidColumns {
        auction: Int64Builder::with_capacity(len),
        bidder: Int64Builder::with_capacity(len),
        price: Int64Builder::with_capacity(len),
        channel: sb(),
        url: StringBuilder::with_capacity(len, len * 48),
        time: TimestampMillisecondBuilder::with_capacity(len),
        extra: StringBuilder::with_capacity(len, len * 70),
    };
    let events_per_auction_horizon =
        (c.in_flight_auctions * total / c.auction_proportion) as u128 * 1000 / c.tps as u128;
    let mut card = String::with_capacity(19);
    let mut text = String::with_capacity(128);
    for n in from..to {
        let d = Draws(mix(n ^ 0x6e65_786d_6172_6b00));
        let at = event_time(c, n, d);
        let offset = n % total;
        let kind = if offset < c.person_proportion {
            0
        } else if offset < c.person_proportion + c.auction_proportion {
            1
        } else {
            2
        };
        kinds.push(kind);
        if kind == 0 {
            p.id.append_value(ids.last_base0_person(n) + FIRST_PERSON_ID);
            text.clear();
            text.push_str(FIRST_NAMES[d.below(1, FIRST_NAMES.len() as u64) as usize]);
            text.push(' ');
            text.push_str(LAST_NAMES[d.below(2, LAST_NAMES.len() as u64) as usize]);
            p.name.append_value(&text);
            let name_len = text.len() as u64;
            text.clear();
            text.push_str(d.string(3, 7));
            text.push('@');
            text.push_str(d.string(4, 5));
            text.push_str(".com");
            p.email.append_value(&text);
            card.clear();
            for g in 0..4 {
                use std::fmt::Write;
                let _ = write!(
                    card,
                    "{}{:04}",
                    if g == 0 { "" } else { " " },
                    d.below(5 + g, 10_000)
                );
            }
            p.card.append_value(&card);
            p.city
                .append_value(CITIES[d.below(9, CITIES.len() as u64) as usize]);
            p.state
                .append_value(STATES[d.below(10, STATES.len() as u64) as usize]);
            p.time.append_value(at);
            let size = 8 + name_len + 17 + 19 + 12 + 2 + 8;
            p.extra.append_value(d.extra(11, size, c.avg_person_bytes));
            nulls!(a.id, a.item, a.description, a.initial, a.reserve, a.time);
            nulls!(a.expires, a.seller, a.category, a.extra);
            nulls!(
                b.auction, b.bidder, b.price, b.channel, b.url, b.time, b.extra
            );
        } else if kind == 1 {
            a.id.append_value(ids.last_base0_auction(n) + FIRST_AUCTION_ID);
            a.item.append_value(d.string(20, 20));
            a.description.append_value(d.string(21, 100));
            let initial = d.price(22);
            a.initial.append_value(initial);
            a.reserve.append_value(initial + d.price(23));
            a.time.append_value(at);
            let horizon = events_per_auction_horizon as u64;
            a.expires
                .append_value(at + 1 + d.below(24, (horizon * 2).max(1)) as i64);
            let seller = if d.below(25, c.hot_seller_ratio) > 0 {
                let r = c.hot_seller_ratio as i64;
                (ids.last_base0_person(n) / r) * r
            } else {
                ids.next_base0_person(n, d.draw(26))
            };
            a.seller.append_value(seller + FIRST_PERSON_ID);
            a.category
                .append_value(FIRST_CATEGORY_ID + d.below(27, NUM_CATEGORIES) as i64);
            a.extra
                .append_value(d.extra(28, 8 + 20 + 100 + 8 * 6, c.avg_auction_bytes));
            nulls!(
                p.id, p.name, p.email, p.card, p.city, p.state, p.time, p.extra
            );
            nulls!(
                b.auction, b.bidder, b.price, b.channel, b.url, b.time, b.extra
            );
        } else {
            let auction = if d.below(40, c.hot_auction_ratio) > 0 {
                let r = c.hot_auction_ratio as i64;
                (ids.last_base0_auction(n).max(0) / r) * r
            } else {
                ids.next_base0_auction(n, d.draw(41))
            };
            b.auction.append_value(auction + FIRST_AUCTION_ID);
            let bidder = if d.below(42, c.hot_bidder_ratio) > 0 {
                let r = c.hot_bidder_ratio as i64;
                (ids.last_base0_person(n) / r) * r + 1
            } else {
                ids.next_base0_person(n, d.draw(43))
            };
            b.bidder.append_value(bidder + FIRST_PERSON_ID);
            b.price.append_value(d.price(44));
            let (channel_len, url_len) = if d.below(45, 2) == 0 {
                let i = d.below(46, HOT_CHANNELS.len() as u64) as usize;
                b.channel.append_value(HOT_CHANNELS[i]);
                b.url.append_value(HOT_URLS[i]);
                (HOT_CHANNELS[i].len(), HOT_URLS[i].len())
            } else {
                use std::fmt::Write;
                let k = d.below(47, CHANNELS);
                text.clear();
                let _ = write!(text, "channel-{k}");
                b.channel.append_value(&text);
                let channel_len = text.len();
                text.clear();
                let _ = write!(
                    text,
                    "https://www.nexmark.com/{}/{}/{}/item.htm?query=1&channel_id={k}",
                    d.string(48, 5),
                    d.string(49, 5),
                    d.string(50, 5)
                );
                b.url.append_value(&text);
                (channel_len, text.len())
            };
            b.time.append_value(at);
            let size = 8 * 4 + (channel_len + url_len) as u64;
            b.extra.append_value(d.extra(51, size, c.avg_bid_bytes));
            nulls!(
                p.id, p.name, p.email, p.card, p.city, p.state, p.time, p.extra
            );
            nulls!(a.id, a.item, a.description, a.initial, a.reserve, a.time);
            nulls!(a.expires, a.seller, a.category, a.extra);
        }
    }
    let valid = |k: i32| NullBuffer::from(kinds.iter().map(|&x| x == k).collect::<Vec<_>>());
    let person = StructArray::try_new(
        person_fields(),
        vec![
            Arc::new(p.id.finish()) as ArrayRef,
            Arc::new(p.name.finish()),
            Arc::new(p.email.finish()),
            Arc::new(p.card.finish()),
            Arc::new(p.city.finish()),
            Arc::new(p.state.finish()),
            Arc::new(p.time.finish()),
            Arc::new(p.extra.finish()),
        ],
        Some(valid(0)),
    )?;
    let auction = StructArray::try_new(
        auction_fields(),
        vec![
            Arc::new(a.id.finish()) as ArrayRef,
            Arc::new(a.item.finish()),
            Arc::new(a.description.finish()),
            Arc::new(a.initial.finish()),
            Arc::new(a.reserve.finish()),
            Arc::new(a.time.finish()),
            Arc::new(a.expires.finish()),
            Arc::new(a.seller.finish()),
            Arc::new(a.category.finish()),
            Arc::new(a.extra.finish()),
        ],
        Some(valid(1)),
    )?;
    let bid = StructArray::try_new(
        bid_fields(),
        vec![
            Arc::new(b.auction.finish()) as ArrayRef,
            Arc::new(b.bidder.finish()),
            Arc::new(b.price.finish()),
            Arc::new(b.channel.finish()),
            Arc::new(b.url.finish()),
            Arc::new(b.time.finish()),
            Arc::new(b.extra.finish()),
        ],
        Some(valid(2)),
    )?;
    Ok(RecordBatch::try_new(
        Arc::clone(schema),
        vec![
            Arc::new(Int32Array::from(kinds)),
            Arc::new(person),
            Arc::new(auction),
            Arc::new(bid),
        ],
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::Int64Type;

    #[test]
    fn mix_ids_and_determinism() {
        let c = NexmarkConfig::default();
        let schema = crate::nexmark::schema();
        let all = generate(&c, &schema, 0, 5000).unwrap();
        let kinds = all.column(0).as_primitive::<arrow::datatypes::Int32Type>();
        let count = |k: i32| kinds.values().iter().filter(|&&x| x == k).count();
        assert_eq!((count(0), count(1), count(2)), (100, 300, 4600));
        // The same events however the range is cut.
        let part = generate(&c, &schema, 1234, 1300).unwrap();
        assert_eq!(part, all.slice(1234, 66));
        // New persons and auctions get consecutive ids from 1000.
        let person = all.column(1).as_struct();
        let ids: Vec<i64> = (0..5000)
            .filter(|&i| person.is_valid(i))
            .map(|i| person.column(0).as_primitive::<Int64Type>().value(i))
            .collect();
        assert_eq!(ids, (1000..1100).collect::<Vec<_>>());
        // Bids refer to auctions that exist or are about to.
        let bid = all.column(3).as_struct();
        let auctions = bid.column(0).as_primitive::<Int64Type>();
        for i in (0..5000).filter(|&i| bid.is_valid(i)) {
            let max = Ids { c: &c, total: 50 }.last_base0_auction(i as u64) + 1000;
            assert!(auctions.value(i) <= max + AUCTION_ID_LEAD as i64);
        }
        let prices = bid.column(2).as_primitive::<Int64Type>();
        assert!(
            (0..5000)
                .filter(|&i| bid.is_valid(i))
                .all(|i| prices.value(i) >= 100)
        );
    }
}
