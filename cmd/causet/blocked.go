package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/causet/projection-retry/parking"
	"github.com/jackc/pgx/v5/pgxpool"
)

// blockedCmd lists the keys entity ordering holds (CAUSET_ORDERING=entity):
// each (projection, fork, entity) waiting behind a head, with the events
// parked behind it.
type blockedCmd struct {
	Projection string `help:"Only this projection."`
	Limit      int    `default:"100" help:"At most this many keys (those with the most parked events first), 1-10000."`
	JSON       bool   `name:"json" help:"Print JSON lines instead of a table."`
}

// blockedOut is where causet blocked prints (tests replace it).
var blockedOut io.Writer = os.Stdout

func (c blockedCmd) Run(ctx context.Context) error {
	return listing[parking.Listed]{
		out:   blockedOut,
		empty: "no blocked keys",
		read: func(ctx context.Context, pool *pgxpool.Pool, limit int) ([]parking.Listed, error) {
			return parking.NewStore(pool).List(ctx, c.Projection, limit)
		},
		json: func(k parking.Listed) any {
			return map[string]any{
				"topic": k.Topic, "partition": k.Partition, "projection": k.Projection, "forkId": k.ForkID, "entityId": k.EntityID,
				"head": k.Head, "headState": k.State, "parked": k.Parked, "blockedAt": k.BlockedAt.UTC(),
			}
		},
		head: "PROJECTION\tFORK\tENTITY\tPARKED\tHEAD\tHEAD STATE\tBLOCKED SINCE\tPARTITION",
		row: func(k parking.Listed) string {
			return fmt.Sprintf("%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s/%d", k.Projection, k.ForkID, k.EntityID, k.Parked, k.Head, k.State,
				k.BlockedAt.UTC().Format(time.RFC3339), k.Topic, k.Partition)
		},
	}.run(ctx, c.Limit, c.JSON)
}
