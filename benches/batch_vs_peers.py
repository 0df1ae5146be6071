"""Batch-mode aggregation over Parquet: Weir against DataFusion and DuckDB,
same file, same query, same machine, same run.

    python benches/batch_vs_peers.py path/to/release/weir [ROWS]

The file: ROWS orders (default 20 M) with 100,000 users, written by DuckDB.
The queries:
- per user, COUNT(*), SUM, MIN, MAX and AVG of the amount. Weir runs it as
  a SQL script in batch mode (`weir run`, parallelism 2, the whole process
  timed: start, plan, read, aggregate, write the result); DuckDB and
  DataFusion run the same SELECT in-process with 2 threads.
- every order sorted by amount and id (`--sort`, SORT_ROWS of the orders,
  default 10 M), written to a Parquet file by each of the three (Weir's
  sort is one subtask: its runs are sorted on rayon's pool).
Each is run 3 times; the best time counts. Results are checked equal.
"""

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time

import duckdb
import pyarrow.parquet as pq

from peers import best
from peers import datafusion as load_datafusion

datafusion = load_datafusion()

QUERY = """SELECT user_id, COUNT(*) AS orders, SUM(amount) AS total, MIN(amount) AS smallest,
  MAX(amount) AS largest, AVG(amount) AS average FROM orders GROUP BY user_id"""



def main():
    args = sys.argv[1:]
    sort = "--sort" in args
    args = [a for a in args if a != "--sort"]
    weir = args[0]
    rows = int(args[1]) if len(args) > 1 else (10_000_000 if sort else 20_000_000)
    work = tempfile.mkdtemp(prefix="batch-bench-")
    # Its files (events and outputs, gigabytes at times) go when the script ends.
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    data = os.path.join(work, "orders.parquet")
    duckdb.sql(
        f"""COPY (SELECT i AS order_id, (hash(i) % 100000)::BIGINT AS user_id,
                   (100 + hash(i * 7) % 50000)::BIGINT AS amount
                 FROM range({rows}) t(i))
            TO '{data}' (FORMAT parquet, ROW_GROUP_SIZE 1000000)"""
    )
    size = os.path.getsize(data)
    if sort:
        return sort_case(weir, work, data, rows, size)

    def run_weir():
        out = os.path.join(work, f"weir-out-{time.time_ns()}")
        weir_run(
            weir,
            work,
            orders_table(data)
            + f"""CREATE TABLE result (user_id BIGINT, orders BIGINT, total BIGINT, smallest BIGINT,
  largest BIGINT, average DOUBLE)
  WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'parquet');
INSERT INTO result
SELECT user_id, COUNT(*), SUM(amount), MIN(amount), MAX(amount), AVG(CAST(amount AS DOUBLE))
FROM orders GROUP BY user_id;
""",
        )
        return out

    con, ctx = peers(data)

    def run_duckdb():
        return con.sql(QUERY).to_arrow_table()

    def run_datafusion():
        return ctx.sql(QUERY).collect()

    t_weir, out = best(run_weir)
    t_duck, duck = best(run_duckdb)
    t_df, df = best(run_datafusion)
    weir_rows = pq.read_table(out).num_rows
    df_rows = sum(b.num_rows for b in df)
    assert weir_rows == duck.num_rows == df_rows, (weir_rows, duck.num_rows, df_rows)
    check = con.execute(
        f"""SELECT count(*) FROM read_parquet('{out}/*.parquet') w
            JOIN ({QUERY}) d USING (user_id)
            WHERE w.orders = d.orders AND w.total = d.total AND w.smallest = d.smallest
              AND w.largest = d.largest AND abs(w.average - d.average) < 1e-6"""
    ).fetchone()[0]
    assert check == duck.num_rows, f"{check} of {duck.num_rows} groups agree"
    print(f"{rows} rows ({size / 1e6:.0f} MB Parquet), {duck.num_rows} groups, 2 threads each, best of 3")
    report(rows, t_weir, t_duck, t_df)


def report(rows, t_weir, t_duck, t_df):
    """Each engine's best time and rate, and Weir's ratios."""
    print(f"  Weir (batch mode, whole process) {t_weir:6.2f} s  {rows / t_weir / 1e6:7.1f} M rows/s")
    print(f"  DuckDB {duckdb.__version__:<10}              {t_duck:6.2f} s  {rows / t_duck / 1e6:7.1f} M rows/s")
    print(f"  DataFusion {datafusion.__version__:<10}          {t_df:6.2f} s  {rows / t_df / 1e6:7.1f} M rows/s")
    print(f"  Weir / DuckDB time {t_weir / t_duck:.2f}x, Weir / DataFusion time {t_weir / t_df:.2f}x")


def orders_table(data):
    """The start of a Weir script: batch mode, 2 subtasks, `data` as `orders`."""
    return f"""SET 'execution.runtime-mode' = 'batch';
SET 'parallelism.default' = '2';
CREATE TABLE orders (order_id BIGINT, user_id BIGINT, amount BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '{data}', 'format' = 'parquet');
"""


def weir_run(weir, work, text):
    """`weir run` of the SQL script `text`; its errors end the benchmark."""
    script = os.path.join(work, "job.sql")
    with open(script, "w") as f:
        f.write(text)
    p = subprocess.run([weir, "run", script], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(p.stderr)


def peers(data):
    """DuckDB and DataFusion, 2 threads each, with `data` as table `orders`."""
    con = duckdb.connect()
    con.execute("SET threads = 2")
    con.execute(f"CREATE VIEW orders AS SELECT * FROM read_parquet('{data}')")
    config = datafusion.SessionConfig().with_target_partitions(2)
    ctx = datafusion.SessionContext(config)
    ctx.register_parquet("orders", data)
    return con, ctx


SORT = "SELECT order_id, user_id, amount FROM orders ORDER BY amount, order_id"


def sort_case(weir, work, data, rows, size):
    """The orders sorted by amount and id, written to Parquet by each."""

    def run_weir():
        out = os.path.join(work, f"weir-sorted-{time.time_ns()}")
        weir_run(
            weir,
            work,
            orders_table(data)
            + f"""CREATE TABLE result (order_id BIGINT, user_id BIGINT, amount BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'parquet');
INSERT INTO result {SORT};
""",
        )
        return out

    con, ctx = peers(data)

    def run_duckdb():
        out = os.path.join(work, f"duckdb-sorted-{time.time_ns()}.parquet")
        con.execute(f"COPY ({SORT}) TO '{out}' (FORMAT parquet)")
        return out

    def run_datafusion():
        out = os.path.join(work, f"datafusion-sorted-{time.time_ns()}")
        ctx.sql(SORT).write_parquet(out)
        return out

    t_weir, out = best(run_weir)
    t_duck, duck = best(run_duckdb)
    t_df, _ = best(run_datafusion)
    # Weir's one sorted file holds the orders in DuckDB's order (the keys
    # are unique, so there is one order).
    files = sorted(f for f in os.listdir(out) if f.endswith(".parquet"))
    assert len(files) == 1, files
    weir_table = pq.read_table(os.path.join(out, files[0]))
    duck_table = pq.read_table(duck)
    for column in ("order_id", "user_id", "amount"):
        assert weir_table[column].equals(duck_table[column]), f"Weir's {column} differs from DuckDB's"
    print(f"{rows} rows ({size / 1e6:.0f} MB Parquet) sorted by amount and id, written to Parquet; 2 threads each, best of 3")
    report(rows, t_weir, t_duck, t_df)


if __name__ == "__main__":
    main()
