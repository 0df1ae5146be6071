-- HOP windows per product.
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (product STRING, window_end TIMESTAMP(3), n BIGINT, least DECIMAL(10, 2)) WITH (${SINK});
INSERT INTO result
SELECT product, window_end, COUNT(*), MIN(amount) FROM TABLE(HOP(TABLE orders, DESCRIPTOR(ts), INTERVAL '5' SECOND, INTERVAL '20' SECOND)) GROUP BY product, window_start, window_end;
