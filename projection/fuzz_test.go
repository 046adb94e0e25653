package projection

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	exampleprojections "github.com/causet/projection-retry/examples/projections"
)

// fuzzSeeds are broken and borderline IR documents: injection in every
// identifier position, wrong types, YAML features (anchors, tags, merge keys,
// non-string keys), bad CEL, duplicates.
var fuzzSeeds = []string{
	"",
	"{}",
	"[]",
	"null",
	"name: x",
	`{"name":"a","source_events":["E"],"table":"t","key":["k"],"on":{"E":{"op":"upsert","columns":{"k":"event.entityId"}}}}`,
	`{"name":"a","source_events":["E"],"table":"t\"; DROP TABLE x; --","key":["k"],"on":{"E":{"op":"upsert","columns":{"k":"1"}}}}`,
	"name: a\nsource_events: [E]\ntable: t\nkey: [\"k); DROP TABLE t; --\"]\non:\n  E: {op: upsert, columns: {\"k); DROP TABLE t; --\": event.entityId}}\n",
	"name: a\nsource_events: [E]\ntable: t\nkey: [k]\non:\n  E: {op: upsert, columns: {k: event.entityId, \"v\\\" = 1; --\": \"1\"}}\n",
	"name: a\nsource_events: [E]\ntable: T\nkey: [k]\non:\n  E: {op: upsert, columns: {k: event.entityId}}\n",
	"name: a\nsource_events: [E]\ntable: t\nkey: [k]\non:\n  E: {op: increment, columns: {k: event.entityId}, increment: {n: event.payload.n / event.payload.d}}\n",
	"name: a\nsource_events: [E]\ntable: t\nkey: [k]\non:\n  E: {op: delete, columns: {k: event.entityId, v: 1}}\n",
	"name: a\nsource_events: [E, E]\ntable: t\nkey: [k, k]\non:\n  E: {op: upsert, columns: {k: \"event.entityId +\"}}\n",
	"name: a\nsource_events: [E]\ntable: t\nkey: [k]\non:\n  E: {op: upsert, columns: {k: null, 1: true, 2.5: 3}}\n",
	"name: &n a\nsource_events: [E]\ntable: *n\nkey: [*n]\non:\n  E: &op {op: upsert, columns: {a: event.entityId}}\n  F: *op\n",
	"name: !!binary YWJj\ntable: !!int 5\n",
	"base: &b {op: upsert}\non:\n  E:\n    <<: *b\n    columns: {k: x}\n",
	"? [a, b]\n: c\n",
	"name: a\nversion: -1\nversion: 2\n",
	"name: a\nversion: 99999999999999999999999\n",
	"name: \"\\u0000\"\ntable: \"\\xff\"\n",
	"name: a\nsource_events: [\"\"]\ntable: t\nkey: [k]\non:\n  \"\": {op: upsert, columns: {k: event.entityId}}\n",
	"on: {E: [1, 2]}\n",
	"on: {E: {op: upsert, columns: [k]}}\n",
	"on: {E: {op: upsert, columns: {k: {nested: map}}}}\n",
	"- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -\n",
	strings.Repeat("[", 200) + strings.Repeat("]", 200),
	"name: a\nsource_events: [E]\ntable: t\nkey: [k]\non:\n  E: {op: upsert, columns: {k: '" + strings.Repeat("(", 60) + "1" + strings.Repeat(")", 60) + "'}}\n",
}

// FuzzValidate feeds arbitrary bytes to Parse (which validates) and checks:
// nothing panics; whatever is accepted also passes Validate; every identifier
// that reaches SQL (table, key columns, columns and increment columns, the
// projection name) is a plain identifier; and the accepted document survives
// a JSON round trip through Parse unchanged.
func FuzzValidate(f *testing.F) {
	for _, name := range exampleprojections.Names() {
		b, err := exampleprojections.Document(name)
		require.NoError(f, err)
		f.Add(b)
		// The same document with every identifier position injected.
		f.Add([]byte(strings.ReplaceAll(string(b), "artist_id", `artist_id"; DROP TABLE artist_followers; --`)))
		f.Add([]byte(strings.ReplaceAll(string(b), "table: ", "table: public.")))
	}
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := Parse(data)
		if err != nil {
			require.Nil(t, doc)
			require.NotEmpty(t, err.Error())
			return
		}
		require.NotNil(t, doc)
		require.NoError(t, Validate(doc), "Parse accepted what Validate rejects")
		checkIdentifiers(t, doc)

		j, err := json.Marshal(doc)
		require.NoError(t, err)
		again, err := Parse(j)
		require.NoError(t, err, "accepted document does not re-parse from its JSON: %s", j)
		require.Equal(t, doc, again)
	})
}

func checkIdentifiers(t *testing.T, doc *Document) {
	t.Helper()
	require.True(t, ValidIdentifier(doc.Name), "name %q", doc.Name)
	require.True(t, ValidIdentifier(doc.Table), "table %q", doc.Table)
	require.NotEmpty(t, doc.Key)
	for _, k := range doc.Key {
		require.True(t, ValidIdentifier(k), "key %q", k)
	}
	require.NotEmpty(t, doc.On)
	for et, op := range doc.On {
		require.Contains(t, doc.SourceEvents, et)
		require.Contains(t, []string{OpUpsert, OpDelete, OpIncrement}, op.Op)
		for c := range op.Columns {
			require.True(t, ValidIdentifier(c), "on.%s.columns.%q", et, c)
		}
		for c := range op.Increment {
			require.True(t, ValidIdentifier(c), "on.%s.increment.%q", et, c)
		}
	}
}

// FuzzIRIdentifiers builds documents directly (as a caller of Validate that
// does not go through Parse would) with arbitrary identifier strings.
func FuzzIRIdentifiers(f *testing.F) {
	f.Add("artist_followers", "artist_followers", "user_id", "followed_at", "event.entityId")
	f.Add("a", `t"; DROP TABLE t; --`, "k", "v", "1")
	f.Add("a", "t", `k" = 1 OR 1=1 --`, "v", "1")
	f.Add("a", "t", "k", `v") VALUES (1); --`, "1")
	f.Add("A", "t", "K", "V", "event.payload.x / 0")
	f.Add("a", "t", "k", "v", `"'); DROP TABLE artist_followers; --"`)
	f.Add("_", "_", "_", "__", "null")
	f.Add("", "", "", "", "")
	f.Fuzz(func(t *testing.T, name, table, key, col, expr string) {
		for _, op := range []string{OpUpsert, OpDelete, OpIncrement} {
			o := Operation{Op: op, Columns: map[string]string{key: "event.entityId"}}
			switch op {
			case OpUpsert:
				o.Columns[col] = expr
			case OpIncrement:
				o.Increment = map[string]string{col: expr}
			}
			doc := &Document{Name: name, SourceEvents: []string{"E"}, Table: table, Key: []string{key}, On: map[string]Operation{"E": o}}
			if err := Validate(doc); err != nil {
				var ve *ValidationError
				require.ErrorAs(t, err, &ve)
				continue
			}
			checkIdentifiers(t, doc)
		}
	})
}

func TestFuzzValidateNilAndEmpty(t *testing.T) {
	require.Error(t, Validate(nil))
	require.Error(t, Validate(&Document{}))
	_, err := Parse(nil)
	require.Error(t, err)
}
