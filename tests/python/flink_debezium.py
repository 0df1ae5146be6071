"""Flink's side of the debezium-json test (tests/flink_formats.rs).

    python flink_debezium.py IN OUT [IN OUT ...]

Flink 2.3 (streaming, parallelism 1) reads the change events in each
folder IN as a `debezium-json` table, prints each row with its kind and
the pair's number (`0|+I|(1, 'a', ...)`), and writes the same changelog,
filtered by `weight > 4`, as `debezium-json` files into OUT.
"""
import sys

from pyflink.table import EnvironmentSettings, TableEnvironment

COLUMNS = "id INT, name STRING, weight DECIMAL(10,2)"
KINDS = {"INSERT": "+I", "UPDATE_BEFORE": "-U", "UPDATE_AFTER": "+U", "DELETE": "-D"}


def main(pairs):
    t = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    t.get_config().set("parallelism.default", "1")
    # The file sink commits its files at checkpoints (and at the end).
    t.get_config().set("execution.checkpointing.interval", "1 s")
    for i, (src, out) in enumerate(pairs):
        t.execute_sql(
            f"CREATE TABLE src{i} ({COLUMNS}) WITH "
            f"('connector'='filesystem','path'='{src}','format'='debezium-json')"
        )
        t.execute_sql(
            f"CREATE TABLE dst{i} ({COLUMNS}) WITH "
            f"('connector'='filesystem','path'='{out}','format'='debezium-json')"
        )
        with t.execute_sql(f"SELECT * FROM src{i}").collect() as rows:
            for r in rows:
                kind = KINDS[r.get_row_kind().name]
                print(f"{i}|{kind}|{tuple(r)!r}")
        t.execute_sql(f"INSERT INTO dst{i} SELECT * FROM src{i} WHERE weight > 4").wait()


if __name__ == "__main__":
    args = sys.argv[1:]
    main(list(zip(args[::2], args[1::2])))
