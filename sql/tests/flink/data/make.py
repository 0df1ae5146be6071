"""Writes the differential suite's input tables (CSV as Flink reads it: no
header, timestamps "YYYY-MM-DD HH:MM:SS.fff"). Deterministic: run it again
and the files are the same.

    python make.py
"""
import json
import os
import random
from datetime import datetime, timedelta, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
START = datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone.utc)
rnd = random.Random(20261202)


def ts(ms):
    t = START + timedelta(milliseconds=ms)
    return t.strftime("%Y-%m-%d %H:%M:%S.") + f"{t.microsecond // 1000:03d}"


def write(name, rows):
    with open(os.path.join(HERE, name), "w") as f:
        for r in rows:
            f.write(",".join("" if v is None else str(v) for v in r) + "\n")


PRODUCTS = [("p%02d" % i, ["books", "games", "tools", "food"][i % 4], 1.5 + i * 2.25) for i in range(12)]

orders = []
order_times = []
for i in range(3000):
    # Event time advances 200 ms an order, up to 3 s out of order.
    t = i * 200 + rnd.randint(0, 3000)
    user = None if rnd.random() < 0.01 else rnd.randint(1, 50)
    product = PRODUCTS[rnd.randrange(len(PRODUCTS))][0]
    amount = f"{rnd.randint(100, 99999) / 100:.2f}"
    qty = rnd.randint(1, 9)
    orders.append((i, user, product, amount, qty, ts(t)))
    order_times.append(t)
write("orders.csv", orders)

users = []
for u in range(1, 41):
    users.append((u, f"user{u}", ["Berlin", "Lisbon", "Oslo", "Quito", None][u % 5], u % 3))
write("users.csv", users)

shipments = []
sid = 0
for i, t in enumerate(order_times):
    if rnd.random() < 0.7:
        shipments.append((sid, i, ["dhl", "ups", "post"][rnd.randrange(3)], t + rnd.randint(500, 20000)))
        sid += 1
for _ in range(60):
    shipments.append((sid, 5000 + sid, "ups", rnd.randint(0, 600000)))
    sid += 1
shipments.sort(key=lambda r: r[3] + rnd.randint(0, 2000))
write("shipments.csv", [(a, b, c, ts(d)) for a, b, c, d in shipments])

write("products.csv", PRODUCTS)

# Account balance changes: a changelog-like history keyed by account.
changes = []
for i in range(400):
    changes.append((i, rnd.randint(1, 30), rnd.randint(-500, 1000), ts(i * 1500 + rnd.randint(0, 1000))))
write("transfers.csv", changes)

# Price changes per product over the orders' time: a versioned table (each
# row is its product's price from then on). Out of order by less than the
# tables' 5 s watermark delay, so no change is late; no two changes of a
# product share a time. p05 gets its first price only after 300 s.
price_rows = []
used = set()
for i in range(240):
    p = PRODUCTS[rnd.randrange(len(PRODUCTS))][0]
    t = rnd.randint(0, 620000)
    if (p == "p05" and t < 300000) or (p, t) in used:
        continue
    used.add((p, t))
    price_rows.append((p, f"{rnd.randint(100, 9999) / 100:.2f}", t))
for p, _, _ in PRODUCTS:
    if p != "p05":
        price_rows.append((p, "1.00", 0))
price_rows.sort(key=lambda r: r[2] + rnd.randint(0, 3000))
write("prices.csv", [(p, price, ts(t)) for p, price, t in price_rows])

# Orders with an array of tags (JSON lines): some empty, some NULL, one
# with a NULL element.
TAGS = ["gift", "rush", "fragile", "bulk", "promo"]
tagged = []
for i in range(400):
    r = rnd.random()
    if r < 0.1:
        tags = None
    elif r < 0.2:
        tags = []
    else:
        tags = rnd.sample(TAGS, rnd.randint(1, 3))
        if rnd.random() < 0.05:
            tags.append(None)
    tagged.append({"order_id": i, "qty": rnd.randint(1, 9), "tags": tags, "ts": ts(i * 500 + rnd.randint(0, 2000))})
with open(os.path.join(HERE, "tagged.json"), "w") as f:
    for t in tagged:
        f.write(json.dumps(t) + "\n")

# Baskets (JSON lines): an array of ROWs (sku, n) and a map of attributes,
# either NULL or empty now and then.
baskets = []
for i in range(300):
    r = rnd.random()
    items = None if r < 0.08 else [] if r < 0.15 else [
        {"sku": f"s{rnd.randint(0, 20)}", "n": None if rnd.random() < 0.05 else rnd.randint(1, 5)}
        for _ in range(rnd.randint(1, 4))
    ]
    r = rnd.random()
    attrs = None if r < 0.1 else {k: rnd.randint(0, 9) for k in rnd.sample(["color", "size", "gift", "fast"], rnd.randint(0, 3))}
    baskets.append({"basket_id": i, "items": items, "attrs": attrs, "ts": ts(i * 700 + rnd.randint(0, 2000))})
with open(os.path.join(HERE, "baskets.json"), "w") as f:
    for b in baskets:
        f.write(json.dumps(b) + "\n")
