-- UNNEST keeps the orders' event time: quantity per tag per 30-second window, tags filtered.
-- modes: streaming batch
CREATE TABLE tagged (
  order_id BIGINT, qty INT, tags ARRAY<STRING>, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/tagged.json', 'format' = 'json');
CREATE VIEW per_tag AS
SELECT o.order_id, o.qty, t.tag, o.ts FROM tagged AS o CROSS JOIN UNNEST(o.tags) AS t (tag) WHERE t.tag <> 'bulk';
CREATE TABLE result (window_start TIMESTAMP(3), tag STRING, qty INT, n BIGINT) WITH (${SINK});
INSERT INTO result
SELECT window_start, tag, SUM(qty), COUNT(*)
FROM TABLE(TUMBLE(TABLE per_tag, DESCRIPTOR(ts), INTERVAL '30' SECOND))
GROUP BY window_start, window_end, tag;
