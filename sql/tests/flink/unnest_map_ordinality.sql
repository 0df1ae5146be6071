-- UNNEST of a MAP (key and value), and of an array WITH ORDINALITY under a LEFT JOIN … ON TRUE.
-- modes: streaming batch
CREATE TABLE baskets (
  basket_id BIGINT, items ARRAY<ROW<sku STRING, n INT>>, attrs MAP<STRING, INT>, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/baskets.json', 'format' = 'json');
CREATE TABLE result (basket_id BIGINT, k STRING, v INT, sku STRING, pos INT) WITH (${SINK});
INSERT INTO result
SELECT b.basket_id, a.k, a.v, CAST(NULL AS STRING) AS sku, CAST(NULL AS INT) AS pos
FROM baskets AS b CROSS JOIN UNNEST(b.attrs) AS a (k, v)
UNION ALL
SELECT b.basket_id, CAST(NULL AS STRING) AS k, CAST(NULL AS INT) AS v, i.sku, i.pos
FROM baskets AS b LEFT JOIN UNNEST(b.items) WITH ORDINALITY AS i (sku, n, pos) ON TRUE;
