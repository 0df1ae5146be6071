-- MATCH_RECOGNIZE's MATCH_ROWTIME() is a time attribute: matches counted per 10-second window.
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (window_start TIMESTAMP(3), matches BIGINT, users BIGINT) WITH (${SINK});
CREATE VIEW matched AS
SELECT * FROM orders MATCH_RECOGNIZE (
  PARTITION BY user_id ORDER BY ts
  MEASURES MATCH_ROWTIME() AS mt
  PATTERN (A B)
  DEFINE A AS A.qty > 5, B AS B.qty < A.qty
);
INSERT INTO result
SELECT window_start, COUNT(*), COUNT(DISTINCT user_id) FROM TABLE(TUMBLE(TABLE matched, DESCRIPTOR(mt), INTERVAL '10' SECOND))
GROUP BY window_start, window_end;
