package projection

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"cel.dev/cel-go/interpreter"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
)

// runawayExpr is a nested comprehension: over the ~500-byte payload of
// itemsPayload(runawayItems) it runs for seconds without a cost limit.
const runawayExpr = "event.payload.items.map(a, event.payload.items.map(b, event.payload.items.filter(c, a + b + c > 100).size())).size()"

// endlessExpr nests one level deeper: minutes without a limit.
const endlessExpr = "event.payload.items.all(a, event.payload.items.all(b, event.payload.items.all(c, event.payload.items.all(d, a + b + c + d >= 0))))"

const runawayItems = 245

// itemsPayload is {"items":[0,1,...]} with n one-digit items.
func itemsPayload(n int) []byte {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprint(i % 10)
	}
	return []byte(`{"items":[` + strings.Join(items, ",") + `]}`)
}

func costDoc(expr string) *Document {
	return &Document{Name: "p", SourceEvents: []string{"E"}, Table: "t", Key: []string{"k"}, On: map[string]Operation{
		"E": {Op: OpUpsert, Columns: map[string]string{"k": "event.entityId", "v": expr}},
	}}
}

func itemsEvent(n int) event.Envelope {
	return event.Envelope{EventID: "e1", EventType: "E", EntityID: "u1", ForkID: "f", Payload: itemsPayload(n)}
}

func TestValidateCost(t *testing.T) {
	for _, tc := range []struct {
		name  string
		expr  string
		limit uint64 // 0: the default
		want  string // regexp of the problem at on.E.columns.v; "" when valid
	}{
		{"field", "event.payload.artistId", 0, ""},
		{"arithmetic", "event.payload.plays / event.payload.days", 0, ""},
		{"conversions", "timestamp(event.payload.at) + duration('1h')", 0, ""},
		{"conditional", "has(event.payload.x) ? event.payload.x : 'none'", 0, ""},
		{"composite key", "event.payload.a + ':' + event.payload.b + ':' + event.payload.c + ':' + event.payload.d", 0, ""},
		{"membership", "'vip' in event.payload.tags", 0, ""},
		{"contains a literal", "event.payload.name.contains('x')", 0, ""},
		{"comparison", "event.payload.a == event.payload.b", 0, ""},
		{"size", "size(event.payload.items) > 0 ? event.payload.items[0] : null", 0, ""},
		{"comprehension over a literal", "[1, 2, 3].map(x, x * event.payload.n)", 0, ""},
		{"comprehension over a payload list", "event.payload.items.exists(x, x == 1)", 0,
			`^worst-case CEL cost \d+ exceeds the cost limit 1000000$`},
		{"comprehension under a higher limit", "event.payload.items.exists(x, x == 1)", 10_000_000, ""},
		{"nested comprehension", "event.payload.items.map(a, event.payload.items.map(b, a + b))", 0,
			`^worst-case CEL cost \d+ exceeds the cost limit 1000000$`},
		{"runaway", runawayExpr, 0, `^worst-case CEL cost is unbounded \(cost limit 1000000\)$`},
		{"product of two payload sizes", "event.payload.a.contains(event.payload.b)", 0,
			`^worst-case CEL cost \d+ exceeds the cost limit 1000000$`},
		{"concatenation under a low limit", "event.payload.a + event.payload.b", 1000,
			`^worst-case CEL cost \d+ exceeds the cost limit 1000$`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(costDoc(tc.expr), WithCostLimit(tc.limit))
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			var ve *ValidationError
			require.ErrorAs(t, err, &ve)
			require.Len(t, ve.Problems, 1)
			require.Equal(t, "on.E.columns.v", ve.Problems[0].Path)
			require.Regexp(t, tc.want, ve.Problems[0].Message)
		})
	}
}

func TestParseCostLimit(t *testing.T) {
	doc := `name: p
source_events: [E]
table: t
key: [k]
on:
  E:
    op: increment
    columns: {k: event.entityId, bad: "event.payload.a.matches(event.payload.b)"}
    increment: {n: "event.payload.items.filter(x, x > 0).size()"}
`
	_, err := Parse([]byte(doc))
	require.Error(t, err)
	require.Regexp(t, `^invalid projection: `+
		`on\.E\.columns\.bad: worst-case CEL cost \d+ exceeds the cost limit 1000000; `+
		`on\.E\.increment\.n: worst-case CEL cost \d+ exceeds the cost limit 1000000$`, err.Error())
	_, err = Parse([]byte(doc), WithCostLimit(1e11))
	require.NoError(t, err)
}

func TestEvalCostLimit(t *testing.T) {
	long := strings.Repeat("x", 400_000)
	twoStrings := event.Envelope{EventID: "e1", EventType: "E", EntityID: "u1", ForkID: "f",
		Payload: []byte(`{"s":"` + long + `","t":"` + long + `"}`)}
	for _, tc := range []struct {
		name  string
		expr  string
		ev    event.Envelope
		limit uint64 // 0: the default
		want  string
	}{
		{"runaway, default limit", runawayExpr, itemsEvent(runawayItems), 0, "on.E.columns.v: CEL cost limit 1000000 exceeded"},
		{"runaway, configured limit", runawayExpr, itemsEvent(runawayItems), 50_000, "on.E.columns.v: CEL cost limit 50000 exceeded"},
		// dyn + dyn is charged for the 800 KB it copies (80,000), not 1.
		{"long strings", "event.payload.s + event.payload.t", twoStrings, 50_000, "on.E.columns.v: CEL cost limit 50000 exceeded"},
		{"long strings under the limit", "event.payload.s + event.payload.t", twoStrings, 100_000, ""},
		{"small payload", runawayExpr, itemsEvent(3), 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := compile(costDoc(tc.expr), 1, WithCostLimit(tc.limit), runtimeOnly())
			require.NoError(t, err)
			start := time.Now()
			vals, err := evalEvent(t, c.ops["E"], tc.ev)
			t.Logf("%d-byte payload evaluated in %v", len(tc.ev.Payload), time.Since(start))
			if tc.want == "" {
				require.NoError(t, err)
				require.Len(t, vals, 2)
				return
			}
			var ee *EvalError
			require.ErrorAs(t, err, &ee)
			require.Equal(t, "on.E.columns.v", ee.Path)
			require.EqualError(t, err, tc.want)
			require.Equal(t, contract.KindIREval, Classify(err))
		})
	}
}

func TestEvalStopsWhenContextEnds(t *testing.T) {
	c, err := compile(costDoc(endlessExpr), 1, WithCostLimit(math.MaxUint64), runtimeOnly())
	require.NoError(t, err)
	fields, err := itemsEvent(runawayItems).Fields()
	require.NoError(t, err)
	act, err := interpreter.NewActivation(map[string]any{"event": fields})
	require.NoError(t, err)

	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"canceled before", func() (context.Context, context.CancelFunc) { return canceled, func() {} }, context.Canceled},
		{"canceled during", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled},
		{"deadline during", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 50*time.Millisecond)
		}, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := tc.ctx()
			defer cancel()
			start := time.Now()
			_, err := c.ops["E"].eval(ctx, act)
			elapsed := time.Since(start)
			t.Logf("stopped after %v", elapsed)
			// Unstopped, the evaluation runs for minutes.
			require.Less(t, elapsed, 10*time.Second)
			require.ErrorIs(t, err, tc.want)
			var ee *EvalError
			require.False(t, errors.As(err, &ee), "the event is not at fault: %v", err)
			require.Equal(t, contract.KindConnection, Classify(err))
			require.ErrorContains(t, err, "on.E.columns.v: ")
		})
	}
}

// BenchmarkEvalToCostLimit measures how long an evaluation runs before the
// default cost limit stops it (ns/op).
func BenchmarkEvalToCostLimit(b *testing.B) {
	c, err := compile(costDoc(runawayExpr), 1, runtimeOnly())
	require.NoError(b, err)
	fields, err := itemsEvent(runawayItems).Fields()
	require.NoError(b, err)
	act, err := interpreter.NewActivation(map[string]any{"event": fields})
	require.NoError(b, err)
	ctx := context.Background()
	for b.Loop() {
		if _, err := c.ops["E"].eval(ctx, act); err == nil {
			b.Fatal("the cost limit did not stop the evaluation")
		}
	}
}
