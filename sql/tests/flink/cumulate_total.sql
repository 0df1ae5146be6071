-- CUMULATE windows over all orders.
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (window_start TIMESTAMP(3), window_end TIMESTAMP(3), n BIGINT, q INT) WITH (${SINK});
INSERT INTO result
SELECT window_start, window_end, COUNT(*), SUM(qty) FROM TABLE(CUMULATE(TABLE orders, DESCRIPTOR(ts), INTERVAL '10' SECOND, INTERVAL '1' MINUTE)) GROUP BY window_start, window_end;
