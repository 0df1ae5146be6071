-- error: which the query produces (updates come from TopN(keys [user_id], order [amount DESC], limit 2))
CREATE TABLE orders (user_id INT, amount BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '10');
CREATE TABLE result (user_id INT, amount BIGINT) WITH ('connector' = 'filesystem', 'path' = '${OUT}', 'format' = 'csv');
INSERT INTO result
SELECT user_id, amount FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY amount DESC) AS rn FROM orders)
WHERE rn <= 2;
