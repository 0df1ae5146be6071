-- LEFT JOIN UNNEST … ON TRUE keeps orders with no tags (NULL or empty array) once.
-- modes: streaming batch
CREATE TABLE tagged (
  order_id BIGINT, qty INT, tags ARRAY<STRING>, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/tagged.json', 'format' = 'json');
CREATE TABLE result (order_id BIGINT, tag STRING) WITH (${SINK});
INSERT INTO result
SELECT o.order_id, t.tag FROM tagged AS o LEFT JOIN UNNEST(o.tags) AS t (tag) ON TRUE;
