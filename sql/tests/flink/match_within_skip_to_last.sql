-- MATCH_RECOGNIZE: WITHIN bounds a match's time span; AFTER MATCH SKIP TO LAST resumes at the last row of a variable.
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (product STRING, start_id BIGINT, last_b BIGINT, end_id BIGINT, total_qty INT) WITH (${SINK});
INSERT INTO result
SELECT * FROM orders MATCH_RECOGNIZE (
  PARTITION BY product ORDER BY ts
  MEASURES A.order_id AS start_id, LAST(B.order_id) AS last_b, C.order_id AS end_id, SUM(qty) AS total_qty
  AFTER MATCH SKIP TO LAST B
  PATTERN (A B+ C) WITHIN INTERVAL '3' SECOND
  DEFINE A AS A.qty >= 5, B AS B.qty < 5, C AS C.qty >= 8
);
