-- error: table 'src': unknown connector 'datagne' (did you mean 'datagen'?)
CREATE TABLE src (a BIGINT) WITH ('connector' = 'datagne');
