"""A regular join and an OVER aggregation on Nexmark events: Weir against
Flink 2.3, same files, same query, same core, same run.

    python benches/join_over_vs_flink.py path/to/release/weir path/to/pyflink/python [EVENTS]

Weir's Nexmark generator writes EVENTS events (default 2,000,000) once, as
CSV (Flink's PyPI build reads CSV, not Parquet). Both engines then read the
files at parallelism 1, pinned to CPU 0 (`taskset -c 0`), into a blackhole:

- join: every bid with its auction (a regular inner join on plain keys,
  Nexmark q20 without its filter);
- over: every bid with the average price of its auction's last 10 bids
  (`AVG(price) OVER (PARTITION BY auction ORDER BY dateTime ROWS BETWEEN 10
  PRECEDING AND CURRENT ROW)`, Nexmark q6's window over plain bids).

Weir's time is its whole process (start, plan, read, work, exit); Flink's is
the job's time from submission to its end, its JVM start-up left out. Each
query runs twice per engine; the better time counts. Prints input events
per second for each and Weir's ratio.
"""

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NEXMARK = os.path.join(HERE, "..", "sql", "nexmark")

COLUMNS = {
    "bid": "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, "
    "`dateTime` TIMESTAMP(3), extra STRING",
    "auction": "id BIGINT, itemName STRING, description STRING, initialBid BIGINT, reserve BIGINT, "
    "`dateTime` TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, category BIGINT, extra STRING",
}

QUERIES = {
    "join": (
        "bid auction",
        "CREATE TABLE out_t (auction BIGINT, price BIGINT, itemName STRING, category BIGINT) "
        "WITH ('connector' = 'blackhole');\n"
        "INSERT INTO out_t SELECT B.auction, B.price, A.itemName, A.category "
        "FROM bid B JOIN auction A ON B.auction = A.id;",
    ),
    "over": (
        "bid",
        "CREATE TABLE out_t (auction BIGINT, price BIGINT, avg_price BIGINT) "
        "WITH ('connector' = 'blackhole');\n"
        "INSERT INTO out_t SELECT auction, price, AVG(price) OVER (PARTITION BY auction "
        "ORDER BY `dateTime` ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) FROM bid;",
    ),
}


def ddl(table, data):
    return (
        f"CREATE TABLE {table} ({COLUMNS[table]}, WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND) "
        f"WITH ('connector' = 'filesystem', 'path' = '{data}/{table}', 'format' = 'csv');\n"
    )


def write_events(weir, events, data, work):
    text = open(os.path.join(NEXMARK, "ddl.sql")).read()
    text = text.replace("${TPS}", "2000").replace("${EVENTS_NUM}", str(events))
    script = os.path.join(work, "dump.sql")
    with open(script, "w") as f:
        f.write("SET 'parallelism.default' = '1';\n" + text)
        for t in ("bid", "auction"):
            f.write(
                f"CREATE TABLE {t}_out ({COLUMNS[t]}) WITH ('connector' = 'filesystem', "
                f"'path' = '{data}/{t}', 'format' = 'csv');\n"
            )
        f.write("EXECUTE STATEMENT SET BEGIN\n")
        f.write("INSERT INTO bid_out SELECT * FROM bid;\nINSERT INTO auction_out SELECT * FROM auction;\nEND;\n")
    subprocess.run([weir, "run", script], check=True, capture_output=True)


def count_rows(folder):
    n = 0
    for name in os.listdir(folder):
        if not name.startswith("."):
            with open(os.path.join(folder, name), "rb") as f:
                n += sum(1 for _ in f)
    return n


def weir_time(weir, script_text, work):
    script = os.path.join(work, "weir-job.sql")
    with open(script, "w") as f:
        f.write("SET 'parallelism.default' = '1';\n" + script_text)
    start = time.perf_counter()
    subprocess.run(["taskset", "-c", "0", weir, "run", script], check=True, capture_output=True)
    return time.perf_counter() - start


FLINK_JOB = r"""
import sys, time
from pyflink.table import EnvironmentSettings, TableEnvironment
t = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
t.get_config().set("parallelism.default", "1")
statements = [s.strip() for s in open(sys.argv[1]).read().split(";") if s.strip()]
for s in statements[:-1]:
    t.execute_sql(s)
start = time.perf_counter()
t.execute_sql(statements[-1]).wait()
print(time.perf_counter() - start)
"""


def flink_time(python, script_text, work):
    script = os.path.join(work, "flink-job.sql")
    with open(script, "w") as f:
        f.write(script_text)
    driver = os.path.join(work, "flink_job.py")
    with open(driver, "w") as f:
        f.write(FLINK_JOB)
    o = subprocess.run(
        ["taskset", "-c", "0", python, driver, script], check=True, capture_output=True, text=True
    )
    return float(o.stdout.strip().splitlines()[-1])


def main():
    weir, python = sys.argv[1], sys.argv[2]
    events = int(sys.argv[3]) if len(sys.argv) > 3 else 2_000_000
    work = tempfile.mkdtemp(prefix="join-over-bench-")
    # Its files (events and outputs, gigabytes at times) go when the script ends.
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    data = os.path.join(work, "events")
    write_events(weir, events, data, work)
    sizes = {t: count_rows(os.path.join(data, t)) for t in ("bid", "auction")}
    print(f"{sizes['bid']} bids, {sizes['auction']} auctions (of {events} Nexmark events), CSV")
    print(f"{'query':<6} {'Flink ev/s':>12} {'Weir ev/s':>12} {'Weir/Flink':>10}")
    for name, (tables, query) in QUERIES.items():
        text = "".join(ddl(t, data) for t in tables.split()) + query
        n = sum(sizes[t] for t in tables.split())
        flink = min(flink_time(python, text, work) for _ in range(2))
        ours = min(weir_time(weir, text, work) for _ in range(2))
        print(f"{name:<6} {n / flink:>12,.0f} {n / ours:>12,.0f} {flink / ours:>9.1f}x")


if __name__ == "__main__":
    main()
