"""TPC-H in batch mode: Weir against DuckDB and DataFusion, same Parquet
files, same queries, same machine, same run.

    python benches/tpch_vs_peers.py path/to/release/weir [SCALE] [QUERY ...]

The data: TPC-H's `lineitem` at scale factor SCALE (default 1: 6 M rows),
written once as Parquet by `tpchgen-cli` (PyPI, installed next to this
Python) into target/tpch-sfSCALE (or $WEIR_TPCH_DIR). The queries: q1 and q6
(the TPC-H queries over lineitem alone; the others need joins on any input
and come once batch joins do), as `sql/tpch/qN.sql`, the standard text.
Weir runs each as a SQL script in batch mode (`weir run --quiet`,
parallelism 2, the whole process timed: start, plan, read, aggregate, sort,
write the result as Parquet); DuckDB and DataFusion run the same SELECT
in-process with 2 threads. Each is run 3 times; the best time counts.
WEIR_TPCH_THREADS=1 runs Weir at parallelism 1 and the peers with one
thread (Weir's Parquet source then decodes row groups ahead on the idle
core: the process is not held to one core).
Every engine's rows are checked equal to DuckDB's, in order.
"""

import atexit
import decimal
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LINEITEM = """CREATE TABLE lineitem (
  l_orderkey BIGINT, l_partkey BIGINT, l_suppkey BIGINT, l_linenumber INT,
  l_quantity DECIMAL(15, 2), l_extendedprice DECIMAL(15, 2),
  l_discount DECIMAL(15, 2), l_tax DECIMAL(15, 2),
  l_returnflag STRING, l_linestatus STRING,
  l_shipdate DATE, l_commitdate DATE, l_receiptdate DATE,
  l_shipinstruct STRING, l_shipmode STRING, l_comment STRING
) WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'parquet');"""

# The result tables Weir writes (Flink needs a declared sink; the types are
# those Flink derives for the SELECT).
RESULTS = {
    "q1": """CREATE TABLE result (
  l_returnflag STRING, l_linestatus STRING, sum_qty DECIMAL(38, 2),
  sum_base_price DECIMAL(38, 2), sum_disc_price DECIMAL(38, 4),
  sum_charge DECIMAL(38, 6), avg_qty DECIMAL(38, 6), avg_price DECIMAL(38, 6),
  avg_disc DECIMAL(38, 6), count_order BIGINT
) WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'parquet');""",
    "q6": """CREATE TABLE result (revenue DECIMAL(38, 4))
  WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'parquet');""",
}



def generate(scale):
    folder = os.environ.get("WEIR_TPCH_DIR") or os.path.join(ROOT, "target", f"tpch-sf{scale}")
    path = os.path.join(folder, "lineitem.parquet")
    if not os.path.exists(path):
        tool = os.path.join(os.path.dirname(sys.executable), "tpchgen-cli")
        if not os.path.exists(tool):
            subprocess.run(
                [sys.executable, "-m", "pip", "install", "--quiet", "tpchgen-cli"], check=True
            )
        os.makedirs(folder, exist_ok=True)
        subprocess.run(
            [tool, "parquet", "-s", str(scale), "--tables=lineitem", f"--output-dir={folder}"],
            check=True,
        )
    return path


def same(a, b):
    """Values equal: exactly, or within a relative 1e-9 for averages (DuckDB
    gives DOUBLE where Weir writes the DECIMAL(38, 6) Flink derives)."""
    if isinstance(a, (float, decimal.Decimal)) or isinstance(b, (float, decimal.Decimal)):
        a, b = float(a), float(b)
        return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b)) or abs(a - b) < 1e-6
    return a == b


def check(name, engine, got, want):
    assert len(got) == len(want), f"{name}: {engine} gave {len(got)} rows, DuckDB {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        assert len(g) == len(w) and all(same(x, y) for x, y in zip(g, w)), (
            f"{name}: {engine} row {i} is {g}, DuckDB's {w}"
        )


def main():
    weir = sys.argv[1]
    scale = sys.argv[2] if len(sys.argv) > 2 else "1"
    queries = sys.argv[3:] or ["q1", "q6"]
    data = generate(scale)
    rows = pq.ParquetFile(data).metadata.num_rows
    work = tempfile.mkdtemp(prefix="tpch-bench-")
    # Its files (events and outputs, gigabytes at times) go when the script ends.
    atexit.register(shutil.rmtree, work, ignore_errors=True)

    con = duckdb.connect()
    threads = int(os.environ.get("WEIR_TPCH_THREADS", "2"))
    con.execute(f"SET threads = {threads}")
    con.execute(f"CREATE VIEW lineitem AS SELECT * FROM read_parquet('{data}')")
    config = datafusion.SessionConfig().with_target_partitions(threads)
    ctx = datafusion.SessionContext(config)
    ctx.register_parquet("lineitem", data)

    print(f"TPC-H SF {scale}: lineitem {rows} rows ({os.path.getsize(data) / 1e6:.0f} MB Parquet), "
          f"{threads} threads each, best of 3")
    print(f"{'query':<6} {'Weir s':>8} {'DuckDB s':>9} {'DataFusion s':>13} {'Weir/DuckDB':>12} {'Weir/DataFusion':>16}")
    for name in queries:
        with open(os.path.join(ROOT, "sql", "tpch", f"{name}.sql")) as f:
            select = f.read().strip().rstrip(";")

        def run_weir():
            out = os.path.join(work, f"{name}-{time.time_ns()}")
            script = os.path.join(work, f"{name}.sql")
            with open(script, "w") as f:
                f.write("SET 'execution.runtime-mode' = 'batch';\n")
                f.write(f"SET 'parallelism.default' = '{threads}';\n")
                f.write(LINEITEM.format(path=data) + "\n")
                f.write(RESULTS[name].format(out=out) + "\n")
                f.write(f"INSERT INTO result\n{select};\n")
            p = subprocess.run([weir, "run", "--quiet", script], capture_output=True, text=True)
            if p.returncode != 0:
                raise SystemExit(f"{name}: weir failed:\n{p.stderr}")
            return out

        t_weir, out = best(run_weir)
        t_duck, duck = best(lambda: con.sql(select).fetchall())
        t_df, df = best(lambda: ctx.sql(select).collect())
        files = sorted(os.path.join(out, f) for f in os.listdir(out) if f.endswith(".parquet"))
        weir_rows = [tuple(r.values()) for f in files for r in pq.read_table(f).to_pylist()]
        df_rows = [tuple(r.values()) for b in df for r in b.to_pylist()]
        check(name, "Weir", weir_rows, duck)
        check(name, "DataFusion", df_rows, duck)
        print(f"{name:<6} {t_weir:8.2f} {t_duck:9.2f} {t_df:13.2f} {t_weir / t_duck:11.2f}x {t_weir / t_df:15.2f}x")
    print(f"DuckDB {duckdb.__version__}, DataFusion {datafusion.__version__}")


if __name__ == "__main__":
    main()
