-- Aggregates with FILTER and DISTINCT in a window.
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (window_start TIMESTAMP(3), big BIGINT, users BIGINT) WITH (${SINK});
INSERT INTO result
SELECT window_start, COUNT(*) FILTER (WHERE amount > 500), COUNT(DISTINCT user_id) FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '30' SECOND)) GROUP BY window_start, window_end;
