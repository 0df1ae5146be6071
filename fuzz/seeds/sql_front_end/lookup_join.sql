-- A lookup join against a bounded CSV table (read when the job is planned).
CREATE TABLE orders (
  order_id BIGINT,
  user_id INT,
  amount BIGINT,
  ts AS TO_TIMESTAMP_LTZ(1700000000000 + order_id * 250, 3),
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '6000',
  'rows-per-second' = '3000',
  'fields.order_id.kind' = 'sequence',
  'fields.order_id.start' = '0',
  'fields.order_id.end' = '5999',
  'fields.user_id.min' = '1',
  'fields.user_id.max' = '4',
  'fields.amount.min' = '1',
  'fields.amount.max' = '1000'
);
CREATE TABLE users (user_id INT, name STRING, tier STRING)
  WITH ('connector' = 'filesystem', 'path' = 'sql/tests/golden/data/users.csv', 'format' = 'csv', 'csv.header' = 'true');
CREATE TABLE result (order_id BIGINT, name STRING, tier STRING)
  WITH ('connector' = 'filesystem', 'path' = '/tmp/weir-fuzz-out', 'format' = 'csv');
INSERT INTO result
SELECT o.order_id, u.name, u.tier
FROM (SELECT *, PROCTIME() AS p FROM orders) o
JOIN users FOR SYSTEM_TIME AS OF o.p AS u ON o.user_id = u.user_id
WHERE MOD(o.order_id, 10) = 0;
