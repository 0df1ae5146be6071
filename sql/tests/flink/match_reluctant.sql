-- MATCH_RECOGNIZE: a reluctant quantifier takes the shortest run before a large order; FIRST with an offset and MIN/MAX over the match.
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (user_id INT, a_id BIGINT, second_amount DECIMAL(10, 2), lowest INT, highest INT, c_id BIGINT) WITH (${SINK});
INSERT INTO result
SELECT * FROM orders MATCH_RECOGNIZE (
  PARTITION BY user_id ORDER BY ts
  MEASURES FIRST(A.order_id) AS a_id, FIRST(amount, 1) AS second_amount, MIN(qty) AS lowest, MAX(B.qty) AS highest, C.order_id AS c_id
  AFTER MATCH SKIP TO NEXT ROW
  PATTERN (A B*? C)
  DEFINE A AS A.qty <= 3, C AS C.amount > 800
);
