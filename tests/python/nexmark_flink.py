"""Flink 2.3's results of Nexmark queries, for nexmark_check.py.

    python nexmark_flink.py EVENTS_CSV OUT.json MODE QUERY...

Runs each query of sql/nexmark (its text as it is, the nexmark connector's
views replaced by CSV tables of the events Weir dumped: EVENTS_CSV/bid,
person, auction, each one file in event order, with the same 4-second
watermark delay) on PyFlink in MODE (streaming or batch), all in this one
JVM at parallelism 1, and writes the collapsed rows of each (+I/+U add a
row, -U/-D take one away) as JSON: {"q5": [[[values as text], count], ...]}.
A query Flink fails on is written as {"q5": {"error": "..."}}. Flink 2.3
reserves the word DATETIME, so the texts' bare `dateTime` is quoted for it.
"""
import collections
import itertools
import json
import os
import re
import sys
import time

from pyflink.java_gateway import get_gateway
from pyflink.table import EnvironmentSettings, TableEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from flink_differential import statements  # noqa: E402

NEXMARK = os.path.join(HERE, "..", "..", "sql", "nexmark")
SEP = "\u241f"
NULL = "\u2400"

TABLES = {
    "person": "id BIGINT, name VARCHAR, emailAddress VARCHAR, creditCard VARCHAR, city VARCHAR, "
    "state VARCHAR, `dateTime` TIMESTAMP(3), extra VARCHAR",
    "auction": "id BIGINT, itemName VARCHAR, description VARCHAR, initialBid BIGINT, reserve BIGINT, "
    "`dateTime` TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, category BIGINT, extra VARCHAR",
    "bid": "auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, "
    "`dateTime` TIMESTAMP(3), extra VARCHAR",
}


def ddl(events):
    return [
        f"CREATE TABLE {t} ({cols}, WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND) "
        f"WITH ('connector' = 'filesystem', 'path' = '{events}/{t}', 'format' = 'csv', "
        "'csv.null-literal' = '')"
        for t, cols in TABLES.items()
    ]


kinds_seen = []
VIEW_IDS = itertools.count()

# Queries whose result Flink's collect() sends as upserts (+U without -U)
# on a unique key: the key's columns. q9's Top-1 per auction is keyed by
# the auction id.
UPSERT_KEYS = {"q9": [0]}
ROW = re.compile(r"([+-][IUD])\[(.*)\]$", re.S)


def rows_of(t, query, upsert_key=None):
    """The query's rows, each drained as one text column (fields joined by
    SEP, NULL as its own mark) so that no value can split wrongly."""
    table = t.sql_query(query)
    names = table.get_schema().get_field_names()
    view = f"__q{next(VIEW_IDS)}"
    t.create_temporary_view(view, table)
    fields = ", ".join(f"COALESCE(CAST(`{n}` AS STRING), '{NULL}')" for n in names)
    text_table = t.sql_query(f"SELECT CONCAT_WS('{SEP}', {fields}) FROM {view}")
    jvm = get_gateway().jvm
    result = text_table.execute()
    it = result._j_table_result.collect()
    text = jvm.org.apache.flink.util.CollectionUtil.iteratorToList(it).toString()
    t.drop_temporary_view(view)
    body = text[1:-1]
    counts = collections.Counter()
    kinds = collections.Counter()
    latest = {}
    if not body:
        kinds_seen.append({})
        return counts
    parts = re.split(r"\], (?=[+-][IUD]\[)", body)
    for i, part in enumerate(parts):
        # The split took each row's closing bracket but the last one's
        # (a value may end in "]" itself: Nexmark's padding does).
        if i < len(parts) - 1:
            part += "]"
        m = ROW.match(part)
        if not m:
            raise ValueError(f"cannot read Flink's row {part[:200]!r}")
        values = tuple(None if v == NULL else v for v in m.group(2).split(SEP))
        if len(values) != len(names):
            raise ValueError(f"Flink's row {part[:200]!r} has {len(values)} fields, not {len(names)}")
        counts[values] += 1 if m.group(1) in ("+I", "+U") else -1
        kinds[m.group(1)] += 1
        if upsert_key is not None:
            key = tuple(values[i] for i in upsert_key)
            if m.group(1) == "-D":
                latest.pop(key, None)
            elif m.group(1) != "-U":
                latest[key] = values
    kinds_seen.append(dict(kinds))
    if kinds["+U"] and not kinds["-U"]:
        if upsert_key is None:
            raise ValueError(f"Flink sent upserts (+U without -U) and no key is declared: {dict(kinds)}")
        return collections.Counter(latest.values())
    return counts


def main():
    events, out, mode, queries = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    settings = (
        EnvironmentSettings.in_batch_mode() if mode == "batch" else EnvironmentSettings.in_streaming_mode()
    )
    t = TableEnvironment.create(settings)
    t.get_config().set("parallelism.default", "1")
    for stmt in ddl(events):
        t.execute_sql(stmt)
    results = {}
    for q in queries:
        started = time.time()
        try:
            # Flink 2.3 reserves DATETIME: the texts' bare dateTime is
            # quoted for it (the query is otherwise as written).
            text = re.sub(r"(?<![`\w])dateTime(?![`\w])", "`dateTime`",
                          open(os.path.join(NEXMARK, f"{q}.sql")).read())
            query = None
            for stmt in statements(text):
                m = re.match(r"^INSERT\s+INTO\s+\S+\s+(.*)$", stmt, re.S | re.I)
                if m:
                    query = m.group(1)
                elif not re.match(r"^CREATE\s+TABLE\s+nexmark_", stmt, re.I):
                    t.execute_sql(stmt)
            counts = rows_of(t, query, UPSERT_KEYS.get(q))
            results[q] = [[list(k), v] for k, v in counts.items() if v != 0]
            print(f"flink {mode} {q}: {sum(v for _, v in results[q])} rows {kinds_seen[-1]} "
                  f"in {time.time() - started:.1f} s", flush=True)
        except Exception as e:  # one query's failure is reported, the rest still run
            causes = [l.strip() for l in str(e).splitlines() if "Exception:" in l][:3]
            results[q] = {"error": " | ".join(causes) or str(e)[:1000]}
            print(f"flink {mode} {q}: error {results[q]['error']}", flush=True)
    with open(out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
