-- A regular join, a Top-N and a GROUP BY on the disk backend, each with
-- more state than its 512 KiB budget: 200 000 orders joined with 60 000
-- customers (the join keeps both sides; twenty seconds of orders, so a
-- stop with a savepoint comes well before the end even when the first
-- checkpoint of a loaded test machine takes ten), the two largest orders per
-- customer (Top-N keeps two rows a key), counted per region and rank.
-- The expected rows are the in-memory backend's.
SET 'state.backend.type' = 'disk';
SET 'taskmanager.memory.managed.size' = '512kb';
CREATE TABLE orders (
  order_id BIGINT,
  customer BIGINT,
  amount BIGINT
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '200000',
  'rows-per-second' = '10000',
  'fields.order_id.kind' = 'sequence',
  'fields.order_id.start' = '0',
  'fields.order_id.end' = '199999',
  'fields.customer.min' = '0',
  'fields.customer.max' = '59999',
  'fields.amount.min' = '1',
  'fields.amount.max' = '1000'
);
CREATE TABLE customers (
  id BIGINT,
  region BIGINT
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '60000',
  'rows-per-second' = '20000',
  'fields.id.kind' = 'sequence',
  'fields.id.start' = '0',
  'fields.id.end' = '59999',
  'fields.region.min' = '0',
  'fields.region.max' = '9'
);
CREATE TABLE result (
  region BIGINT,
  rn BIGINT,
  orders BIGINT,
  total BIGINT
) WITH ('connector' = 'filesystem', 'path' = '${OUT}', 'format' = 'csv', 'sink.changelog-mode' = 'retract');
INSERT INTO result
SELECT region, rn, COUNT(*), SUM(amount)
FROM (
  SELECT region, customer, amount,
    ROW_NUMBER() OVER (PARTITION BY customer ORDER BY amount DESC) AS rn
  FROM orders o JOIN customers c ON o.customer = c.id
)
WHERE rn <= 2
GROUP BY region, rn;
