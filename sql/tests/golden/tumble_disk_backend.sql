-- Tumbling windows on the disk backend, each window's keys more than the
-- 512 KiB budget holds: 200 000 orders of 60 000 customers over 1 000 s of
-- event time in 200 s windows (about 30 000 customers a window). A window's
-- partitions are read back when it ends; the others stay on disk. Windows
-- are counted by customers' number of orders in them (a GROUP BY over
-- their results). The expected rows are the in-memory backend's.
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
  window_start TIMESTAMP(3),
  orders BIGINT,
  customers BIGINT,
  total BIGINT
) WITH ('connector' = 'filesystem', 'path' = '${OUT}', 'format' = 'csv', 'sink.changelog-mode' = 'retract');
INSERT INTO result
SELECT window_start, orders, COUNT(*), SUM(total)
FROM (
  SELECT customer, window_start, window_end, COUNT(*) AS orders, SUM(amount) AS total
  FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '200' SECOND))
  GROUP BY customer, window_start, window_end
)
GROUP BY window_start, orders;
