package intents_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/intents"
)

// problems parses doc and returns its problems as "path: message" lines.
func problems(t *testing.T, doc string, opts ...intents.Option) []string {
	t.Helper()
	_, err := intents.Parse([]byte(doc), opts...)
	require.Error(t, err)
	var ve *intents.ValidationError
	require.ErrorAs(t, err, &ve, "%v", err)
	out := make([]string, len(ve.Problems))
	for i, p := range ve.Problems {
		out[i] = p.String()
	}
	return out
}

func requireProblem(t *testing.T, got []string, want string) {
	t.Helper()
	for _, g := range got {
		if strings.Contains(g, want) {
			return
		}
	}
	t.Fatalf("no problem contains %q; got %q", want, got)
}

func TestParseRejectsUnknownFields(t *testing.T) {
	got := problems(t, `
intent_type: X
extra: 1
reads:
  r: {table: t, key: {id: intent.entityId}, where: x}
rules:
  - {name: a, reject_if: false, reason: "''", when: 1}
emits:
  - {event_type: E, payload: {}, key: x}
`)
	requireProblem(t, got, "extra: unknown field (want one of intent_type, version, reads, rules, emits)")
	requireProblem(t, got, "reads.r.where: unknown field (want one of table, key)")
	requireProblem(t, got, "rules[0].when: unknown field (want one of name, reject_if, reason)")
	requireProblem(t, got, "emits[0].key: unknown field (want one of event_type, payload)")
}

func TestParseJSON(t *testing.T) {
	doc, err := intents.Parse([]byte(`{"intent_type":"X","emits":[{"event_type":"E","payload":{"a":"intent.payload.a","n":1}}]}`))
	require.NoError(t, err)
	require.Equal(t, "1", doc.Emits[0].Payload["n"], "a YAML/JSON number is a CEL literal")
}

func TestValidateProblems(t *testing.T) {
	const emits = "emits: [{event_type: E, payload: {}}]\n"
	for _, tc := range []struct {
		doc, want string
	}{
		{emits, "intent_type: is required"},
		{"intent_type: 'a b'\n" + emits, `intent_type: "a b" is not a valid intent type`},
		{"intent_type: X\n", "emits: must list at least one event"},
		{"intent_type: X\nemits: [{event_type: E}]\n", "emits[0].payload: is required"},
		{"intent_type: X\nemits: [{event_type: 'bad type', payload: {}}]\n", `emits[0].event_type: "bad type" is not a valid event type`},
		{"intent_type: X\nemits: [{event_type: E, payload: {a: 'intent.payload.'}}]\n", "emits[0].payload.a: CEL: "},
		{"intent_type: X\nemits: [{event_type: E, payload: {a: ''}}]\n", "emits[0].payload.a: expression is empty"},
		{"intent_type: X\nreads: {r: {table: Bad, key: {id: intent.entityId}}}\n" + emits, `reads.r.table: "Bad" is not a plain SQL identifier`},
		{"intent_type: X\nreads: {r: {table: t, key: {Id: intent.entityId}}}\n" + emits, `reads.r.key.Id: "Id" is not a plain SQL identifier`},
		{"intent_type: X\nreads: {R: {table: t, key: {id: intent.entityId}}}\n" + emits, `reads.R: "R" is not a plain SQL identifier`},
		{"intent_type: X\nreads: {r: {table: t, key: {}}}\n" + emits, "reads.r.key: must map at least one key column"},
		{"intent_type: X\nreads: {r: {table: t, key: {id: reads.r}}}\n" + emits, "reads.r.key.id: CEL: ERROR: <input>:1:1: undeclared reference to 'reads'"},
		{"intent_type: X\nrules: [{name: a, reject_if: reads.nope != null, reason: \"''\"}]\n" + emits, "rules[0].reject_if: reads.nope is not declared in reads"},
		{"intent_type: X\nrules: [{name: a, reject_if: \"'yes'\", reason: \"''\"}]\n" + emits, "rules[0].reject_if: expression has type string, want bool"},
		{"intent_type: X\nrules: [{name: a, reject_if: 'true', reason: '1'}]\n" + emits, "rules[0].reason: expression has type int, want string"},
		{"intent_type: X\nrules: [{name: a, reject_if: 'true', reason: \"''\"}, {name: a, reject_if: 'true', reason: \"''\"}]\n" + emits, `rules[1].name: duplicate rule name "a"`},
		{"intent_type: X\nrules: [{reject_if: 'true', reason: \"''\"}]\n" + emits, "rules[0].name: is required"},
		{"intent_type: X\nversion: -1\n" + emits, "version: must not be negative"},
		{"intent_type: X\nrules: {a: 1}\n" + emits, "rules: must be a list of {name, reject_if, reason}"},
		{"intent_type: X\nemits: [{event_type: E, payload: {'': 'true'}}]\n", `emits[0].payload: field name "" must be 1 to 200 bytes`},
	} {
		requireProblem(t, problems(t, tc.doc), tc.want)
	}
	many := "intent_type: X\nemits:\n" + strings.Repeat("  - {event_type: E, payload: {}}\n", intents.MaxEmits+1)
	requireProblem(t, problems(t, many), "emits: has 101 entries, more than the 100 allowed")
}

func TestValidateCost(t *testing.T) {
	base := "intent_type: X\nemits: [{event_type: E, payload: {v: %q}}]\n"
	for _, expr := range []string{
		"intent.payload.items.map(x, x.map(y, y))",
		"intent.payload.a.contains(intent.payload.b)",
	} {
		requireProblem(t, problems(t, strings.Replace(base, "%q", `"`+expr+`"`, 1)), "emits[0].payload.v: worst-case CEL cost")
	}
	// A field access is cheap under any limit; a concatenation of 1 MiB
	// inputs is not under a tiny one.
	_, err := intents.Parse([]byte(strings.Replace(base, "%q", "intent.payload.a", 1)), intents.WithCostLimit(1000))
	require.NoError(t, err)
	requireProblem(t, problems(t, strings.Replace(base, "%q", `"intent.payload.a + intent.payload.b"`, 1), intents.WithCostLimit(1000)),
		"exceeds the cost limit 1000")
}
