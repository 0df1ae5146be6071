-- Every string function of Flink's documented list that Weir offers, over
-- ASCII and non-ASCII text. The expected rows are Flink 2.3's (PyFlink,
-- batch mode, the same functions over the same six rows read from a CSV
-- file): REGEXP_REPLACE replaces every match, CONCAT is NULL when an
-- argument is, INITCAP's words are runs of ASCII letters and digits, ASCII
-- is the first UTF-8 byte as a signed byte, SUBSTRING/SUBSTR count from 1.
CREATE TABLE ids (id BIGINT) WITH (
  'connector' = 'datagen',
  'rows-per-second' = '3',
  'fields.id.kind' = 'sequence',
  'fields.id.start' = '1',
  'fields.id.end' = '6'
);
CREATE VIEW words AS SELECT
  id,
  CASE id WHEN 1 THEN 'Hello World' WHEN 2 THEN '  padded  ' WHEN 3 THEN 'Weir streams data'
    WHEN 4 THEN 'ÉCOLE élève' WHEN 5 THEN 'aaa' ELSE 'xxmixedCASExx' END AS s,
  CASE id WHEN 1 THEN 'lo' WHEN 2 THEN 'd' WHEN 3 THEN 'ea' WHEN 4 THEN 'è' WHEN 5 THEN 'a'
    ELSE 'x' END AS t,
  CAST(CASE id WHEN 1 THEN 3 WHEN 2 THEN 5 WHEN 3 THEN 12 WHEN 4 THEN 7 WHEN 5 THEN 1
    ELSE 9 END AS INT) AS n
FROM ids;
CREATE TABLE string_results (
  id BIGINT, concat_op STRING, char_len INT, character_len INT, up STRING, low STRING,
  pos INT, trim_both STRING, trim_leading STRING, trim_trailing STRING, ltrimmed STRING, rtrimmed STRING,
  repeated STRING, regexp_replaced STRING, overlaid STRING, substring_for STRING, substring_from STRING,
  substr_fn STRING, substr_from STRING, replaced STRING, extracted STRING, initcapped STRING,
  concat_fn STRING, concat_ws_fn STRING, lpadded STRING, rpadded STRING, ascii_code INT, chr_fn STRING,
  left_fn STRING, right_fn STRING, instr_fn INT, reversed STRING, split_part STRING, concat_null STRING
) WITH ('connector' = 'filesystem', 'path' = '/tmp/weir-fuzz-out', 'format' = 'csv');
INSERT INTO string_results SELECT
  id,
  s || '|' || t,
  CHAR_LENGTH(s),
  CHARACTER_LENGTH(t),
  UPPER(s),
  LOWER(s),
  POSITION(t IN s),
  TRIM(BOTH ' ' FROM s),
  TRIM(LEADING 'x' FROM s),
  TRIM(TRAILING 'x' FROM s),
  LTRIM(s),
  RTRIM(s),
  REPEAT(t, 3),
  REGEXP_REPLACE(s, '[aeiou]', '_'),
  OVERLAY(s PLACING '##' FROM 2 FOR 3),
  SUBSTRING(s FROM 2 FOR 4),
  SUBSTRING(s FROM n),
  SUBSTR(s, 3, 2),
  SUBSTR(s, n) AS substr_n,
  REPLACE(s, t, '+'),
  REGEXP_EXTRACT(s, '([a-z]+)', 1),
  INITCAP(s),
  CONCAT(t, '-', s),
  CONCAT_WS('~', t, s, t),
  LPAD(t, 6, '*'),
  RPAD(t, 6, '*'),
  ASCII(s),
  CHR(n + 64),
  LEFT(s, 4),
  RIGHT(s, 4),
  INSTR(s, t),
  REVERSE(t),
  SPLIT_INDEX(s, ' ', 1),
  CONCAT(NULLIF(t, 'a'), s)
FROM words;
