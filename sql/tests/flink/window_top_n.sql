-- Window Top-N: the three largest orders of each 10-second window (append-only).
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (window_start TIMESTAMP(3), order_id BIGINT, amount DECIMAL(10, 2), rn BIGINT) WITH (${SINK});
INSERT INTO result
SELECT window_start, order_id, amount, rn FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY amount DESC, order_id) AS rn FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '10' SECOND))) WHERE rn <= 3;
