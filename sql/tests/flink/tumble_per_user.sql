-- TUMBLE window aggregates per user.
-- modes: streaming batch
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (user_id INT, window_start TIMESTAMP(3), window_end TIMESTAMP(3), n BIGINT, total DECIMAL(38, 2), most INT) WITH (${SINK});
INSERT INTO result
SELECT user_id, window_start, window_end, COUNT(*), SUM(amount), MAX(qty) FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY user_id, window_start, window_end;
