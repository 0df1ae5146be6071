-- MATCH_RECOGNIZE: a small order, one or two mid-sized ones, then a large one; matches never overlap; aggregates and MATCH_ROWTIME as measures.
-- modes: streaming batch
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (user_id INT, small_id BIGINT, mids BIGINT, mid_total DECIMAL(38, 2), mid_avg_qty INT, big DECIMAL(10, 2), at_ts TIMESTAMP(3)) WITH (${SINK});
INSERT INTO result
SELECT * FROM orders MATCH_RECOGNIZE (
  PARTITION BY user_id ORDER BY ts
  MEASURES A.order_id AS small_id, COUNT(B.amount) AS mids, SUM(B.amount) AS mid_total, AVG(B.qty) AS mid_avg_qty,
           LAST(C.amount) AS big, MATCH_ROWTIME() AS at_ts
  ONE ROW PER MATCH
  AFTER MATCH SKIP PAST LAST ROW
  PATTERN (A B{1,2} C)
  DEFINE A AS A.amount < 300, B AS B.amount >= 300 AND B.amount < 700, C AS C.amount >= 700
);
