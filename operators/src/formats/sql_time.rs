//! The timestamp text Flink writes (`2023-11-14 22:13:20.123`, SQL style,
//! or with a `T`) read without arrow's general parser: fixed positions,
//! digits checked, the date turned into days by arithmetic. Anything else
//! (a zone, a date alone, a leap second, more than nine fraction digits)
//! is left to arrow's parser by returning `None`, so the two read the same
//! values the same way and differ only in speed.

use arrow::datatypes::TimeUnit;

/// Seconds since the epoch and nanoseconds of `s`, read as UTC, when it is
/// `YYYY-MM-DD HH:MM:SS` (or `T` between) with up to nine fraction digits.
pub(crate) fn parse(s: &[u8]) -> Option<(i64, u32)> {
    if s.len() < 19 || s[4] != b'-' || s[7] != b'-' || !matches!(s[10], b' ' | b'T') {
        return None;
    }
    if s[13] != b':' || s[16] != b':' {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<u32> {
        s[from..to].iter().try_fold(0u32, |n, &b| {
            b.is_ascii_digit().then(|| n * 10 + u32::from(b - b'0'))
        })
    };
    let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hour, minute, second) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let nanos = fraction(&s[19..])?;
    let days = days_from_civil(i64::from(year), month, day);
    let secs = days * 86_400 + i64::from(hour * 3600 + minute * 60 + second);
    Some((secs, nanos))
}

/// `parse` in `unit` (sub-unit digits cut off, as arrow's cast does).
pub(crate) fn parse_in(s: &[u8], unit: TimeUnit) -> Option<i64> {
    let (secs, nanos) = parse(s)?;
    in_unit(secs, nanos, unit)
}

/// Nanoseconds of what follows the seconds: nothing, or `.` and one to
/// nine digits.
fn fraction(rest: &[u8]) -> Option<u32> {
    match rest {
        [] => Some(0),
        [b'.', digits @ ..] if (1..=9).contains(&digits.len()) => {
            let n = digits.iter().try_fold(0u32, |n, &b| {
                b.is_ascii_digit().then(|| n * 10 + u32::from(b - b'0'))
            })?;
            Some(n * 10u32.pow(9 - digits.len() as u32))
        }
        _ => None,
    }
}

/// [`parse_in`] remembering the last value's date and time to the second:
/// a stream's timestamps come in runs within one second (Nexmark's bids a
/// few hundred to a second), and a run's values after the first cost one
/// compare of 19 bytes and their fraction instead of the calendar.
#[derive(Debug, Default)]
pub(crate) struct TimeReader {
    last: Option<([u8; 19], i64)>,
}

impl TimeReader {
    pub(crate) fn parse_in(&mut self, s: &[u8], unit: TimeUnit) -> Option<i64> {
        // A fixed-size compare: a few word loads, not a call to memcmp.
        let head: &[u8; 19] = s.get(..19)?.try_into().ok()?;
        let (secs, nanos) = match &self.last {
            Some((last, secs)) if last == head => (*secs, fraction(&s[19..])?),
            _ => {
                let (secs, nanos) = parse(s)?;
                self.last = Some((*head, secs));
                (secs, nanos)
            }
        };
        in_unit(secs, nanos, unit)
    }
}

fn in_unit(secs: i64, nanos: u32, unit: TimeUnit) -> Option<i64> {
    let nanos = i64::from(nanos);
    match unit {
        TimeUnit::Second => Some(secs),
        TimeUnit::Millisecond => secs.checked_mul(1_000)?.checked_add(nanos / 1_000_000),
        TimeUnit::Microsecond => secs.checked_mul(1_000_000)?.checked_add(nanos / 1_000),
        TimeUnit::Nanosecond => secs.checked_mul(1_000_000_000)?.checked_add(nanos),
    }
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar
/// (the civil-from-days inverse: eras of 400 years, years from March).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let m = i64::from(month);
    let day_of_year = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::compute::kernels::cast_utils::string_to_datetime;

    /// What arrow's parser makes of `s` (UTC), in `unit`.
    fn arrow(s: &str, unit: TimeUnit) -> Option<i64> {
        let t = string_to_datetime(&chrono::Utc, s)
            .ok()?
            .naive_utc()
            .and_utc();
        match unit {
            TimeUnit::Second => Some(t.timestamp()),
            TimeUnit::Millisecond => Some(t.timestamp_millis()),
            TimeUnit::Microsecond => Some(t.timestamp_micros()),
            TimeUnit::Nanosecond => t.timestamp_nanos_opt(),
        }
    }

    #[test]
    fn reads_what_arrow_reads_and_leaves_the_rest_to_it() {
        let cases = [
            "2023-11-14 22:13:20.123",
            "2023-11-14T22:13:20",
            "1970-01-01 00:00:00",
            "1969-12-31 23:59:59.999999999",
            "0000-03-01 00:00:00.5",
            "1600-02-29 12:00:00.1234567",
            "2000-02-29 00:00:00",
            "2100-12-31 23:59:59.01",
            "9999-12-31 23:59:59.999",
            "2024-01-31 10:20:30.000001",
        ];
        for s in cases {
            for unit in [
                TimeUnit::Second,
                TimeUnit::Millisecond,
                TimeUnit::Microsecond,
                TimeUnit::Nanosecond,
            ] {
                let want = arrow(s, unit);
                if unit == TimeUnit::Nanosecond && want.is_none() {
                    // Beyond the nanosecond range: the fast path must not
                    // give a value arrow would not.
                    assert_eq!(parse_in(s.as_bytes(), unit), None, "{s}");
                    continue;
                }
                assert_eq!(parse_in(s.as_bytes(), unit), want, "{s} in {unit:?}");
            }
        }
        // Not the fixed form, or not a date: arrow decides (None here).
        for s in [
            "2023-11-14",
            "2023-11-14 22:13:20Z",
            "2023-11-14 22:13:20+01:00",
            "2023-11-14 22:13:20.",
            "2023-11-14 22:13:20.1234567891",
            "2023-11-14 22:13:60",
            "2023-02-29 00:00:00",
            "2023-13-01 00:00:00",
            "2023-00-10 00:00:00",
            "2023-01-00 00:00:00",
            "2023-01-01 24:00:00",
            "2023-1-01 00:00:00",
            "+2023-01-01 00:00:00",
            "2023-01-01 0a:00:00",
            "",
        ] {
            assert_eq!(parse(s.as_bytes()), None, "{s}");
        }
    }

    #[test]
    fn the_remembering_reader_reads_each_value_as_alone() {
        let values = [
            "2023-11-14 22:13:20",
            "2023-11-14 22:13:20.5",
            "2023-11-14 22:13:20Z",
            "2023-11-14 22:13:20.",
            "2023-11-14 22:13:20.1234567891",
            "2023-11-14 22:13:20.7",
            "2023-11-14T22:13:20.7",
            "2023-11-14 22:13:21",
            "2023-11-14 22:13:2",
            "2023-11-14 22:13:21.25",
            "2023-02-29 00:00:00",
            "2023-02-29 00:00:00",
            "2024-02-29 00:00:00.1",
            "",
        ];
        for unit in [
            TimeUnit::Second,
            TimeUnit::Millisecond,
            TimeUnit::Nanosecond,
        ] {
            let mut reader = TimeReader::default();
            for s in values {
                assert_eq!(
                    reader.parse_in(s.as_bytes(), unit),
                    parse_in(s.as_bytes(), unit),
                    "{s}"
                );
            }
        }
    }

    #[test]
    fn every_day_of_four_centuries_matches_chrono() {
        let mut date = chrono::NaiveDate::from_ymd_opt(1800, 1, 1).unwrap();
        let end = chrono::NaiveDate::from_ymd_opt(2201, 1, 1).unwrap();
        while date < end {
            let text = format!("{} 01:02:03.4", date.format("%Y-%m-%d"));
            assert_eq!(
                parse_in(text.as_bytes(), TimeUnit::Millisecond),
                arrow(&text, TimeUnit::Millisecond),
                "{text}"
            );
            date = date.succ_opt().unwrap();
        }
    }
}
