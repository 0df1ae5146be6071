-- error: option 'taskmanager.memory.managed.size' = '2 parsecs': expected a memory size such as '2gb' or '512 mb'
SET 'taskmanager.memory.managed.size' = '2 parsecs';
CREATE TABLE t (x BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '10');
CREATE TABLE out_t (x BIGINT) WITH ('connector' = 'filesystem', 'path' = '${OUT}', 'format' = 'csv');
INSERT INTO out_t SELECT x FROM t;
