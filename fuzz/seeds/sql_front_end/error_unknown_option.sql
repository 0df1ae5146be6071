-- error: unknown option 'parallelism.defualt' (did you mean 'parallelism.default'?)
SET 'parallelism.defualt' = '2';
