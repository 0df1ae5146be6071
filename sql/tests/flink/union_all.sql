-- UNION ALL of two filtered selections.
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (order_id BIGINT, tag STRING) WITH (${SINK});
INSERT INTO result
SELECT order_id, 'big' FROM orders WHERE amount > 900 UNION ALL SELECT order_id, 'many' FROM orders WHERE qty >= 8;
