package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"
)

// maxListLimit bounds --limit of the listing commands.
const maxListLimit = 10_000

// listing is a command that reads at most limit rows from the database and
// prints them as a table, or as JSON lines with --json.
type listing[T any] struct {
	out   io.Writer
	empty string // printed instead of an empty table
	read  func(ctx context.Context, pool *pgxpool.Pool, limit int) ([]T, error)
	json  func(T) any // the JSON line of a row
	head  string      // the table's header, tab-separated
	row   func(T) string
}

func (l listing[T]) run(ctx context.Context, limit int, jsonLines bool) error {
	if limit < 1 || limit > maxListLimit {
		return fmt.Errorf("--limit=%d is invalid: want 1 to %d", limit, maxListLimit)
	}
	pool, err := documentsPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	rows, err := l.read(ctx, pool, limit)
	if err != nil {
		return err
	}
	if jsonLines {
		enc := json.NewEncoder(l.out)
		for _, r := range rows {
			if err := enc.Encode(l.json(r)); err != nil {
				return err
			}
		}
		return nil
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintln(l.out, l.empty)
		return err
	}
	tw := tabwriter.NewWriter(l.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, l.head)
	for _, r := range rows {
		fmt.Fprintln(tw, l.row(r))
	}
	return tw.Flush()
}
