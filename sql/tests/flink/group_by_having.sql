-- GROUP BY with HAVING (updating).
-- updating
CREATE TABLE transfers (
  transfer_id BIGINT, account INT, delta INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/transfers.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (account INT, balance INT) WITH (${SINK});
INSERT INTO result
SELECT account, SUM(delta) FROM transfers GROUP BY account HAVING SUM(delta) > 3000;
