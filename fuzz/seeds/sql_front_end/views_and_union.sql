-- Views (one with column names) and UNION ALL.
CREATE TABLE orders (
  order_id BIGINT,
  user_id INT,
  amount BIGINT,
  tag STRING,
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
  'fields.amount.max' = '1000',
  'fields.tag.length' = '6'
);
CREATE VIEW small_orders (id, cents) AS SELECT order_id, amount FROM orders WHERE amount < 15;
CREATE VIEW large_orders AS SELECT order_id AS id, amount AS cents FROM orders WHERE amount > 985;
CREATE TABLE result (kind STRING, id BIGINT, cents BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '/tmp/weir-fuzz-out', 'format' = 'csv');
INSERT INTO result
SELECT 'small', id, cents FROM small_orders
UNION ALL
SELECT 'large', id, cents FROM large_orders;
