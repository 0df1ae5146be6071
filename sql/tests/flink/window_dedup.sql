-- Window deduplication: each product's first order per window.
-- compare: 0,1
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (product STRING, window_start TIMESTAMP(3), order_id BIGINT) WITH (${SINK});
INSERT INTO result
SELECT product, window_start, order_id FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end, product ORDER BY ts, order_id) AS rn FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '20' SECOND))) WHERE rn = 1;
