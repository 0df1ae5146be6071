-- UNNEST of an ARRAY<ROW>: each row's fields become columns; then units per SKU (updating).
-- updating
-- modes: streaming batch
CREATE TABLE baskets (
  basket_id BIGINT, items ARRAY<ROW<sku STRING, n INT>>, attrs MAP<STRING, INT>, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/baskets.json', 'format' = 'json');
CREATE TABLE result (sku STRING, units INT, lines BIGINT) WITH (${SINK});
INSERT INTO result
SELECT i.sku, SUM(i.n), COUNT(*) FROM baskets AS b CROSS JOIN UNNEST(b.items) AS i (sku, n) GROUP BY i.sku;
