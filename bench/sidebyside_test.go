package bench

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSideBySideColumnsPerServer(t *testing.T) {
	dev := &Result{Machine: Machine{Temporal: "dev server"}, Phases: []string{"schedule", "handoff"},
		Schedule: ScheduleRun{Events: 5, LatenessMaxS: 0.21},
		Handoff: HandoffRun{BridgeStartsPerSec: 438, RawStartsPerSec: 540, RawBeforePerSec: 559,
			BridgeServer: &ServerFigures{Starts: 10000, StartMeanMs: 570, HistoryStartMeanMs: 540, CreateMeanMs: 2, PersistenceCallsPerStart: 6.9, CPUMsPerStart: 2.92, StartsPerCore: 342},
			RawServer:    &ServerFigures{Starts: 5000, StartMeanMs: 444, PersistenceCallsPerStart: 6.8, CPUMsPerStart: 2.46, StartsPerCore: 407}}}
	cluster := &Result{Machine: Machine{Temporal: "TEMPORAL_ADDRESS 127.0.0.1:17233"}, Phases: []string{"schedule", "handoff"},
		Schedule: ScheduleRun{Events: 5, LatenessMaxS: 0.8},
		Handoff: HandoffRun{BridgeStartsPerSec: 120, RawStartsPerSec: 200,
			BridgeServer: &ServerFigures{Starts: 10000, StartMeanMs: 900, CPUMsPerStart: 9.5, PersistenceCallsPerStart: 12.1, StartsPerCore: 105}}}
	out := SideBySide([]string{"dev server", "cluster"}, []*Result{dev, cluster})
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Equal(t, "| run | figure | dev server | cluster |", lines[0])
	require.Contains(t, out, "| hand-off, bridge at 100 % failing | server CPU ms / start | 2.92 | 9.50 |")
	require.Contains(t, out, "| hand-off, bridge at 100 % failing | persistence calls / start | 6.9 | 12.1 |")
	require.Contains(t, out, "| hand-off, raw ExecuteWorkflow (first half) | server CPU ms / start | 2.46 | – |", "a run one server lacks")
	require.Contains(t, out, "| hand-off | bridge starts/s over raw | 0.81 | 0.60 |")
	require.Contains(t, out, "| schedule (default) | worst attempt late by, s | 0.21 | 0.80 |")
	for _, l := range lines {
		require.Equal(t, 5, strings.Count(l, "|"), "every line has both columns: %s", l)
	}
}
