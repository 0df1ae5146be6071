-- Time functions on a TIMESTAMP(3) column.
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (order_id BIGINT, h BIGINT, m BIGINT, d STRING) WITH (${SINK});
INSERT INTO result
SELECT order_id, EXTRACT(HOUR FROM ts), EXTRACT(MINUTE FROM ts), DATE_FORMAT(ts, 'yyyy-MM-dd HH:mm') FROM orders WHERE MOD(order_id, 10) = 0;
