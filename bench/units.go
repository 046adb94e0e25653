package bench

import (
	"fmt"
	"slices"
	"strings"
)

// UnitCosts are the per-unit figures docs/CAPACITY.md sizes a deployment
// from, taken from this run's measurements (zero where the phase did not
// run or the figure was not measured).
type UnitCosts struct {
	// BridgeMicrosPerEvent and PostgresMicrosPerEvent are CPU per event of
	// the median 0% inline drain: the process's cores over its events/s.
	BridgeMicrosPerEvent   float64 `json:"bridgeMicrosPerEvent"`
	PostgresMicrosPerEvent float64 `json:"postgresMicrosPerEvent"`
	// EventsPerSecPerPartition is that drain's rate over the topic's
	// partitions: one transaction is in flight per partition.
	EventsPerSecPerPartition float64 `json:"eventsPerSecPerPartition"`
	// LedgerBytesPerEvent is the dedupe ledger's bytes per applied event
	// (the history phase).
	LedgerBytesPerEvent float64 `json:"ledgerBytesPerEvent"`
	// ServerCPUMsPerStart and ServerCallsPerStart are the Temporal
	// server's CPU and persistence calls per workflow start, from its own
	// metrics during the 1% inline drain.
	ServerCPUMsPerStart float64 `json:"serverCPUMsPerStart"`
	ServerCallsPerStart float64 `json:"serverCallsPerStart"`
	// ServerCPUMsPerWorkflow is the server's CPU per workflow of workflow
	// mode (one activity, start to close).
	ServerCPUMsPerWorkflow float64 `json:"serverCPUMsPerWorkflow"`
}

// unitCosts computes the UnitCosts of r's measurements.
func (r *Result) unitCosts() UnitCosts {
	var u UnitCosts
	if x := r.inline(0); r.ran("inline") && x.EventsPerSec > 0 {
		rates := x.EventsPerSecReps
		if len(rates) == 0 {
			rates = []float64{x.EventsPerSec}
		}
		// The repetition medianCPU takes: the middle of the sorted rates.
		c := medianCPU(rates, x.CPUReps)
		eps := slices.Sorted(slices.Values(rates))[len(rates)/2]
		u.BridgeMicrosPerEvent = c.Bridge / eps * 1e6
		u.PostgresMicrosPerEvent = c.Postgres / eps * 1e6
		if r.Sizes.Partitions > 0 {
			u.EventsPerSecPerPartition = eps / float64(r.Sizes.Partitions)
		}
	}
	if r.ran("history") {
		u.LedgerBytesPerEvent = r.History.bytesPerEvent()
	}
	if s := r.inline(1).Server; r.ran("inline") && s != nil {
		u.ServerCPUMsPerStart, u.ServerCallsPerStart = s.CPUMsPerStart, s.PersistenceCallsPerStart
	}
	if r.ran("workflow") && r.Workflow.EventsPerSec > 0 {
		u.ServerCPUMsPerWorkflow = r.Workflow.CPU.Temporal / r.Workflow.EventsPerSec * 1e3
	}
	return u
}

// UnitsLine is the line before the summary: the inputs of
// docs/CAPACITY.md's table.
func (r *Result) UnitsLine() string {
	u := r.Units
	return fmt.Sprintf("bench units: bridge_us_per_event=%.1f postgres_us_per_event=%.1f events_per_partition=%.0f ledger_bytes_per_event=%.0f server_ms_per_start=%.2f server_calls_per_start=%.1f server_ms_per_workflow=%.1f",
		u.BridgeMicrosPerEvent, u.PostgresMicrosPerEvent, u.EventsPerSecPerPartition, u.LedgerBytesPerEvent,
		u.ServerCPUMsPerStart, u.ServerCallsPerStart, u.ServerCPUMsPerWorkflow)
}

// unitsMarkdown is the unit costs' section of results.md: a row per unit
// whose phase ran, "—" where it was not measured.
func (r *Result) unitsMarkdown(b *strings.Builder) {
	u := r.Units
	var rows []string
	for _, row := range []struct {
		phase, name string
		v           float64
		prec        int
	}{
		{"inline", "bridge CPU per event, µs (inline 0 %, median repetition)", u.BridgeMicrosPerEvent, 1},
		{"inline", "PostgreSQL CPU per event, µs (the same drain)", u.PostgresMicrosPerEvent, 1},
		{"inline", "events/s per partition (the same drain)", u.EventsPerSecPerPartition, 0},
		{"history", "dedupe-ledger bytes per applied event", u.LedgerBytesPerEvent, 0},
		{"inline", "Temporal server CPU per start, ms (inline 1 %)", u.ServerCPUMsPerStart, 2},
		{"inline", "Temporal persistence calls per start (inline 1 %)", u.ServerCallsPerStart, 1},
		{"workflow", "Temporal server CPU per one-activity workflow, ms (workflow mode)", u.ServerCPUMsPerWorkflow, 1},
	} {
		if !r.ran(row.phase) {
			continue
		}
		v := "—"
		if row.v > 0 {
			v = fmt.Sprintf("%.*f", row.prec, row.v)
		}
		rows = append(rows, fmt.Sprintf("| %s | %s |\n", row.name, v))
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("## Unit costs (the inputs of docs/CAPACITY.md)\n\n")
	b.WriteString("| unit | this run |\n|---|---:|\n")
	for _, row := range rows {
		b.WriteString(row)
	}
	b.WriteString("\n")
}
