-- An unbounded GROUP BY on the disk backend ('rocksdb' names it, as in
-- Flink) with a managed-memory budget its state outgrows several times
-- (60 000 keys): partitions spill to local files and are read back. The
-- expected rows are the in-memory backend's; a second GROUP BY over the
-- first one's changelog keeps the output small (keys per order count).
SET 'state.backend.type' = 'rocksdb';
SET 'taskmanager.memory.managed.size' = '512kb';
CREATE TABLE orders (
  order_id BIGINT,
  customer BIGINT,
  amount BIGINT
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
  customers BIGINT,
  total BIGINT
) WITH ('connector' = 'filesystem', 'path' = '${OUT}', 'format' = 'csv', 'sink.changelog-mode' = 'retract');
INSERT INTO result
SELECT orders, COUNT(*), SUM(total)
FROM (SELECT customer, COUNT(*) AS orders, SUM(amount) AS total FROM orders GROUP BY customer)
GROUP BY orders;
