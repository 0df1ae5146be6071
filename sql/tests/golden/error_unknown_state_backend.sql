-- error: option 'state.backend.type' = 'forst': expected 'hashmap' or 'disk' (or 'rocksdb')
SET 'state.backend.type' = 'forst';
CREATE TABLE t (x BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '10');
CREATE TABLE out_t (x BIGINT) WITH ('connector' = 'filesystem', 'path' = '${OUT}', 'format' = 'csv');
INSERT INTO out_t SELECT x FROM t;
