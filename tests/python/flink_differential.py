"""Flink's side of the differential SQL suite (cli/tests/flink_differential.rs).

    python flink_differential.py DATA WEIR_OUT CASE.sql...

Runs each case on Flink 2.3 (PyFlink, Java 17, parallelism 1), in every mode
its `-- modes:` line names (default: streaming), all in this one JVM, and
compares Flink's rows with the rows Weir wrote for the same case and mode
under WEIR_OUT/NAME.MODE/ (CSV files; a changelog's rows end with their
kind). Both sides are collapsed (+I/+U add a row, -U/-D take one away) and
compared as multisets after the same normalisation of each value (numbers
to 10 significant digits, timestamps without trailing zeros). A case's
`-- compare: 0,2` line limits the comparison to those columns (ties in
Top-N pick rows by arrival). A case not marked `-- updating` must be
append-only on Flink too.

Flink's side runs while Weir's runs are still going: the comparisons wait
for WEIR_OUT/.weir-done. Prints `ok NAME MODE (n rows)` or `FAIL NAME
MODE: …` per case and mode; exits 1 if any failed.
"""
import collections
import csv
import glob
import os
import re
import sys



def header(text, key):
    for line in text.splitlines():
        m = re.match(r"--\s*" + key + r":\s*(.*)$", line.strip())
        if m:
            return m.group(1).strip()
    return None


def statements(text):
    """The script's statements, split at `;` outside quotes and comments."""
    out, cur, quote, i = [], [], None, 0
    while i < len(text):
        c = text[i]
        if quote:
            cur.append(c)
            if c == quote:
                quote = None
        elif c in "'`\"":
            quote = c
            cur.append(c)
        elif text.startswith("--", i):
            j = text.find("\n", i)
            i = len(text) if j < 0 else j
            continue
        elif c == ";":
            s = "".join(cur).strip()
            if s:
                out.append(s)
            cur = []
        else:
            cur.append(c)
        i += 1
    s = "".join(cur).strip()
    if s:
        out.append(s)
    return out


NUMBER = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")
TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d)(:\d\d)?(\.\d+)?$")


def canon(s):
    if s is None or s == "":
        return "NULL"
    if s in ("TRUE", "FALSE", "True", "False", "true", "false"):
        return s.lower()
    if NUMBER.match(s):
        x = float(s)
        if x == int(x) and abs(x) < 1e15:
            return str(int(x))
        return "%.10g" % x
    m = TIMESTAMP.match(s)
    if m:
        frac = (m.group(4) or "").rstrip("0").rstrip(".")
        return f"{m.group(1)} {m.group(2)}{m.group(3) or ':00'}{frac}"
    return s


ROW = re.compile(r"([+-][IUD])\[(.*)\]$", re.S)


def collected(table, width):
    """The rows of `table` as (kind, [text or None]): drained on the Java
    side in one call and read back as one string (a py4j call per row made
    the suite take many minutes). Values print as Java's toString: fields
    containing ", " cannot be told apart, so a row of the wrong width fails
    the case instead of being compared wrongly."""
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    result = table.execute()
    rows = jvm.org.apache.flink.util.CollectionUtil.iteratorToList(result._j_table_result.collect())
    text = rows.toString()
    assert text.startswith("[") and text.endswith("]"), text[:200]
    body = text[1:-1]
    if not body:
        return []
    out = []
    for part in re.split(r"\], (?=[+-][IUD]\[)", body):
        if not part.endswith("]"):
            part += "]"
        m = ROW.match(part)
        if not m:
            raise ValueError(f"cannot read Flink's row {part[:200]!r}")
        fields = m.group(2).split(", ") if width > 1 else [m.group(2)]
        if len(fields) != width:
            raise ValueError(f"Flink's row {part[:200]!r} does not split into {width} fields")
        out.append((m.group(1), [None if f == "null" else f for f in fields]))
    return out


def pick(values, columns):
    return tuple(values[i] for i in columns) if columns else tuple(values)


def flink_rows(text, mode, columns, data):
    from pyflink.table import EnvironmentSettings, TableEnvironment

    settings = (
        EnvironmentSettings.in_batch_mode() if mode == "batch" else EnvironmentSettings.in_streaming_mode()
    )
    t = TableEnvironment.create(settings)
    t.get_config().set("parallelism.default", "1")
    rows = collections.Counter()
    updates = False
    for stmt in statements(text.replace("${DATA}", data)):
        upper = stmt.upper()
        m = re.match(r"^SET\s+'([^']+)'\s*=\s*'([^']*)'$", stmt, re.S | re.I)
        if m:
            t.get_config().set(m.group(1), m.group(2))
        elif upper.startswith("INSERT INTO RESULT"):
            table = t.sql_query(stmt[len("INSERT INTO RESULT") :])
            width = len(table.get_schema().get_field_names())
            for kind, values in collected(table, width):
                key = pick([canon(v) for v in values], columns)
                rows[key] += 1 if kind in ("+I", "+U") else -1
                updates = updates or kind != "+I"
        elif upper.startswith("CREATE TABLE RESULT"):
            continue
        else:
            t.execute_sql(stmt)
    return rows, updates


def weir_rows(folder, columns):
    rows = collections.Counter()
    files = sorted(p for p in glob.glob(os.path.join(folder, "**", "*.csv"), recursive=True)
                   if not os.path.basename(p).startswith("."))
    if not files:
        raise RuntimeError(f"Weir wrote no files under {folder}")
    for p in files:
        with open(p, newline="") as f:
            for fields in csv.reader(f):
                kind = "+I"
                if fields and fields[-1] in ("+I", "-U", "+U", "-D"):
                    kind = fields.pop()
                key = pick([canon(v) for v in fields], columns)
                rows[key] += 1 if kind in ("+I", "+U") else -1
    return rows


def clean(counter):
    return collections.Counter({k: v for k, v in counter.items() if v != 0})


def wait_for_weir(weir_out):
    """Flink's side runs while Weir's does: the test writes `.weir-done`
    into WEIR_OUT once every Weir run has ended."""
    import time

    marker = os.path.join(weir_out, ".weir-done")
    deadline = time.time() + 3600
    while not os.path.exists(marker):
        if time.time() > deadline:
            raise SystemExit("Weir's runs did not end within an hour")
        time.sleep(0.2)


def main():
    data, weir_out, cases = sys.argv[1], sys.argv[2], sys.argv[3:]
    failed = 0
    # Flink's rows of every case and mode first (one JVM), then, once Weir
    # has written its files, the comparisons.
    runs = []
    for case in cases:
        name = os.path.splitext(os.path.basename(case))[0]
        text = open(case).read()
        modes = (header(text, "modes") or "streaming").split()
        columns = [int(c) for c in (header(text, "compare") or "").replace(",", " ").split()]
        updating = header(text, "updating") is not None or re.search(r"^--\s*updating\b", text, re.M)
        for mode in modes:
            try:
                flink, updates = flink_rows(text, mode, columns, data)
                runs.append((name, mode, columns, updating, (clean(flink), updates), None))
            except Exception as e:  # a case that fails is reported, the rest still run
                runs.append((name, mode, columns, updating, None, e))
    wait_for_weir(weir_out)
    for name, mode, columns, updating, result, error in runs:
        try:
            if error is not None:
                raise error
            flink, updates = result
            weir = clean(weir_rows(os.path.join(weir_out, f"{name}.{mode}"), columns))
        except Exception as e:  # a case that fails is reported, the rest still run
            # Java's exceptions: the lines that say what failed.
            causes = [l.strip() for l in str(e).splitlines() if "Exception:" in l][:3]
            print(f"FAIL {name} {mode}: {type(e).__name__}: {' | '.join(causes) or str(e)[:2000]}", flush=True)
            failed += 1
            continue
        problems = []
        if updates and not updating and mode == "streaming":
            problems.append("Flink's result is updating but the case is not marked `-- updating`")
        negative = [k for k, v in flink.items() if v < 0]
        if negative:
            problems.append(f"Flink retracted rows it never sent, e.g. {negative[:3]}")
        if not flink:
            problems.append("Flink's result is empty: the case tests nothing")
        if flink != weir:
            missing = list((flink - weir).elements())
            extra = list((weir - flink).elements())
            problems.append(
                f"{sum(weir.values())} rows from Weir, {sum(flink.values())} from Flink; "
                f"missing from Weir e.g. {missing[:4]}; only in Weir e.g. {extra[:4]}"
            )
        if problems:
            failed += 1
            print(f"FAIL {name} {mode}: " + "; ".join(problems), flush=True)
        else:
            print(f"ok {name} {mode} ({sum(flink.values())} rows)", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
