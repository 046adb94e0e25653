-- Read model of artist_stats.yaml.
CREATE TABLE IF NOT EXISTS artist_stats (
    artist_id     text   PRIMARY KEY,
    plays         bigint NOT NULL DEFAULT 0,
    plays_per_day bigint
);
