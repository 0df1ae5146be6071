-- error: option 'base-time' = '2026-13-45 99:99:99': expected timestamp
-- Month 13, day 45, hour 99 do not exist; they once rolled over into 2027.
CREATE TABLE bid (auction BIGINT) WITH (
  'connector' = 'nexmark',
  'events.num' = '100',
  'base-time' = '2026-13-45 99:99:99'
);
CREATE TABLE result (auction BIGINT) WITH ('connector' = 'filesystem', 'path' = '${OUT}', 'format' = 'csv');
INSERT INTO result SELECT auction FROM bid;
