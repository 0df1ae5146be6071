"""Single-threaded DuckDB and DataFusion on the window aggregation of Weir's
pipeline (c): per key and 10-second tumbling window, count and sum."""
import glob
import sys
import time

import duckdb
import pyarrow.parquet as pq
from datafusion import SessionConfig, SessionContext

data = sys.argv[1]
files = sorted(glob.glob(f"{data}/part-*.parquet"))
rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
print(f"{rows} rows in {len(files)} files")


def report(name, run):
    best = None
    for _ in range(3):
        t = time.perf_counter()
        out = run()
        elapsed = time.perf_counter() - t
        best = elapsed if best is None else min(best, elapsed)
    print(f"{name:<12} {out:>7} groups  {best:7.3f} s  {rows / best / 1e6:7.1f} M rows/s (1 thread, best of 3)")


con = duckdb.connect()
con.execute("SET threads TO 1")
duck_sql = f"""
SELECT key, epoch_ms(ts) // 10000 AS w, count(*) AS cnt, sum(price) AS total
FROM read_parquet('{data}/part-*.parquet') GROUP BY key, w
"""
report("duckdb", lambda: len(con.execute(duck_sql).fetchall()))

ctx = SessionContext(SessionConfig().with_target_partitions(1))
ctx.register_parquet("events", data)
df_sql = """
SELECT key, CAST(ts AS BIGINT) / 10000 AS w, count(*) AS cnt, sum(price) AS total
FROM events GROUP BY key, CAST(ts AS BIGINT) / 10000
"""
report("datafusion", lambda: sum(b.num_rows for b in ctx.sql(df_sql).collect()))
