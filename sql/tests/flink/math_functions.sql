-- Arithmetic and math functions.
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (order_id BIGINT, m INT, a BIGINT, f DOUBLE) WITH (${SINK});
INSERT INTO result
SELECT order_id, MOD(qty, 4), ABS(order_id - 1500), FLOOR(CAST(amount AS DOUBLE) / 7) FROM orders WHERE order_id < 400;
