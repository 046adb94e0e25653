package projection

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"cel.dev/cel-go/interpreter"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	exampleprojections "github.com/causet/projection-retry/examples/projections"
	"github.com/causet/projection-retry/internal/testenv"
)

// followersYAML is testenv.FollowersIR with a version, a field Parse reads
// too.
const followersYAML = "version: 1\n" + testenv.FollowersIR

func TestExamplesParse(t *testing.T) {
	require.Equal(t, []string{"artist_followers", "artist_stats"}, exampleprojections.Names())
	for _, name := range exampleprojections.Names() {
		data, err := exampleprojections.Document(name)
		require.NoError(t, err)
		doc, err := Parse(data)
		require.NoError(t, err, name)
		require.Equal(t, name, doc.Name)
		ddl, err := exampleprojections.DDL(name)
		require.NoError(t, err)
		require.Contains(t, ddl, "CREATE TABLE IF NOT EXISTS "+name)
	}
}

func TestParseJSON(t *testing.T) {
	doc, err := Parse([]byte(`{"name":"n","source_events":["E"],"table":"t","key":["k"],
		"on":{"E":{"op":"upsert","columns":{"k":"event.entityId"}}}}`))
	require.NoError(t, err)
	require.Equal(t, "n", doc.Name)
}

func TestParseRejectsUnknownFields(t *testing.T) {
	_, err := Parse([]byte(strings.Replace(followersYAML, "    columns: {user_id: event.entityId, artist_id: event.payload.artistId}\n", "    colums: {user_id: event.entityId}\n", 1)))
	require.ErrorContains(t, err, `on.ARTIST_UNFOLLOWED.colums: unknown field`)
	_, err = Parse(nil)
	require.ErrorContains(t, err, "empty")
}

func TestValidate(t *testing.T) {
	base := func() *Document {
		doc, err := Parse([]byte(followersYAML))
		require.NoError(t, err)
		return doc
	}
	for _, tc := range []struct {
		name   string
		mutate func(d *Document)
		want   []string // substrings of the error
	}{
		{"unknown op", func(d *Document) { op := d.On["ARTIST_FOLLOWED"]; op.Op = "merge"; d.On["ARTIST_FOLLOWED"] = op },
			[]string{`on.ARTIST_FOLLOWED.op: unknown op "merge"`}},
		{"missing op", func(d *Document) { op := d.On["ARTIST_FOLLOWED"]; op.Op = ""; d.On["ARTIST_FOLLOWED"] = op },
			[]string{`on.ARTIST_FOLLOWED.op: is required`}},
		{"CEL syntax", func(d *Document) { d.On["ARTIST_FOLLOWED"].Columns["followed_at"] = "event.occurredAt +" },
			[]string{`on.ARTIST_FOLLOWED.columns.followed_at: CEL:`}},
		{"CEL unknown variable", func(d *Document) { d.On["ARTIST_FOLLOWED"].Columns["followed_at"] = "evt.occurredAt" },
			[]string{`on.ARTIST_FOLLOWED.columns.followed_at: CEL:`, "undeclared reference to 'evt'"}},
		{"empty expression", func(d *Document) { d.On["ARTIST_FOLLOWED"].Columns["followed_at"] = " " },
			[]string{`on.ARTIST_FOLLOWED.columns.followed_at: expression is empty`}},
		{"missing key column in upsert", func(d *Document) { delete(d.On["ARTIST_FOLLOWED"].Columns, "artist_id") },
			[]string{`on.ARTIST_FOLLOWED.columns: missing key column "artist_id"`}},
		{"missing key column in delete", func(d *Document) { delete(d.On["ARTIST_UNFOLLOWED"].Columns, "user_id") },
			[]string{`on.ARTIST_UNFOLLOWED.columns: missing key column "user_id"`}},
		{"non-key column in delete", func(d *Document) { d.On["ARTIST_UNFOLLOWED"].Columns["followed_at"] = "event.occurredAt" },
			[]string{`on.ARTIST_UNFOLLOWED.columns.followed_at: delete takes key columns only`}},
		{"increment on upsert", func(d *Document) {
			op := d.On["ARTIST_FOLLOWED"]
			op.Increment = map[string]string{"n": "1"}
			d.On["ARTIST_FOLLOWED"] = op
		}, []string{`on.ARTIST_FOLLOWED.increment: is only allowed with op increment`}},
		{"on event not in source_events", func(d *Document) { d.On["TRACK_PLAYED"] = d.On["ARTIST_FOLLOWED"] },
			[]string{`on.TRACK_PLAYED: event type "TRACK_PLAYED" is not listed in source_events`}},
		{"source event without on", func(d *Document) { delete(d.On, "ARTIST_UNFOLLOWED") },
			[]string{`source_events[1]: event type "ARTIST_UNFOLLOWED" has no entry in on`}},
		{"empty source_events", func(d *Document) { d.SourceEvents = nil },
			[]string{`source_events: must list at least one event type`}},
		{"duplicate source event", func(d *Document) { d.SourceEvents = append(d.SourceEvents, "ARTIST_FOLLOWED") },
			[]string{`source_events[2]: duplicate event type "ARTIST_FOLLOWED"`}},
		{"bad event type", func(d *Document) { d.SourceEvents[0] = "ARTIST FOLLOWED" },
			[]string{`source_events[0]: "ARTIST FOLLOWED" is not a valid event type`}},
		{"empty on", func(d *Document) { d.On = nil }, []string{`on: must define`}},
		{"missing name", func(d *Document) { d.Name = "" }, []string{`name: is required`}},
		{"missing table", func(d *Document) { d.Table = "" }, []string{`table: is required`}},
		{"empty key", func(d *Document) { d.Key = nil }, []string{`key: must list at least one column`}},
		{"duplicate key", func(d *Document) { d.Key = []string{"user_id", "user_id"} }, []string{`key[1]: duplicate key column "user_id"`}},
		{"negative version", func(d *Document) { d.Version = -1 }, []string{`version: must not be negative`}},
		{"injection in table", func(d *Document) { d.Table = "x; drop table y" },
			[]string{`table: "x; drop table y" is not a plain SQL identifier`}},
		{"injection in column", func(d *Document) { d.On["ARTIST_FOLLOWED"].Columns[`a"b`] = "1" },
			[]string{`on.ARTIST_FOLLOWED.columns.a"b: "a\"b" is not a plain SQL identifier`}},
		{"injection in key", func(d *Document) { d.Key[0] = `user_id") --` },
			[]string{`key[0]: "user_id\") --" is not a plain SQL identifier`}},
		{"injection in name", func(d *Document) { d.Name = "n'; select 1" }, []string{`name: "n'; select 1" is not a plain SQL identifier`}},
		{"upper case identifier", func(d *Document) { d.Table = "Artists" }, []string{`table: "Artists" is not a plain SQL identifier`}},
		{"identifier too long", func(d *Document) { d.Table = strings.Repeat("a", 64) }, []string{`table: "aaaa`}},
		{"several faults at once", func(d *Document) { d.Name = ""; d.Table = "" },
			[]string{`name: is required`, `table: is required`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := base()
			tc.mutate(d)
			err := Validate(d)
			require.Error(t, err)
			var ve *ValidationError
			require.ErrorAs(t, err, &ve)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
	require.NoError(t, Validate(base()))
	require.Error(t, Validate(nil))
}

func TestValidateIncrement(t *testing.T) {
	doc := func(op Operation) *Document {
		return &Document{Name: "s", SourceEvents: []string{"P"}, Table: "s", Key: []string{"k"}, On: map[string]Operation{"P": op}}
	}
	for _, tc := range []struct {
		name string
		op   Operation
		want string
	}{
		{"ok", Operation{Op: OpIncrement, Columns: map[string]string{"k": "event.entityId", "x": "1"}, Increment: map[string]string{"n": "event.payload.n"}}, ""},
		{"nothing to increment", Operation{Op: OpIncrement, Columns: map[string]string{"k": "event.entityId"}}, "on.P.increment: must list at least one column"},
		{"missing key", Operation{Op: OpIncrement, Columns: map[string]string{"x": "1"}, Increment: map[string]string{"n": "1"}}, `on.P.columns: missing key column "k"`},
		{"key incremented", Operation{Op: OpIncrement, Columns: map[string]string{"k": "1"}, Increment: map[string]string{"k": "1"}}, "on.P.increment.k: a key column cannot be incremented"},
		{"both set and incremented", Operation{Op: OpIncrement, Columns: map[string]string{"k": "1", "n": "1"}, Increment: map[string]string{"n": "1"}}, "on.P.increment.n: column is also set in columns"},
		{"string increment", Operation{Op: OpIncrement, Columns: map[string]string{"k": "1"}, Increment: map[string]string{"n": "'x'"}}, "on.P.increment.n: increment expression has type string"},
		{"bad increment column", Operation{Op: OpIncrement, Columns: map[string]string{"k": "1"}, Increment: map[string]string{"n;": "1"}}, `on.P.increment.n;: "n;" is not a plain SQL identifier`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(doc(tc.op))
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestBuildSQL(t *testing.T) {
	doc, err := Parse([]byte(followersYAML))
	require.NoError(t, err)
	c, err := compile(doc, 3)
	require.NoError(t, err)
	require.Equal(t, `INSERT INTO "artist_followers" AS cur ("user_id", "artist_id", "followed_at") VALUES ($1, $2, $3) `+
		`ON CONFLICT ("user_id", "artist_id") DO UPDATE SET "followed_at" = EXCLUDED."followed_at"`,
		c.ops["ARTIST_FOLLOWED"].sql)
	require.Equal(t, `DELETE FROM "artist_followers" WHERE "user_id" = $1 AND "artist_id" = $2`, c.ops["ARTIST_UNFOLLOWED"].sql)

	data, err := exampleprojections.Document("artist_stats")
	require.NoError(t, err)
	stats, err := Parse(data)
	require.NoError(t, err)
	cs, err := compile(stats, 1)
	require.NoError(t, err)
	require.Equal(t,
		`INSERT INTO "artist_stats" AS cur ("artist_id", "plays_per_day", "plays") VALUES ($1, $2, $3) ON CONFLICT ("artist_id") DO UPDATE SET "plays_per_day" = EXCLUDED."plays_per_day", "plays" = COALESCE(cur."plays", 0) + EXCLUDED."plays"`,
		cs.ops["TRACK_PLAYED"].sql)
}

func TestEval(t *testing.T) {
	doc := &Document{Name: "p", SourceEvents: []string{"E"}, Table: "t", Key: []string{"k"}, On: map[string]Operation{"E": {
		Op: OpUpsert, Columns: map[string]string{
			"k":     "event.entityId",
			"ratio": "event.payload.plays / event.payload.days",
			"f":     "event.payload.f",
			"b":     "event.payload.flag",
			"at":    "event.occurredAt",
			"obj":   "event.payload.obj",
			"lst":   "[1, 'a', {'x': true}]",
			"nul":   "null",
			"by":    "b'hi'",
		},
	}}}
	c, err := compile(doc, 1)
	require.NoError(t, err)
	at := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	ev := event.Envelope{EventID: "e1", EventType: "E", EntityID: "u1", ForkID: "production", OccurredAt: at,
		Payload: []byte(`{"plays": 7, "days": 2, "f": 1.5, "flag": true, "obj": {"a": [1, 2], "b": "x"}}`)}
	vals, err := evalEvent(t, c.ops["E"], ev)
	require.NoError(t, err)
	got := map[string]any{}
	for i, col := range c.ops["E"].cols {
		got[col.name] = vals[i]
	}
	require.Equal(t, map[string]any{
		"k": "u1", "ratio": int64(3), "f": 1.5, "b": true, "at": at,
		"obj": jsonText(`{"a":[1,2],"b":"x"}`), "lst": jsonText(`[1,"a",{"x":true}]`), "nul": nil, "by": []byte("hi"),
	}, got)

	ev.Payload = []byte(`{"plays": 7, "days": 0, "f": 1.5, "flag": true, "obj": {}}`)
	_, err = evalEvent(t, c.ops["E"], ev)
	var ee *EvalError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, "on.E.columns.ratio", ee.Path)
	require.ErrorContains(t, err, "division by zero")
	require.Equal(t, contract.KindIREval, Classify(err))

	ev.Payload = []byte(`{"plays": 7, "days": 1, "flag": true, "obj": {}}`)
	_, err = evalEvent(t, c.ops["E"], ev)
	require.ErrorContains(t, err, "on.E.columns.f: no such key: f")
}

func evalEvent(t *testing.T, op *compiledOp, ev event.Envelope) ([]any, error) {
	t.Helper()
	fields, err := ev.Fields()
	require.NoError(t, err)
	act, err := interpreter.NewActivation(map[string]any{"event": fields})
	require.NoError(t, err)
	return op.eval(context.Background(), act)
}

func TestAdapt(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		oid  uint32
		in   any
		want any
	}{
		{oidText, int64(5), "5"},
		{oidText, 1.5, "1.5"},
		{oidText, true, "true"},
		{oidText, at, "2026-01-02T03:04:05Z"},
		{oidText, jsonText(`{"a":1}`), `{"a":1}`},
		{oidJSONB, "x", `"x"`},
		{oidJSONB, int64(5), `5`},
		{oidJSONB, jsonText(`[1]`), `[1]`},
		{oidJSONB, nil, nil},
		{20 /* int8 */, int64(5), int64(5)},
		{20, jsonText(`1`), `1`},
	} {
		got, err := adapt(tc.oid, tc.in)
		require.NoError(t, err)
		require.Equal(t, tc.want, got, "%d %v", tc.oid, tc.in)
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want contract.ErrorKind
	}{
		{nil, ""},
		{&pgconn.PgError{Code: "42703", Message: `column "followed_at" of relation "artist_followers" does not exist`}, contract.KindSQL},
		{fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "23505"}), contract.KindSQL},
		{&pgconn.PgError{Code: "08006"}, contract.KindConnection},
		{&pgconn.PgError{Code: "57P01"}, contract.KindConnection},
		{&pgconn.PgError{Code: "57P03"}, contract.KindConnection},
		{&EvalError{Path: "x", Err: errors.New("division by zero")}, contract.KindIREval},
		{fmt.Errorf("%w: x", ErrNotDeployed), contract.KindIREval},
		{&event.InvalidError{Reason: "x"}, contract.KindInvalidEvent},
		{&ApplyError{Kind: contract.KindIREval, Err: errors.New("x")}, contract.KindIREval},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, contract.KindConnection},
		{fmt.Errorf("read: %w", io.EOF), contract.KindConnection},
		{io.ErrUnexpectedEOF, contract.KindConnection},
		{context.DeadlineExceeded, contract.KindConnection},
		{pgconn.ErrConnClosed, contract.KindConnection},
		{errors.New("unable to encode 1.5 into binary format for int4"), contract.KindSQL},
	} {
		require.Equal(t, tc.want, Classify(tc.err), "%v", tc.err)
	}
	ae := &ApplyError{Kind: contract.KindSQL, Err: &pgconn.PgError{Severity: "ERROR", Code: "42703", Message: `column "followed_at" does not exist`}}
	require.Equal(t, `column "followed_at" does not exist`, ae.Error(), "the seed's wording, without pgconn's decoration")
	var pe *pgconn.PgError
	require.ErrorAs(t, ae, &pe)
}

func TestParseYAMLDetails(t *testing.T) {
	// YAML 1.2: `on`, `yes`, `NO` are plain strings, not booleans; scalar
	// expressions are CEL literals.
	doc, err := Parse([]byte(`
name: counts
source_events: [YES, "NO"]
table: counts
key: [k]
on:
  YES: {op: increment, columns: {k: event.entityId, flag: true, note: null}, increment: {n: 1, f: 0.5}}
  NO: {op: delete, columns: {k: event.entityId}}
`))
	require.NoError(t, err)
	require.Equal(t, []string{"YES", "NO"}, doc.SourceEvents)
	require.Equal(t, map[string]string{"n": "1", "f": "0.5"}, doc.On["YES"].Increment)
	require.Equal(t, map[string]string{"k": "event.entityId", "flag": "true", "note": "null"}, doc.On["YES"].Columns)

	for _, tc := range []struct{ doc, want string }{
		{"name: x\ntabel: t\n", "tabel: unknown field"},
		{"name: x\non: {E: {op: upsert, where: x}}\n", "on.E.where: unknown field"},
		{"name: [a]\n", "name: must be a string"},
		{"name: x\nsource_events: E\n", "source_events: must be a list of strings"},
		{"- a\n- b\n", "not a mapping"},
		{"name: x\n  bad: indent\n", "decode projection document"},
		{"name: x\nname: y\n", "decode projection document"},
		{"name: x\non: {1: {op: upsert}}\n", `on.1: event type "1" is not listed in source_events`},
		{"name: x\non: {[a]: {op: upsert}}\n", "invalid map key"},
	} {
		_, err := Parse([]byte(tc.doc))
		require.ErrorContains(t, err, tc.want, tc.doc)
	}
}
