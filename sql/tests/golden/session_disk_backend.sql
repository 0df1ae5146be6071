-- Session windows on the disk backend, with more open sessions than the
-- 512 KiB budget holds: 200 000 orders of 60 000 customers over 1 000 s of
-- event time, a session closing after 90 s without an order of its
-- customer. Partitions whose sessions are not due stay on disk at a
-- watermark. Sessions are counted by their number of orders (a GROUP BY
-- over their results). The expected rows are the in-memory backend's.
SET 'state.backend.type' = 'disk';
SET 'taskmanager.memory.managed.size' = '512kb';
CREATE TABLE orders (
  order_id BIGINT,
  customer BIGINT,
  amount BIGINT,
  ts AS TO_TIMESTAMP_LTZ(1700000000000 + order_id * 5, 3),
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '200000',
  'rows-per-second' = '40000',
  'fields.order_id.kind' = 'sequence',
  'fields.order_id.start' = '0',
  'fields.order_id.end' = '199999',
  'fields.customer.min' = '0',
  'fields.customer.max' = '59999',
  'fields.amount.min' = '1',
  'fields.amount.max' = '1000'
);
CREATE TABLE result (
  orders BIGINT,
  sessions BIGINT,
  total BIGINT
) WITH ('connector' = 'filesystem', 'path' = '${OUT}', 'format' = 'csv', 'sink.changelog-mode' = 'retract');
INSERT INTO result
SELECT orders, COUNT(*), SUM(total)
FROM (
  SELECT customer, window_start, window_end, COUNT(*) AS orders, SUM(amount) AS total
  FROM TABLE(SESSION(TABLE orders PARTITION BY customer, DESCRIPTOR(ts), INTERVAL '90' SECOND))
  GROUP BY customer, window_start, window_end
)
GROUP BY orders;
