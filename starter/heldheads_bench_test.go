package starter

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/parking"
)

// BenchmarkReleaseAmongHeldHeads: one bridge owns a partition with
// BENCH_HELD_HEADS (default 100,000) keys blocked behind dead letters under
// CAUSET_DLQ_HOLD_ENTITY, which it loads, keeps and describes (every one is
// stale at once; the describes answer "still dead-lettered"). Each
// iteration records one more key's head as settled, as a replay or discard
// of its dead letter does, and times until the bridge has released its
// parked event. It reports release_ms (the mean) and the process's RSS
// after the run (the test binary's: the bridge runs in it).
//
//	go test -run '^$' -bench 'BenchmarkReleaseAmongHeldHeads' -benchtime 20x ./starter/
func BenchmarkReleaseAmongHeldHeads(b *testing.B) {
	held := 100000
	if n, err := strconv.Atoi(os.Getenv("BENCH_HELD_HEADS")); err == nil {
		held = n
	}
	const probes = 50
	require.LessOrEqual(b, b.N, probes, "at most %d iterations (-benchtime %dx)", probes, probes)
	h := newHarness(b, harnessOptions{partitions: 1, noTemporal: true})
	_, err := h.pool.Exec(h.ctx, `INSERT INTO causet_blocked_keys (topic, partition, projection, fork_id, entity_id, head_workflow_id, head_state, parked, through)
SELECT $1, 0, 'artist_followers', 'production', 'held-' || i, 'projection-retry:artist_followers:production:dl-' || i, 'dead_lettered', 0, -1
FROM generate_series(1, $2::int) AS i`, h.topic, held)
	require.NoError(b, err)
	var heads []string
	for i := range probes {
		user := fmt.Sprintf("%sprobe-%d", h.prefix, i)
		head := contract.RetryWorkflowID("artist_followers", "production", user+"-follow")
		heads = append(heads, head)
		unfollow := followed(user+"-unfollow", user, "artist-1")
		unfollow.EventType = "ARTIST_UNFOLLOWED"
		unfollow.Sequence = 2
		in := contract.RetryInput{Event: unfollow, Projection: "artist_followers", Source: contract.Source{Topic: h.topic, Offset: int64(i)}}
		require.NoError(b, pgx.BeginFunc(h.ctx, h.pool, func(tx pgx.Tx) error {
			k := parking.Key{Projection: "artist_followers", ForkID: "production", EntityID: user}
			if err := parking.Block(h.ctx, tx, h.topic, 0, []parking.Blocked{{Key: k, Head: head, State: parking.HeadActive, Through: -1}}); err != nil {
				return err
			}
			if _, err := parking.SetHeadState(h.ctx, tx, head, parking.HeadDeadLettered); err != nil {
				return err
			}
			_, err := parking.Park(h.ctx, tx, h.topic, 0, []contract.RetryInput{in})
			return err
		}))
	}
	o := h.options(startedStarter{})
	o.HoldEntity = true
	o.Workflows = deadLetteredDescriber{}
	o.headStaleAfter = time.Millisecond
	r := h.start(o)
	require.Eventually(b, func() bool {
		return len(h.logs.Containing(`"msg":"blocked keys loaded"`)) > 0
	}, 5*time.Minute, 100*time.Millisecond, "the bridge loads its blocked keys")
	time.Sleep(3 * staleCheckEvery) // describes under way

	b.ResetTimer()
	var total time.Duration
	for i := range b.N {
		start := time.Now()
		_, err := parking.SetHeadState(h.ctx, h.pool, heads[i], parking.HeadSettled)
		require.NoError(b, err)
		require.Eventually(b, func() bool {
			return h.count(`SELECT count(*) FROM causet_blocked_keys WHERE head_workflow_id = $1`, heads[i]) == 0
		}, time.Minute, 5*time.Millisecond)
		total += time.Since(start)
	}
	b.StopTimer()
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "release_ms")
	b.ReportMetric(rssMB(b), "rss_MB")
	b.ReportMetric(float64(held), "held_heads")
	r.stop(b)
}

// deadLetteredDescriber answers every describe with an open dead letter.
type deadLetteredDescriber struct{}

func (deadLetteredDescriber) DescribeWorkflowExecution(ctx context.Context, id, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}}, nil
}

// rssMB is this process's resident set size in MB.
func rssMB(b *testing.B) float64 {
	raw, err := os.ReadFile("/proc/self/status")
	require.NoError(b, err)
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			require.NoError(b, err)
			return kb / 1024
		}
	}
	return -1
}
