-- An expression the WHERE computes for every row and the SELECT again
-- (as Nexmark q21's REGEXP_EXTRACT): Weir computes it once, in front of
-- the filter; the rows must be Flink's.
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (order_id BIGINT, digit STRING, tag STRING) WITH (${SINK});
INSERT INTO result
SELECT order_id,
  CASE WHEN user_id < 10 THEN 'few' ELSE REGEXP_EXTRACT(product, 'p0([0-4])', 1) END,
  CONCAT(UPPER(product), '-', CAST(qty AS STRING))
FROM orders
WHERE REGEXP_EXTRACT(product, 'p0([0-4])', 1) IS NOT NULL OR user_id < 10
  AND CONCAT(UPPER(product), '-', CAST(qty AS STRING)) <> 'P04-9';
