"""Nexmark results checked against an independent evaluation.

Weir writes a bounded run's Person, Auction and Bid events to Parquet, then
runs each Nexmark query (sql/nexmark/qN.sql) on the same `nexmark`
connector configuration with its sink switched to Parquet. DuckDB evaluates
the same query — written for DuckDB from the query's meaning, windows as
integer arithmetic on epoch milliseconds — over the event files, and the
two results must be equal as multisets (changelogs collapsed first).

    python nexmark_check.py path/to/weir [events] [queries…]

With WEIR_TEST_PYFLINK set (the python of a venv with PyFlink 2.3), Flink
itself runs the same query texts over the same events (dumped as CSV,
nexmark_flink.py), in streaming and in batch mode, and Weir's rows must
equal Flink's too.
"""

import collections
import decimal
import json
import os
import re
import subprocess
import sys
import tempfile

import duckdb
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flink_differential import canon  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
NEXMARK = os.path.join(ROOT, "sql", "nexmark")

# The same events for the dump and every query: bounded, emitted at full
# speed, event time advancing at 2,000 events/s.
def ddl(events):
    text = open(os.path.join(NEXMARK, "ddl.sql")).read()
    return text.replace("${TPS}", "2000").replace("${EVENTS_NUM}", str(events))


DUMP = """
SET 'parallelism.default' = '2';
CREATE TABLE bid_out (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
  dateTime TIMESTAMP(3), extra VARCHAR)
  WITH ('connector' = 'filesystem', 'path' = '{out}/bid', 'format' = 'parquet');
CREATE TABLE person_out (id BIGINT, name VARCHAR, emailAddress VARCHAR, creditCard VARCHAR,
  city VARCHAR, state VARCHAR, dateTime TIMESTAMP(3), extra VARCHAR)
  WITH ('connector' = 'filesystem', 'path' = '{out}/person', 'format' = 'parquet');
CREATE TABLE auction_out (id BIGINT, itemName VARCHAR, description VARCHAR, initialBid BIGINT,
  reserve BIGINT, dateTime TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, category BIGINT,
  extra VARCHAR)
  WITH ('connector' = 'filesystem', 'path' = '{out}/auction', 'format' = 'parquet');
EXECUTE STATEMENT SET BEGIN
INSERT INTO bid_out SELECT * FROM bid;
INSERT INTO person_out SELECT * FROM person;
INSERT INTO auction_out SELECT * FROM auction;
END;
"""

# The same events as CSV for Flink (which has no Parquet format here): one
# file per table, in event order, so Flink's watermarks see no late event.
DUMP_CSV = DUMP.replace("'parallelism.default' = '2'", "'parallelism.default' = '1'").replace(
    "'format' = 'parquet'", "'format' = 'csv'")

# Queries Flink cannot run here, and why.
FLINK_SKIPS = {
    "q13": "Flink's filesystem connector is no lookup source",
    "q14": "count_char is a UDF of the Nexmark jar, which this Flink lacks",
}
FLINK_BATCH_SKIPS = {"q11": "Flink's batch mode has no session group windows"}

TS = "epoch_ms(dateTime)"

# Rows tied on the ordering make Top-N and deduplication pick by arrival,
# which DuckDB cannot know: for these, only the columns that ties cannot
# change are compared.
COMPARED = {"q9": [0, 12, 13], "q18": [0, 1, 5], "q19": [0, 2, 7]}

# DuckDB's reading of each query over tables bid, person, auction.
REFERENCE = {
    "q0": "SELECT auction, bidder, price, dateTime, extra FROM bid",
    "q1": "SELECT auction, bidder, CAST(0.908 * price AS DECIMAL(23, 3)), dateTime, extra FROM bid",
    "q2": "SELECT auction, price FROM bid WHERE auction % 123 = 0",
    "q3": """SELECT P.name, P.city, P.state, A.id FROM auction A JOIN person P ON A.seller = P.id
             WHERE A.category = 10 AND P.state IN ('OR', 'ID', 'CA')""",
    "q4": """
        WITH q AS (SELECT max(B.price) AS final, A.category FROM auction A JOIN bid B ON A.id = B.auction
                   WHERE B.dateTime BETWEEN A.dateTime AND A.expires GROUP BY A.id, A.category)
        SELECT category, CAST(trunc(sum(final) / count(final)) AS BIGINT) FROM q GROUP BY category""",
    "q5": f"""
        WITH w AS (
          SELECT auction, s AS ws, s + 10000 AS we FROM (
            SELECT auction, unnest(range({TS} - {TS} % 2000 - 8000, {TS} - {TS} % 2000 + 1, 2000)) AS s
            FROM bid)),
        ab AS (SELECT auction, count(*) AS num, ws, we FROM w GROUP BY auction, ws, we),
        mb AS (SELECT max(num) AS maxn, ws, we FROM ab GROUP BY ws, we)
        SELECT ab.auction, ab.num FROM ab JOIN mb ON ab.ws = mb.ws AND ab.we = mb.we
        WHERE ab.num >= mb.maxn""",
    "q7": f"""
        WITH b1 AS (SELECT max(price) AS maxprice, {TS} - {TS} % 10000 + 10000 AS we
                    FROM bid GROUP BY {TS} - {TS} % 10000)
        SELECT B.auction, B.bidder, B.price, B.dateTime, B.extra FROM bid B JOIN b1 ON B.price = b1.maxprice
        WHERE epoch_ms(B.dateTime) BETWEEN b1.we - 10000 AND b1.we""",
    "q8": f"""
        WITH p AS (SELECT DISTINCT id, name, {TS} - {TS} % 10000 AS ws FROM person),
             a AS (SELECT DISTINCT seller, {TS} - {TS} % 10000 AS ws FROM auction)
        SELECT p.id, p.name, make_timestamp(p.ws * 1000) FROM p JOIN a ON p.id = a.seller AND p.ws = a.ws""",
    "q9": """
        SELECT id, price, bid_dateTime FROM (
          SELECT A.id, B.price, B.dateTime AS bid_dateTime,
            row_number() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.dateTime ASC) AS rownum
          FROM auction A JOIN bid B ON A.id = B.auction
          WHERE B.dateTime BETWEEN A.dateTime AND A.expires)
        WHERE rownum <= 1""",
    "q11": f"""
        WITH s AS (SELECT bidder, {TS} AS t,
                     lag({TS}) OVER (PARTITION BY bidder ORDER BY {TS}) AS prev FROM bid),
             g AS (SELECT bidder, t, sum(CASE WHEN prev IS NULL OR t - prev > 10000 THEN 1 ELSE 0 END)
                     OVER (PARTITION BY bidder ORDER BY t ROWS UNBOUNDED PRECEDING) AS sid FROM s)
        SELECT bidder, count(*), make_timestamp(min(t) * 1000), make_timestamp((max(t) + 10000) * 1000)
        FROM g GROUP BY bidder, sid""",
    "q13": """
        SELECT B.auction, B.bidder, B.price, B.dateTime, S.value FROM bid B
        JOIN read_csv('{side}', header = false, columns = {'key': 'BIGINT', 'value': 'VARCHAR'}) S
          ON B.auction % 10000 = S.key""",
    "q14": """
        SELECT auction, bidder, CAST(0.908 * price AS DECIMAL(23, 3)),
          CASE WHEN hour(dateTime) >= 8 AND hour(dateTime) <= 18 THEN 'dayTime'
               WHEN hour(dateTime) <= 6 OR hour(dateTime) >= 20 THEN 'nightTime'
               ELSE 'otherTime' END,
          dateTime, extra, length(extra) - length(replace(extra, 'c', ''))
        FROM bid WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000""",
    "q15": """
        SELECT strftime(dateTime, '%Y-%m-%d'), count(*),
          count(*) FILTER (WHERE price < 10000),
          count(*) FILTER (WHERE price >= 10000 AND price < 1000000),
          count(*) FILTER (WHERE price >= 1000000),
          count(DISTINCT bidder),
          count(DISTINCT bidder) FILTER (WHERE price < 10000),
          count(DISTINCT bidder) FILTER (WHERE price >= 10000 AND price < 1000000),
          count(DISTINCT bidder) FILTER (WHERE price >= 1000000),
          count(DISTINCT auction),
          count(DISTINCT auction) FILTER (WHERE price < 10000),
          count(DISTINCT auction) FILTER (WHERE price >= 10000 AND price < 1000000),
          count(DISTINCT auction) FILTER (WHERE price >= 1000000)
        FROM bid GROUP BY strftime(dateTime, '%Y-%m-%d')""",
    "q16": """
        SELECT channel, strftime(dateTime, '%Y-%m-%d'), max(strftime(dateTime, '%H:%M')), count(*),
          count(*) FILTER (WHERE price < 10000),
          count(*) FILTER (WHERE price >= 10000 AND price < 1000000),
          count(*) FILTER (WHERE price >= 1000000),
          count(DISTINCT bidder),
          count(DISTINCT bidder) FILTER (WHERE price < 10000),
          count(DISTINCT bidder) FILTER (WHERE price >= 10000 AND price < 1000000),
          count(DISTINCT bidder) FILTER (WHERE price >= 1000000),
          count(DISTINCT auction),
          count(DISTINCT auction) FILTER (WHERE price < 10000),
          count(DISTINCT auction) FILTER (WHERE price >= 10000 AND price < 1000000),
          count(DISTINCT auction) FILTER (WHERE price >= 1000000)
        FROM bid GROUP BY channel, strftime(dateTime, '%Y-%m-%d')""",
    "q17": """
        SELECT auction, strftime(dateTime, '%Y-%m-%d'), count(*),
          count(*) FILTER (WHERE price < 10000),
          count(*) FILTER (WHERE price >= 10000 AND price < 1000000),
          count(*) FILTER (WHERE price >= 1000000),
          min(price), max(price), CAST(trunc(sum(price) / count(price)) AS BIGINT), sum(price)
        FROM bid GROUP BY auction, strftime(dateTime, '%Y-%m-%d')""",
    "q18": """
        SELECT auction, bidder, dateTime FROM bid
        QUALIFY row_number() OVER (PARTITION BY bidder, auction ORDER BY dateTime DESC) <= 1""",
    "q19": """
        SELECT auction, price, rank_number FROM (
          SELECT *, row_number() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number FROM bid)
        WHERE rank_number <= 10""",
    "q20": """
        SELECT B.auction, B.bidder, B.price, B.channel, B.url, B.dateTime, B.extra,
          A.itemName, A.description, A.initialBid, A.reserve, A.dateTime, A.expires, A.seller,
          A.category, A.extra
        FROM bid B JOIN auction A ON B.auction = A.id WHERE A.category = 10""",
    "q21": """
        SELECT auction, bidder, price, channel,
          CASE WHEN lower(channel) = 'apple' THEN '0'
               WHEN lower(channel) = 'google' THEN '1'
               WHEN lower(channel) = 'facebook' THEN '2'
               WHEN lower(channel) = 'baidu' THEN '3'
               ELSE CASE WHEN regexp_matches(url, '(&|^)channel_id=([^&]*)')
                         THEN regexp_extract(url, '(&|^)channel_id=([^&]*)', 2) END END
        FROM bid
        WHERE regexp_matches(url, '(&|^)channel_id=([^&]*)')
           OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')""",
    "q22": """
        SELECT auction, bidder, price, channel,
          nullif(split_part(url, '/', 4), ''), nullif(split_part(url, '/', 5), ''),
          nullif(split_part(url, '/', 6), '')
        FROM bid""",
    "q23": """SELECT B.bidder, B.price, B.channel, B.url, B.extra, P.id, P.name, P.emailAddress,
                     P.creditCard, P.city, P.state, P.extra, A.itemName, A.description, A.initialBid,
                     A.reserve, A.dateTime, A.expires, A.seller, A.category, A.extra
              FROM bid B JOIN person P ON P.id = B.bidder JOIN auction A ON A.seller = B.bidder""",
}


# Beyond Nexmark's queries: session windows and an interval join over the
# same out-of-order events (a tenth of them up to 3 s late).
EXTRA = {
    "sessions": (
        """CREATE TABLE extra_sessions (bidder BIGINT, bids BIGINT, starttime TIMESTAMP(3),
             endtime TIMESTAMP(3)) WITH ('connector' = 'blackhole');
           INSERT INTO extra_sessions
           SELECT bidder, COUNT(*), window_start, window_end
           FROM TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(dateTime), INTERVAL '3' SECOND))
           GROUP BY bidder, window_start, window_end;""",
        f"""WITH s AS (SELECT bidder, {TS} AS t,
                         lag({TS}) OVER (PARTITION BY bidder ORDER BY {TS}) AS prev FROM bid),
                g AS (SELECT bidder, t, sum(CASE WHEN prev IS NULL OR t - prev > 3000 THEN 1 ELSE 0 END)
                        OVER (PARTITION BY bidder ORDER BY t ROWS UNBOUNDED PRECEDING) AS sid FROM s)
           SELECT bidder, count(*), make_timestamp(min(t) * 1000), make_timestamp((max(t) + 3000) * 1000)
           FROM g GROUP BY bidder, sid""",
    ),
    "interval_join": (
        """CREATE TABLE extra_interval (auction BIGINT, bidder BIGINT, price BIGINT, seller BIGINT)
             WITH ('connector' = 'blackhole');
           INSERT INTO extra_interval
           SELECT B.auction, B.bidder, B.price, A.seller FROM bid B JOIN auction A ON B.auction = A.id
           WHERE B.dateTime BETWEEN A.dateTime AND A.dateTime + INTERVAL '5' SECOND;""",
        """SELECT B.auction, B.bidder, B.price, A.seller FROM bid B JOIN auction A ON B.auction = A.id
           WHERE B.dateTime BETWEEN A.dateTime AND A.dateTime + INTERVAL 5 SECOND""",
    ),
}


def norm(v):
    if isinstance(v, decimal.Decimal):
        return str(v.normalize())
    if hasattr(v, "replace") and hasattr(v, "tzinfo") and v.tzinfo is not None:
        return v.replace(tzinfo=None)
    return v


def weir_rows(folder, columns=None):
    """Rows of every Parquet file under folder, a changelog collapsed."""
    counts = collections.Counter()
    for dirpath, _, files in os.walk(folder):
        for f in files:
            if not f.endswith(".parquet") or f.startswith("."):
                continue
            table = pq.read_table(os.path.join(dirpath, f))
            names = table.column_names
            # A changelog written to files has its row kind as text in "op".
            changelog = names and names[-1] == "op"
            for row in table.to_pylist():
                values = tuple(norm(row[n]) for n in (names[:-1] if changelog else names))
                if columns:
                    values = tuple(values[i] for i in columns)
                op = row["op"] if changelog else "+I"
                counts[values] += 1 if op in ("+I", "+U") else -1
    bad = [r for r, n in counts.items() if n < 0]
    assert not bad, f"rows retracted more often than inserted: {bad[:3]}"
    return +counts


def run(weir, script, workdir):
    path = os.path.join(workdir, "job.sql")
    with open(path, "w") as f:
        f.write(script)
    p = subprocess.run([weir, "run", path], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"weir failed:\n{p.stderr}")


def main():
    weir = sys.argv[1]
    events = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
    queries = sys.argv[3:] or sorted(REFERENCE, key=lambda q: int(q[1:])) + sorted(EXTRA)
    with tempfile.TemporaryDirectory(prefix="nexmark-check-") as work:
        check(weir, events, queries, work)


def check(weir, events, queries, work):
    events_dir = os.path.join(work, "events")
    run(weir, ddl(events) + DUMP.format(out=events_dir), work)
    db = duckdb.connect()
    for t in ("bid", "person", "auction"):
        db.execute(
            f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{events_dir}/{t}/*.parquet')"
        )
    total = db.execute("SELECT (SELECT count(*) FROM bid) + (SELECT count(*) FROM person)"
                       " + (SELECT count(*) FROM auction)").fetchone()[0]
    assert total == events, f"the dump has {total} events, expected {events}"
    side = os.path.join(work, "side_input.csv")
    with open(side, "w") as f:
        # Half the keys, so some bids find no side row.
        f.writelines(f"{k},value-{k}\n" for k in range(0, 10000, 2))
    flink = os.environ.get("WEIR_TEST_PYFLINK")
    if flink:
        runs = start_flink(flink, weir, events, queries, work)
    failures = []
    results = {}
    for q in queries:
        out = os.path.join(work, q)
        if q in EXTRA:
            text, reference = EXTRA[q]
        else:
            text, reference = open(os.path.join(NEXMARK, f"{q}.sql")).read(), REFERENCE[q]
            text = text.replace("${SIDE_INPUT}", side)
            reference = reference.replace("{side}", side)
        text = re.sub(
            r"'connector'\s*=\s*'blackhole'",
            f"'connector' = 'filesystem', 'path' = '{out}', 'format' = 'parquet', "
            "'sink.changelog-mode' = 'retract'",
            text,
        )
        run(weir, "SET 'parallelism.default' = '2';\n" + ddl(events) + text, work)
        got = weir_rows(out, COMPARED.get(q))
        results[q] = got
        want = collections.Counter(
            tuple(norm(v) for v in row) for row in db.execute(reference).fetchall()
        )
        n = sum(want.values())
        if got == want:
            print(f"{q}: {n} rows equal")
        else:
            missing = list((want - got).items())[:3]
            extra = list((got - want).items())[:3]
            failures.append(
                f"{q}: Weir {sum(got.values())} rows, DuckDB {n}; "
                f"missing e.g. {missing}; unexpected e.g. {extra}"
            )
            print(failures[-1])
        if n == 0:
            failures.append(f"{q}: the reference has no rows; the check proves nothing")
    if flink:
        failures += compare_with_flink(queries, runs, results)
    if failures:
        raise SystemExit("\n".join(failures))


def as_text(v):
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def start_flink(flink, weir, events, queries, work):
    """Flink's runs of the queries over the same events, streaming and
    batch, started at once (two JVMs beside Weir's runs)."""
    csv_dir = os.path.join(work, "events-csv")
    run(weir, ddl(events) + DUMP_CSV.format(out=csv_dir), work)
    runnable = [q for q in queries if q in REFERENCE and q not in FLINK_SKIPS]
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nexmark_flink.py")
    runs = []
    for mode in ("streaming", "batch"):
        out = os.path.join(work, f"flink-{mode}.json")
        log = open(os.path.join(work, f"flink-{mode}.log"), "w+")
        p = subprocess.Popen([flink, script, csv_dir, out, mode, *runnable], stdout=log,
                             stderr=subprocess.STDOUT, text=True)
        runs.append((mode, p, out, log, runnable))
    return runs


def compare_with_flink(queries, runs, results):
    """Weir's rows of each query against Flink's."""
    for q in queries:
        if q in FLINK_SKIPS:
            print(f"{q}: not run on Flink: {FLINK_SKIPS[q]}")
    failures = []
    for mode, p, out, log, runnable in runs:
        p.wait()
        log.seek(0)
        text = log.read()
        print("".join(l + "\n" for l in text.splitlines() if l.startswith("flink ")), end="")
        if p.returncode != 0 or not os.path.exists(out):
            failures.append(f"Flink ({mode}) failed:\n{text[-3000:]}")
            continue
        with open(out) as f:
            got_flink = json.load(f)
        for q in runnable:
            r = got_flink.get(q)
            if isinstance(r, dict):
                if mode == "batch" and q in FLINK_BATCH_SKIPS:
                    print(f"{q}: not run on Flink in batch mode: {FLINK_BATCH_SKIPS[q]}")
                else:
                    failures.append(f"{q}: Flink ({mode}) failed: {r['error'][:500]}")
                    print(failures[-1])
                continue
            cols = COMPARED.get(q)
            want = collections.Counter()
            for values, n in r:
                key = tuple(canon(v) for v in values)
                want[tuple(key[i] for i in cols) if cols else key] += n
            have = collections.Counter({tuple(canon(as_text(v)) for v in k): n for k, n in results[q].items()})
            if want == have:
                print(f"{q}: {sum(want.values())} rows equal to Flink ({mode})")
            else:
                missing = list((want - have).items())[:3]
                extra = list((have - want).items())[:3]
                failures.append(f"{q}: Weir {sum(have.values())} rows, Flink ({mode}) {sum(want.values())}; "
                                f"missing e.g. {missing}; unexpected e.g. {extra}")
                print(failures[-1])
    return failures


if __name__ == "__main__":
    main()
