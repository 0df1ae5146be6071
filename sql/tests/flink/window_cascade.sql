-- A window aggregate over a window aggregate's rows (window_time).
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE VIEW per_user AS SELECT user_id, window_time AS t, COUNT(*) AS n
  FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY user_id, window_start, window_end, window_time;
CREATE TABLE result (window_start TIMESTAMP(3), users BIGINT, orders BIGINT) WITH (${SINK});
INSERT INTO result
SELECT window_start, COUNT(*), SUM(n) FROM TABLE(TUMBLE(TABLE per_user, DESCRIPTOR(t), INTERVAL '1' MINUTE)) GROUP BY window_start, window_end;
