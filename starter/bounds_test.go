package starter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/projection"
)

// Fetching pauses by queued bytes, not only by records: large events
// queued behind a stalled apply stop at MaxBufferedBytes (plus the fetch
// that crossed it), far below the record bound.
func TestBridgeKafkaPausesByQueuedBytes(t *testing.T) {
	h := newHarness(t, harnessOptions{partitions: 1, noTemporal: true})
	release := make(chan struct{})
	var released sync.Once
	t.Cleanup(func() { released.Do(func() { close(release) }) })
	engine := EngineFunc{
		Pool:            h.pool,
		ProjectionsFunc: func(string) []string { return []string{"artist_stats"} },
		ApplyBatchFunc: func(ctx context.Context, evs []event.Envelope) ([]projection.Result, error) {
			select { // a database that hangs: the partition's queue fills
			case <-release:
			case <-ctx.Done():
			}
			out := make([]projection.Result, len(evs))
			for i := range evs {
				out[i] = projection.Result{Projection: "artist_stats", Index: i, Status: projection.StatusApplied}
			}
			return out, nil
		},
	}
	o := h.plainOptions(newRecordingStarter(nil))
	o.Engine = engine
	o.MaxPollRecords = 100 // records bound: 400 queued
	o.MaxBufferedBytes = 1 << 20
	r := h.start(o)

	pad := string(bytes.Repeat([]byte("x"), 64<<10))
	var recs []*kgo.Record
	for i := range 300 { // 300 × 64 KiB: far past the byte bound, under the record bound
		ev := played(fmt.Sprintf("%sbig-%d", h.prefix, i), "artist-1", 1, 1)
		ev.Payload = []byte(fmt.Sprintf(`{"artistId":"artist-1","plays":1,"days":1,"pad":%q}`, pad))
		recs = append(recs, envRecord(0, ev))
	}
	h.produce(recs...)
	var p *partition
	require.Eventually(t, func() bool {
		parts := r.b.owned()
		if len(parts) == 0 {
			return false
		}
		p = parts[0]
		return p.paused.Load()
	}, 30*time.Second, 20*time.Millisecond, "fetching pauses")
	time.Sleep(time.Second)
	n, size := p.queued()
	require.Less(t, n, 4*o.MaxPollRecords, "paused by bytes, not by records")
	require.Less(t, size, int64(o.MaxBufferedBytes)+int64(2<<20), "queued bytes stay within the bound and one fetch")
	released.Do(func() { close(release) })
	h.waitCommittedToEnd(60 * time.Second)
}

// capturingStarter records the inputs of the workflows it starts.
type capturingStarter struct {
	*recordingStarter
	mu     sync.Mutex
	inputs []contract.RetryInput
}

func (s *capturingStarter) ExecuteWorkflow(ctx context.Context, o client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	if in, ok := args[0].(contract.RetryInput); ok {
		s.mu.Lock()
		s.inputs = append(s.inputs, in)
		s.mu.Unlock()
	}
	return s.recordingStarter.ExecuteWorkflow(ctx, o, wf, args...)
}

// Across a database outage attempt 1 is the try that ran: its start time,
// from which the schedule counts, is after the outage, in both orderings.
func TestBridgeKafkaFirstAttemptTimeAfterOutage(t *testing.T) {
	for _, ordered := range []bool{true, false} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			h := newHarness(t, harnessOptions{partitions: 1, noTemporal: true})
			var down atomic.Bool
			down.Store(true)
			var outageOver atomic.Int64
			fail := func(evs []event.Envelope) ([]projection.Result, error) {
				if down.Load() {
					return nil, errors.New("connection refused (test)")
				}
				out := make([]projection.Result, len(evs))
				for i := range evs {
					out[i] = projection.Result{Projection: "artist_stats", Index: i, Status: projection.StatusFailed, Err: &projection.ApplyError{Kind: "sql", Err: errors.New("boom")}}
				}
				return out, nil
			}
			engine := EngineFunc{
				Pool:            h.pool,
				ProjectionsFunc: func(string) []string { return []string{"artist_stats"} },
				ApplyBatchFunc:  func(_ context.Context, evs []event.Envelope) ([]projection.Result, error) { return fail(evs) },
			}
			s := &capturingStarter{recordingStarter: newRecordingStarter(nil)}
			o := h.options(s)
			if !ordered {
				o = h.plainOptions(s)
			}
			o.Engine = engine
			o.Probe = func(context.Context) error {
				if down.Load() {
					return errors.New("database down (test)")
				}
				return nil
			}
			o.MinBackoff, o.MaxBackoff = 50*time.Millisecond, 100*time.Millisecond
			h.start(o)
			h.produce(envRecord(0, played(h.prefix+"1", "artist-1", 1, 1)))
			time.Sleep(2 * time.Second) // the outage lasts
			outageOver.Store(time.Now().UnixNano())
			down.Store(false)
			h.waitCommittedToEnd(30 * time.Second)
			s.mu.Lock()
			defer s.mu.Unlock()
			require.Len(t, s.inputs, 1)
			require.NotNil(t, s.inputs[0].FirstAttempt)
			require.False(t, s.inputs[0].FirstAttempt.StartedAt.Before(time.Unix(0, outageOver.Load())),
				"attempt 1 started %s, the outage ended %s", s.inputs[0].FirstAttempt.StartedAt, time.Unix(0, outageOver.Load()))
		})
	}
}
