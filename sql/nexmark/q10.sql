-- Query 10: log bids to the file system with day and minute columns.
-- Adjusted: Weir's filesystem sink does not partition into folders yet, so
-- the table has no PARTITIONED BY and no partition-commit options.
CREATE TABLE nexmark_q10 (
  auction  BIGINT,
  bidder  BIGINT,
  price  BIGINT,
  dateTime  TIMESTAMP(3),
  extra  VARCHAR,
  dt STRING,
  hm STRING
) WITH (
  'connector' = 'filesystem',
  'path' = '${OUTPUT_DIR}/q10',
  'format' = 'csv'
);

INSERT INTO nexmark_q10
SELECT auction, bidder, price, dateTime, extra, DATE_FORMAT(dateTime, 'yyyy-MM-dd'), DATE_FORMAT(dateTime, 'HH:mm')
FROM bid;
