-- OVER without PARTITION BY: a running total over every transfer.
CREATE TABLE transfers (
  transfer_id BIGINT, account INT, delta INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/transfers.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (transfer_id BIGINT, total INT, n BIGINT) WITH (${SINK});
INSERT INTO result
SELECT transfer_id, SUM(delta) OVER (ORDER BY ts RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW), COUNT(*) OVER (ORDER BY ts RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) FROM transfers;
