-- SESSION windows per user.
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (user_id INT, window_start TIMESTAMP(3), window_end TIMESTAMP(3), n BIGINT) WITH (${SINK});
INSERT INTO result
SELECT user_id, window_start, window_end, COUNT(*) FROM TABLE(SESSION(TABLE orders PARTITION BY user_id, DESCRIPTOR(ts), INTERVAL '8' SECOND)) GROUP BY user_id, window_start, window_end;
