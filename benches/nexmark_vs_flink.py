"""Nexmark on Weir and on Flink 2.3, side by side: same events, same query
texts, parallelism 1, both pinned to one core, in one run.

    python benches/nexmark_vs_flink.py path/to/release/weir path/to/pyflink/python \
        [--events N] [--runs R] [--cpu C] [q0 q1 ...]

Flink's nexmark jar cannot be built here, so Weir's `nexmark` generator
(which follows nexmark-flink's Java generator field by field, see README)
writes N events (default 1,000,000; event time at 10 M events/s as the
Nexmark suite sets it) once as CSV: one folder each for person, auction and
bid (Flink's PyPI build reads CSV, not Parquet). Then, per query:

- Flink: the query's text from sql/nexmark over CSV tables of those files
  (the same 4 s watermark delay as the nexmark views; `dateTime` quoted as
  Flink 2.3 needs), run by PyFlink at parallelism 1 in one JVM for all
  queries, pinned with `taskset`. Its time is the job's, from submitting the
  INSERT to its end: its JVM start and planning setup are left out.
- Weir (csv): the same text over the same files, `weir run --quiet` pinned
  to the same core. Its time is the whole process: start, plan, CSV
  parsing, work, exit.
- Weir (gen): the query as written over sql/nexmark/ddl.sql, Weir's events
  generated in the task (Flink's equivalent would be the nexmark jar's
  source, which this Flink lacks; `datagen` cannot make Nexmark's events).

Each engine runs each query R times (default 2); the best time counts.
Rates are Nexmark events per second (all N events, whatever the query reads),
so the ratio is the ratio of times. Flink's runs share one JVM, so later
queries run on a warmed-up JIT, which favours Flink.
"""

import argparse
import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
from flink_differential import statements  # noqa: E402  (split at `;` outside quotes and comments)

NEXMARK = os.path.join(HERE, "..", "sql", "nexmark")
TPS = "10000000"

TABLES = {
    "person": "id BIGINT, name STRING, emailAddress STRING, creditCard STRING, city STRING, "
    "state STRING, `dateTime` TIMESTAMP(3), extra STRING",
    "auction": "id BIGINT, itemName STRING, description STRING, initialBid BIGINT, reserve BIGINT, "
    "`dateTime` TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, category BIGINT, extra STRING",
    "bid": "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, "
    "`dateTime` TIMESTAMP(3), extra STRING",
}

# Every query both engines can run: q6 Flink refuses, q10 writes
# partitioned files (a different job on each), q12 is in processing time,
# q13 needs a lookup source and q14 the nexmark jar's UDF, neither in this
# Flink.
QUERIES = [f"q{n}" for n in (0, 1, 2, 3, 4, 5, 7, 8, 9, 11, 15, 16, 17, 18, 19, 20, 21, 22, 23)]


def nexmark_ddl(events):
    text = open(os.path.join(NEXMARK, "ddl.sql")).read()
    return text.replace("${TPS}", TPS).replace("${EVENTS_NUM}", str(events))


def csv_tables(data):
    return "".join(
        f"CREATE TABLE {t} ({cols}, WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND) "
        f"WITH ('connector' = 'filesystem', 'path' = '{data}/{t}', 'format' = 'csv', "
        "'csv.null-literal' = '');\n"
        for t, cols in TABLES.items()
    )


def query_text(q):
    """The query as written, `dateTime` quoted (Flink 2.3 reserves it)."""
    text = open(os.path.join(NEXMARK, f"{q}.sql")).read()
    return re.sub(r"(?<![`\w])dateTime(?![`\w])", "`dateTime`", text)


def write_events(weir, events, data, work):
    script = os.path.join(work, "dump.sql")
    with open(script, "w") as f:
        f.write("SET 'parallelism.default' = '1';\n" + nexmark_ddl(events))
        for t, cols in TABLES.items():
            f.write(
                f"CREATE TABLE {t}_out ({cols}) WITH ('connector' = 'filesystem', "
                f"'path' = '{data}/{t}', 'format' = 'csv', 'csv.null-literal' = '');\n"
            )
        f.write("EXECUTE STATEMENT SET BEGIN\n")
        for t in TABLES:
            f.write(f"INSERT INTO {t}_out SELECT * FROM {t};\n")
        f.write("END;\n")
    subprocess.run([weir, "run", "--quiet", script], check=True, capture_output=True)


def weir_time(weir, cpu, text, work):
    script = os.path.join(work, "weir-job.sql")
    with open(script, "w") as f:
        f.write("SET 'parallelism.default' = '1';\n" + text)
    start = time.perf_counter()
    subprocess.run(
        ["taskset", "-c", str(cpu), weir, "run", "--quiet", script], check=True, capture_output=True
    )
    return time.perf_counter() - start


# One JVM for every Flink query: reads {"jobs": {q: [statement, ...]}}
# and prints one JSON line per query with its best job time (the last
# statement, the INSERT, is the job).
FLINK_DRIVER = r"""
import json, sys, time
from pyflink.table import EnvironmentSettings, TableEnvironment
spec = json.load(open(sys.argv[1]))
for q, text in spec["jobs"].items():
    best = None
    for _ in range(spec["runs"]):
        t = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
        t.get_config().set("parallelism.default", "1")
        statements = text
        for s in statements[:-1]:
            t.execute_sql(s)
        start = time.perf_counter()
        t.execute_sql(statements[-1]).wait()
        took = time.perf_counter() - start
        best = took if best is None else min(best, took)
    print(json.dumps({"query": q, "seconds": best}), flush=True)
"""


def flink_times(python, cpu, data, queries, runs, work):
    spec = os.path.join(work, "flink-jobs.json")
    with open(spec, "w") as f:
        jobs = {q: statements(csv_tables(data) + query_text(q)) for q in queries}
        json.dump({"jobs": jobs, "runs": runs}, f)
    driver = os.path.join(work, "flink_driver.py")
    with open(driver, "w") as f:
        f.write(FLINK_DRIVER)
    proc = subprocess.Popen(
        ["taskset", "-c", str(cpu), python, driver, spec], stdout=subprocess.PIPE, text=True
    )
    for line in proc.stdout:
        if line.startswith("{"):
            r = json.loads(line)
            print(f"  (Flink {r['query']}: {r['seconds']:.2f} s)", file=sys.stderr, flush=True)
            yield r["query"], r["seconds"]
    if proc.wait() != 0:
        sys.exit(f"the Flink driver failed (exit {proc.returncode})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("weir")
    ap.add_argument("pyflink_python")
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--cpu", type=int, default=0)
    ap.add_argument("queries", nargs="*", default=QUERIES)
    a = ap.parse_intermixed_args()
    work = tempfile.mkdtemp(prefix="nexmark-vs-flink-")
    # Its files (events and outputs, gigabytes at times) go when the script ends.
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    data = os.path.join(work, "events")
    write_events(a.weir, a.events, data, work)
    size = sum(
        os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(data) for f in files
    )
    print(f"{a.events:,} Nexmark events as CSV ({size / 1e6:.0f} MB), parallelism 1, CPU {a.cpu}, "
          f"best of {a.runs}; events/s over all {a.events:,} events")
    print(f"{'query':<6} {'Flink ev/s':>12} {'Weir csv ev/s':>14} {'Weir/Flink':>10} {'Weir gen ev/s':>14}")
    n = a.events
    # Flink's runs first, all of them, so the engines never share the core.
    flink_runs = list(flink_times(a.pyflink_python, a.cpu, data, a.queries, a.runs, work))
    for q, flink in flink_runs:
        text = query_text(q)
        csv = min(weir_time(a.weir, a.cpu, csv_tables(data) + text, work) for _ in range(a.runs))
        gen = min(weir_time(a.weir, a.cpu, nexmark_ddl(n) + text, work) for _ in range(a.runs))
        print(f"{q:<6} {n / flink:>12,.0f} {n / csv:>14,.0f} {flink / csv:>9.1f}x {n / gen:>14,.0f}",
              flush=True)


if __name__ == "__main__":
    main()
