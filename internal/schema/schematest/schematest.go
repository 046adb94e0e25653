package schematest

import (
	"bytes"
	"compress/gzip"
	"context"
	_ "embed"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

//go:embed testdata/before-migrations.sql.gz
var beforeMigrations []byte

//go:embed testdata/before-migrations-dlq.json
var beforeMigrationsDLQ []byte

// LoadBeforeMigrations loads the release's database into pool's (empty)
// database.
func LoadBeforeMigrations(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(beforeMigrations))
	require.NoError(t, err)
	dump, err := io.ReadAll(zr)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, string(bytes.TrimSpace(dump)))
	require.NoError(t, err)
	// The dump empties the session's search_path: this session goes.
	conn.Hijack().Close(ctx)
}

// DeadLetter is one dead letter of the release, as `causet dlq tail --json`
// printed it; R is the record type that reads it (dlq.Record), a parameter
// so that this leaf imports no package above it.
type DeadLetter[R any] struct {
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	Timestamp time.Time `json:"timestamp"`
	Key       string    `json:"key"`
	Record    R         `json:"record"`
}

// DeadLetters are the dead letters the release published with the
// database: one per example projection.
func DeadLetters[R any](t testing.TB) []DeadLetter[R] {
	t.Helper()
	var out []DeadLetter[R]
	require.NoError(t, json.Unmarshal(beforeMigrationsDLQ, &out))
	require.NotEmpty(t, out)
	return out
}
