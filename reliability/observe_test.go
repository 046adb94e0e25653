package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/internal/testenv"
)

// appliedIn returns n per event_id of a read model table.
func (s *stack) appliedIn(table string) map[string]int {
	s.t.Helper()
	rows, err := s.pool.Query(s.ctx, `SELECT event_id, n FROM `+table)
	require.NoError(s.t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		require.NoError(s.t, rows.Scan(&id, &n))
		out[id] = n
	}
	require.NoError(s.t, rows.Err())
	return out
}

func (s *stack) countSQL(sql string, args ...any) int {
	s.t.Helper()
	var n int
	require.NoError(s.t, s.pool.QueryRow(s.ctx, sql, args...).Scan(&n))
	return n
}

// tryCount is countSQL that tolerates a database outage (-1).
func (s *stack) tryCount(sql string) int {
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
	defer cancel()
	var n int
	if err := s.pool.QueryRow(ctx, sql).Scan(&n); err != nil {
		return -1
	}
	return n
}

func (s *stack) admin() (*kadm.Client, func()) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.brokers...))
	require.NoError(s.t, err)
	return kadm.NewClient(cl), cl.Close
}

// committed returns the group's committed offsets of the events topic.
func (s *stack) committed() map[int32]int64 {
	return testenv.CommittedOffsets(s.t, s.brokers, s.group, s.topic)
}

func (s *stack) endOffsets(topic string) map[int32]int64 {
	s.t.Helper()
	return testenv.EndOffsets(s.t, s.brokers, topic)
}

// committedToEnd reports whether every partition is committed to its end.
func (s *stack) committedToEnd() bool {
	return testenv.CommittedToEnd(s.t, s.brokers, s.group, s.topic)
}

// waitCommittedToEnd waits until the group has committed every partition to its end.
func (s *stack) waitCommittedToEnd(within time.Duration) bool {
	return testenv.WaitCommittedToEnd(s.t, s.brokers, s.group, s.topic, within)
}

// dlqEntry is one DLQ record, decoded.
type dlqEntry struct {
	rec       dlq.Record
	eventID   string
	partition int32
	offset    int64
	size      int
}

// readDLQ reads the whole DLQ topic (up to its current end), in partition
// then offset order.
func (s *stack) readDLQ() []dlqEntry {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, 60*time.Second)
	defer cancel()
	recs, _ := testenv.ReadTopic(s.t, ctx, s.brokers, s.dlqTopic,
		kgo.FetchMaxBytes(128<<20), kgo.FetchMaxPartitionBytes(128<<20), kgo.BrokerMaxReadBytes(256<<20))
	var out []dlqEntry
	for _, r := range recs {
		rec, err := dlq.Decode(r.Value)
		require.NoError(s.t, err)
		e := dlqEntry{rec: rec, partition: r.Partition, offset: r.Offset, size: len(r.Value)}
		if rec.Event != nil {
			var env struct {
				EventID string `json:"eventId"`
			}
			_ = json.Unmarshal(*rec.Event, &env)
			e.eventID = env.EventID
		}
		out = append(out, e)
	}
	return out
}

// workflowsOnQueue lists every run of workflow type typ ("" for any)
// started on the stack's task queue.
func (s *stack) workflowsOnQueue(typ string) []testenv.WorkflowExecution {
	s.t.Helper()
	return s.temporal.WorkflowsOnQueue(s.t, s.taskQueue, typ)
}

// describe returns the workflow's description (nil if not found).
func (s *stack) describe(id string) *workflowservice.DescribeWorkflowExecutionResponse {
	d, err := s.temporal.DescribeWorkflow(id)
	if err != nil {
		return nil
	}
	return d
}

// status queries a retry workflow's status.
func (s *stack) status(id string) (contract.Status, error) {
	var st contract.Status
	err := s.temporal.QueryWorkflow(id, contract.QueryStatus, &st)
	return st, err
}

func wfID(eventID string) string {
	return contract.RetryWorkflowID(relProjection, "production", eventID)
}

// entityOrder is an entity's row of rel_order.
type entityOrder struct{ n, lastSeq, inversions int64 }

func (s *stack) orderOf(entity string) entityOrder {
	s.t.Helper()
	var o entityOrder
	err := s.pool.QueryRow(s.ctx, `SELECT n, last_seq, inversions FROM rel_order WHERE entity_id = $1`, entity).
		Scan(&o.n, &o.lastSeq, &o.inversions)
	if err != nil && !strings.Contains(err.Error(), "no rows") {
		require.NoError(s.t, err)
	}
	return o
}

// blockedKeys counts the keys the bridges hold blocked (-1 when unknown).
func (s *stack) blockedKeys() int {
	if s.tryCount(`SELECT count(*) FROM pg_class WHERE relname = 'causet_blocked_keys'`) == 0 {
		return 0
	}
	return s.tryCount(`SELECT count(*) FROM causet_blocked_keys`)
}

// progress describes where a scenario stands, for a failure message: each
// partition's committed and end offsets, the rows applied, the blocked keys
// the parked events and the open retry workflows.
func (s *stack) progress() string {
	ends := s.endOffsets(s.topic)
	c := s.committed()
	var parts []string
	for p := int32(0); p < s.partitions; p++ {
		parts = append(parts, fmt.Sprintf("p%d=%d/%d", p, c[p], ends[p]))
	}
	open := func(typ string) int {
		n := 0
		for _, e := range s.workflowsOnQueue(typ) {
			if e.Running() {
				n++
			}
		}
		return n
	}
	return fmt.Sprintf("committed %s; rows %d; blocked keys %d; parked events %d; open retry workflows %d",
		strings.Join(parts, " "), s.tryCount(`SELECT count(*) FROM rel_effects`), s.blockedKeys(), s.parkedCount(),
		open(contract.RetryWorkflowName))
}

// progressLater is progress, read when formatted: a failure message of
// require.Eventually formats its arguments when it fails, so the message
// says where the scenario stood at the end of the wait, not at its start.
func (s *stack) progressLater() fmt.Stringer { return progressLine{s} }

type progressLine struct{ s *stack }

func (p progressLine) String() string { return p.s.progress() }

// waitApplied waits until every succeeding event of evs has its row: with
// entity ordering parked events apply only after their key's head
// settled, possibly after the last DLQ record landed.
func (s *stack) waitApplied(evs []evt, within time.Duration) {
	want := 0
	for _, e := range evs {
		if !e.fails {
			want++
		}
	}
	deadline := time.Now().Add(within)
	for s.tryCount(`SELECT count(*) FROM rel_effects`) < want && time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
	}
}

// waitDLQCount waits until the DLQ topic holds at least n records.
func (s *stack) waitDLQCount(n int64, within time.Duration) int64 {
	deadline := time.Now().Add(within)
	var got int64
	for time.Now().Before(deadline) {
		got = 0
		for _, e := range s.endOffsets(s.dlqTopic) {
			got += e
		}
		if got >= n {
			return got
		}
		time.Sleep(500 * time.Millisecond)
	}
	return got
}

// groupLag is the consumer group's lag on the events topic, within 3 s;
// false when Kafka does not answer.
func (s *stack) groupLag() (int64, bool) {
	ctx, cancel := context.WithTimeout(s.ctx, 3*time.Second)
	defer cancel()
	lags, err := kadm.NewClient(s.producer).Lag(ctx, s.group)
	if err != nil || lags.Error() != nil {
		return 0, false
	}
	return lags[s.group].Lag.TotalByTopic()[s.topic].Lag, true
}
