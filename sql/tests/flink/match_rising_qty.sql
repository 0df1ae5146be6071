-- MATCH_RECOGNIZE: per user, a run of rising quantities and the drop after it (LAST with an offset in DEFINE; Flink's default AFTER MATCH SKIP TO NEXT ROW).
-- modes: streaming batch
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (user_id INT, first_order BIGINT, peak INT, drop_qty INT, n BIGINT) WITH (${SINK});
INSERT INTO result
SELECT * FROM orders MATCH_RECOGNIZE (
  PARTITION BY user_id ORDER BY ts
  MEASURES FIRST(S.order_id) AS first_order, LAST(U.qty) AS peak, D.qty AS drop_qty, COUNT(U.qty) AS n
  PATTERN (S U+ D)
  DEFINE U AS (LAST(U.qty, 1) IS NULL AND U.qty > S.qty) OR U.qty > LAST(U.qty, 1),
         D AS D.qty < LAST(U.qty)
);
