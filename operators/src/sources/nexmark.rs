//! The Nexmark event generator, whole batches at a time.
//!
//! The events follow nexmark-flink's Java generator field by field: event
//! `n` (counting from 0 over all subtasks) is a person, an auction or a bid
//! by its position in a cycle of `person + auction + bid` proportions
//! (1 : 3 : 46 by default); new persons and auctions get consecutive ids
//! from 1000; bids go to a hot auction (the first of the last run of 100)
//! with probability `1 - 1/bid.hot-ratio.auctions` and come from a hot
//! bidder likewise, the rest spread over the auctions still open and the
//! people still active; sellers likewise. Strings have the Java lengths and
//! alphabets and `extra` pads each event to its average size as Java's
//! `nextExtra` does. What differs: the random numbers (every choice is a
//! hash of `(n, field)`, so the batch `[from, to)` is the same whichever
//! subtask generates it and however often, where the Java generator draws
//! from one `java.util.Random` per subtask), and event time at parallelism
//! above 1 (event `n` at `n × 1000 / tps` ms for any number of subtasks).

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
/// Hot auctions, sellers and bidders are the first (bidders: second) of
/// each run of this many ids; the configured ratios only decide how often a
/// hot one is chosen, as in the Java generator.
const HOT_ID_RUN: i64 = 100;
const HOT_CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];
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

const POOL_LEN: u64 = 65_536;

/// Padding characters as the Java generator's `nextExactString` makes them:
/// six characters from each random 32-bit int, `'a' + rnd % 26` with Java's
/// signed remainder, so about half of them fall below `'a'` (`'H'`..`'z'`).
/// `extra` strings are windows into this pool.
fn extra_pool() -> &'static str {
    static POOL: OnceLock<String> = OnceLock::new();
    POOL.get_or_init(|| {
        let mut s = String::with_capacity(POOL_LEN as usize);
        let mut i = 0u64;
        while (s.len() as u64) < POOL_LEN {
            let mut rnd = mix(i ^ 0xe7a) as u32 as i32;
            i += 1;
            for _ in 0..6 {
                s.push((b'a' as i32 + rnd % 26) as u8 as char);
                rnd /= 26;
            }
        }
        s.truncate(POOL_LEN as usize);
        s
    })
}

/// Text as the Java generator's `nextString` makes it: a letter, or the
/// `special` character one time in 13.
fn text_char(r: u64, special: char) -> char {
    if r.is_multiple_of(13) {
        special
    } else {
        (b'a' + ((r / 13) % 26) as u8) as char
    }
}

/// Names and descriptions are windows into this pool of text with spaces.
fn text_pool() -> &'static str {
    static POOL: OnceLock<String> = OnceLock::new();
    POOL.get_or_init(|| {
        (0..POOL_LEN)
            .map(|i| text_char(mix(i ^ 0x5eed), ' '))
            .collect()
    })
}

/// `nextString(max, special)` with its own draws: 3 to `max - 1`
/// characters, trimmed of spaces.
fn own_string(seed: u64, max: u64, special: char) -> String {
    let len = 3 + mix(seed) % (max - 3);
    let s: String = (0..len)
        .map(|i| text_char(mix(seed ^ mix(i + 1)), special))
        .collect();
    s.trim().to_string()
}

/// A base URL as the Java generator makes one: three `nextString(5, '_')`
/// path parts.
fn base_url(seed: u64) -> String {
    format!(
        "https://www.nexmark.com/{}/{}/{}/item.htm?query=1",
        own_string(mix(seed ^ 1), 5, '_'),
        own_string(mix(seed ^ 2), 5, '_'),
        own_string(mix(seed ^ 3), 5, '_'),
    )
}

/// The four hot channels' URLs, one random base URL each.
fn hot_urls() -> &'static [String; 4] {
    static URLS: OnceLock<[String; 4]> = OnceLock::new();
    URLS.get_or_init(|| std::array::from_fn(|i| base_url(0x407 + i as u64)))
}

/// Channel `k`'s name and URL, fixed per channel as the Java generator
/// caches them: `channel-k`, a random base URL, and nine channels in ten
/// add `&channel_id=` with `abs(Integer.reverse(k))` (Java's `abs`, so
/// channel 1's id is -2147483648).
fn channels() -> &'static [(String, String)] {
    static CHANNEL_TABLE: OnceLock<Vec<(String, String)>> = OnceLock::new();
    CHANNEL_TABLE.get_or_init(|| {
        (0..CHANNELS)
            .map(|k| {
                let seed = mix(k ^ 0xc4a0_0000);
                let mut url = base_url(seed);
                if !mix(seed ^ 4).is_multiple_of(10) {
                    let id = (k as u32).reverse_bits() as i32;
                    url.push_str(&format!("&channel_id={}", id.wrapping_abs()));
                }
                (format!("channel-{k}"), url)
            })
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
    fn window(self, pool: &'static str, k: u64, len: usize) -> &'static str {
        let start = (self.draw(k) % (pool.len() - len) as u64) as usize;
        &pool[start..start + len]
    }
    /// `nextString(max)`: 3 to `max - 1` characters of text, a space one
    /// time in 13, trimmed.
    fn text(self, k: u64, max: u64) -> &'static str {
        let len = 3 + self.below(k, max - 3) as usize;
        self.window(text_pool(), k + 1, len).trim()
    }
    /// `nextExtra`: padding so the event averages `desired` bytes, from
    /// `desired - current - delta` to `+ delta - 1`, delta a fifth.
    fn extra(self, k: u64, current: u64, desired: u64) -> &'static str {
        if current > desired {
            return "";
        }
        let avg = desired - current;
        let delta = (avg as f64 * 0.2).round() as u64;
        let len = avg - delta
            + if delta == 0 {
                0
            } else {
                self.below(k, 2 * delta)
            };
        self.window(extra_pool(), k + 1, len.min(60_000) as usize)
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

/// Event `n`'s place in event time: `base + n × 1000 / tps` ms.
fn timestamp_for(c: &NexmarkConfig, n: u64) -> i64 {
    c.base_time_ms + (n as u128 * 1000 / c.tps as u128) as i64
}

fn event_time(c: &NexmarkConfig, n: u64, d: Draws) -> i64 {
    let at = timestamp_for(c, n);
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
    // Events until `in_flight_auctions` more auctions have been made.
    let auction_horizon_events = c.in_flight_auctions * total / c.auction_proportion;
    let (hot_urls, channels) = (hot_urls(), channels());
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
            text.push_str(d.text(60, 7));
            text.push('@');
            text.push_str(d.text(62, 5));
            text.push_str(".com");
            p.email.append_value(&text);
            let email_len = text.len() as u64;
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
            let city = CITIES[d.below(9, CITIES.len() as u64) as usize];
            p.city.append_value(city);
            let state = STATES[d.below(10, STATES.len() as u64) as usize];
            p.state.append_value(state);
            p.time.append_value(at);
            // The Java generator's estimate: 8 for the id, then the strings.
            let size = 8 + name_len + email_len + card.len() as u64;
            let size = size + (city.len() + state.len()) as u64;
            p.extra.append_value(d.extra(11, size, c.avg_person_bytes));
            nulls!(a.id, a.item, a.description, a.initial, a.reserve, a.time);
            nulls!(a.expires, a.seller, a.category, a.extra);
            nulls!(
                b.auction, b.bidder, b.price, b.channel, b.url, b.time, b.extra
            );
        } else if kind == 1 {
            a.id.append_value(ids.last_base0_auction(n) + FIRST_AUCTION_ID);
            let item = d.text(20, 20);
            a.item.append_value(item);
            let description = d.text(30, 100);
            a.description.append_value(description);
            let initial = d.price(22);
            a.initial.append_value(initial);
            a.reserve.append_value(initial + d.price(23));
            a.time.append_value(at);
            // Long enough on average to last until the auction
            // `in_flight_auctions` ahead is made.
            let horizon = (timestamp_for(c, n + auction_horizon_events) - at).max(0) as u64;
            a.expires
                .append_value(at + 1 + d.below(24, (horizon * 2).max(1)) as i64);
            let seller = if d.below(25, c.hot_seller_ratio) > 0 {
                (ids.last_base0_person(n) / HOT_ID_RUN) * HOT_ID_RUN
            } else {
                ids.next_base0_person(n, d.draw(26))
            };
            a.seller.append_value(seller + FIRST_PERSON_ID);
            a.category
                .append_value(FIRST_CATEGORY_ID + d.below(27, NUM_CATEGORIES) as i64);
            let size = 8 + item.len() as u64 + description.len() as u64 + 8 * 5;
            a.extra.append_value(d.extra(28, size, c.avg_auction_bytes));
            nulls!(
                p.id, p.name, p.email, p.card, p.city, p.state, p.time, p.extra
            );
            nulls!(
                b.auction, b.bidder, b.price, b.channel, b.url, b.time, b.extra
            );
        } else {
            let auction = if d.below(40, c.hot_auction_ratio) > 0 {
                (ids.last_base0_auction(n).max(0) / HOT_ID_RUN) * HOT_ID_RUN
            } else {
                ids.next_base0_auction(n, d.draw(41))
            };
            b.auction.append_value(auction + FIRST_AUCTION_ID);
            let bidder = if d.below(42, c.hot_bidder_ratio) > 0 {
                (ids.last_base0_person(n) / HOT_ID_RUN) * HOT_ID_RUN + 1
            } else {
                ids.next_base0_person(n, d.draw(43))
            };
            // The Java generator adds FIRST_PERSON_ID to a bid's bidder
            // twice (nexmark-flink's BidGenerator); so does Weir, so bidder
            // ids are the ones Flink's Nexmark runs see.
            b.bidder.append_value(bidder + 2 * FIRST_PERSON_ID);
            b.price.append_value(d.price(44));
            if d.below(45, 2) > 0 {
                let i = d.below(46, HOT_CHANNELS.len() as u64) as usize;
                b.channel.append_value(HOT_CHANNELS[i]);
                b.url.append_value(&hot_urls[i]);
            } else {
                let (channel, url) = &channels[d.below(47, CHANNELS) as usize];
                b.channel.append_value(channel);
                b.url.append_value(url);
            }
            b.time.append_value(at);
            // Auction, bidder, price and time; channel and URL uncounted,
            // as in the Java generator.
            b.extra.append_value(d.extra(51, 8 * 4, c.avg_bid_bytes));
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

    fn strings(s: &StructArray, column: usize) -> Vec<&str> {
        let c = s.column(column).as_string::<i32>();
        (0..s.len())
            .filter(|&i| s.is_valid(i))
            .map(|i| c.value(i))
            .collect()
    }

    fn longs(s: &StructArray, column: usize) -> Vec<i64> {
        let c = s.column(column).as_primitive::<Int64Type>();
        (0..s.len())
            .filter(|&i| s.is_valid(i))
            .map(|i| c.value(i))
            .collect()
    }

    fn mean(v: impl Iterator<Item = usize>) -> f64 {
        let (sum, n) = v.fold((0, 0), |(s, n), x| (s + x, n + 1));
        sum as f64 / n as f64
    }

    /// The fields as nexmark-flink's Java generator makes them: lengths,
    /// alphabets, padding, hot ids, channels and URLs.
    #[test]
    fn fields_follow_the_java_generator() {
        let c = NexmarkConfig::default();
        let all = generate(&c, &crate::nexmark::schema(), 0, 200_000).unwrap();
        let (person, auction, bid) = (
            all.column(1).as_struct(),
            all.column(2).as_struct(),
            all.column(3).as_struct(),
        );
        // Bids pad from 32 bytes to 100 on average: extra is 54..=81.
        let extra = strings(bid, 6);
        assert!(extra.iter().all(|e| (54..=81).contains(&e.len())));
        let avg = mean(extra.iter().map(|e| e.len()));
        assert!((avg - 67.5).abs() < 0.5, "bid extra averages {avg}");
        // Java's signed remainder puts about half the padding below 'a'.
        let below = extra
            .iter()
            .flat_map(|e| e.bytes())
            .filter(|&b| b < b'a')
            .count();
        let share = below as f64 / extra.iter().map(|e| e.len()).sum::<usize>() as f64;
        assert!((0.4..0.6).contains(&share), "share below 'a': {share}");
        assert!(
            extra
                .iter()
                .flat_map(|e| e.bytes())
                .all(|b| (b'H'..=b'z').contains(&b))
        );
        // Persons: 200 bytes on average over id, strings and padding.
        let columns: Vec<Vec<&str>> = [1, 2, 3, 4, 5, 7].map(|c| strings(person, c)).into();
        let n = columns[0].len();
        let avg = mean((0..n).map(|i| 8 + columns.iter().map(|c| c[i].len()).sum::<usize>()));
        assert!((avg - 200.0).abs() < 3.0, "person size averages {avg}");
        // Emails: 3..6 characters, '@', 3..4 characters, ".com", trimmed.
        for e in strings(person, 2) {
            let (user, host) = e.split_once('@').unwrap();
            assert!(
                user.len() <= 6 && host.len() <= 8 && host.ends_with(".com"),
                "{e}"
            );
            assert_eq!(user.trim(), user);
        }
        // Auctions: names 3..19, descriptions 3..99, 500 bytes on average.
        let (names, descriptions) = (strings(auction, 1), strings(auction, 2));
        assert!(names.iter().all(|s| s.len() <= 19));
        assert!(descriptions.iter().all(|s| s.len() <= 99));
        let avg_desc = mean(descriptions.iter().map(|s| s.len()));
        assert!(
            (45.0..53.0).contains(&avg_desc),
            "descriptions average {avg_desc}"
        );
        let extras = strings(auction, 9);
        let avg = mean(
            (0..names.len())
                .map(|i| 8 + names[i].len() + descriptions[i].len() + 40 + extras[i].len()),
        );
        assert!((avg - 500.0).abs() < 3.0, "auction size averages {avg}");
        // Hot auctions are the first of a run of 100: with ratio 2, at
        // least half the bids go to a multiple of 100 (plus 1000).
        let auctions = longs(bid, 0);
        let hot = auctions.iter().filter(|&&a| (a - 1000) % 100 == 0).count();
        let share = hot as f64 / auctions.len() as f64;
        assert!((0.5..0.53).contains(&share), "hot auction share {share}");
        // Bidders: FIRST_PERSON_ID added twice; hot ones 1 past a run of
        // 100 three times in four.
        let bidders = longs(bid, 1);
        assert!(bidders.iter().all(|&b| b >= 2000));
        let hot = bidders.iter().filter(|&&b| (b - 2000) % 100 == 1).count();
        let share = hot as f64 / bidders.len() as f64;
        assert!((0.75..0.78).contains(&share), "hot bidder share {share}");
        // Sellers: hot ones the first of a run of 100.
        let sellers = longs(auction, 7);
        let hot = sellers.iter().filter(|&&s| (s - 1000) % 100 == 0).count();
        let share = hot as f64 / sellers.len() as f64;
        assert!((0.73..0.78).contains(&share), "hot seller share {share}");
        // Channels: half the bids on the four hot ones, whose URLs carry no
        // channel id; nine channels in ten of the rest do.
        let (channels, urls) = (strings(bid, 3), strings(bid, 4));
        let hot = channels.iter().filter(|c| HOT_CHANNELS.contains(c)).count();
        let share = hot as f64 / channels.len() as f64;
        assert!((0.49..0.51).contains(&share), "hot channel share {share}");
        let with_id = urls.iter().filter(|u| u.contains("&channel_id=")).count();
        let share = with_id as f64 / channels.len() as f64;
        assert!(
            (0.42..0.48).contains(&share),
            "share with channel_id {share}"
        );
        for (c, u) in channels.iter().zip(&urls) {
            let parts: Vec<&str> = u.split('/').collect();
            assert_eq!(&parts[..3], ["https:", "", "www.nexmark.com"], "{u}");
            assert!(
                parts[3..6].iter().all(|p| (3..=4).contains(&p.len())),
                "{u}"
            );
            if let Some(k) = c.strip_prefix("channel-") {
                let k: u32 = k.parse().unwrap();
                if let Some((_, id)) = u.split_once("&channel_id=") {
                    let want = (k.reverse_bits() as i32).wrapping_abs();
                    assert_eq!(id, want.to_string());
                }
            }
        }
        // In order: event n at n / 10 ms after the base time.
        let times = bid
            .column(5)
            .as_primitive::<arrow::datatypes::TimestampMillisecondType>();
        for i in (0..200_000).filter(|&i| bid.is_valid(i)) {
            assert_eq!(times.value(i), c.base_time_ms + i as i64 / 10);
        }
    }
}
