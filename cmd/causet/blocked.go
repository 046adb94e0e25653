package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/causet/projection-retry/parking"
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
	if c.Limit < 1 || c.Limit > 10_000 {
		return fmt.Errorf("--limit=%d is invalid: want 1 to 10000", c.Limit)
	}
	pool, err := documentsPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	keys, err := parking.NewStore(pool).List(ctx, c.Projection, c.Limit)
	if err != nil {
		return err
	}
	if c.JSON {
		enc := json.NewEncoder(blockedOut)
		for _, k := range keys {
			if err := enc.Encode(map[string]any{
				"topic": k.Topic, "partition": k.Partition, "projection": k.Projection, "forkId": k.ForkID, "entityId": k.EntityID,
				"head": k.Head, "headState": k.State, "parked": k.Parked, "blockedAt": k.BlockedAt.UTC(),
			}); err != nil {
				return err
			}
		}
		return nil
	}
	if len(keys) == 0 {
		fmt.Fprintln(blockedOut, "no blocked keys")
		return nil
	}
	tw := tabwriter.NewWriter(blockedOut, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROJECTION\tFORK\tENTITY\tPARKED\tHEAD\tHEAD STATE\tBLOCKED SINCE\tPARTITION")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s/%d\n", k.Projection, k.ForkID, k.EntityID, k.Parked, k.Head, k.State,
			k.BlockedAt.UTC().Format(time.RFC3339), k.Topic, k.Partition)
	}
	return tw.Flush()
}
