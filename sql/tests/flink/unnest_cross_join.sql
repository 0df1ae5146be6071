-- CROSS JOIN UNNEST: one row per tag of each order (orders without tags drop out, a NULL tag stays).
-- modes: streaming batch
CREATE TABLE tagged (
  order_id BIGINT, qty INT, tags ARRAY<STRING>, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/tagged.json', 'format' = 'json');
CREATE TABLE result (order_id BIGINT, tag STRING) WITH (${SINK});
INSERT INTO result
SELECT order_id, tag FROM tagged CROSS JOIN UNNEST(tags) AS t (tag);
