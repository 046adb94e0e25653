package testenv

import (
	"context"
	"os"
	"testing"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"
)

// WriteHistory writes the history of workflow id's run runID (its latest
// when "") to path as
// JSON, the form the SDK's workflow replayer reads: the replay tests of
// package workflows replay such recorded histories.
func WriteHistory(t testing.TB, ctx context.Context, c client.Client, id, runID, path string) {
	t.Helper()
	var events []*historypb.HistoryEvent
	it := c.GetWorkflowHistory(ctx, id, runID, false, 0)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatalf("testenv: history of %s: %v", id, err)
		}
		events = append(events, e)
	}
	b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(&historypb.History{Events: events})
	if err != nil {
		t.Fatalf("testenv: encode the history of %s: %v", id, err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}
