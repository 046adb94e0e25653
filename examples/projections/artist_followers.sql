-- Read model of artist_followers.yaml.
CREATE TABLE IF NOT EXISTS artist_followers (
    user_id     text        NOT NULL,
    artist_id   text        NOT NULL,
    followed_at timestamptz NOT NULL,
    PRIMARY KEY (user_id, artist_id)
);
