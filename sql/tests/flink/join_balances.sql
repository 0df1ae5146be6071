-- Accounts with a positive balance joined with their latest transfer.
-- updating
CREATE TABLE transfers (
  transfer_id BIGINT, account INT, delta INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/transfers.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (account INT, balance INT, last_id BIGINT) WITH (${SINK});
INSERT INTO result
SELECT b.account, b.balance, l.m FROM (SELECT account, SUM(delta) AS balance FROM transfers GROUP BY account) b JOIN (SELECT account, MAX(transfer_id) AS m FROM transfers GROUP BY account) l ON b.account = l.account WHERE b.balance > 0;
