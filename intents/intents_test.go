package intents_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/event"
	exampleintents "github.com/causet/projection-retry/examples/intents"
	"github.com/causet/projection-retry/intents"
)

// fakeReader serves rows by table and key and records what was read.
type fakeReader struct {
	rows  map[string]map[string]any // "table|col=value,..." → row
	reads []string
	err   error
}

func keyString(table string, key []intents.KeyColumn) string {
	parts := make([]string, len(key))
	for i, k := range key {
		b, _ := json.Marshal(k.Value)
		parts[i] = k.Name + "=" + string(b)
	}
	return table + "|" + strings.Join(parts, ",")
}

func (f *fakeReader) Read(_ context.Context, table string, key []intents.KeyColumn) (map[string]any, error) {
	k := keyString(table, key)
	f.reads = append(f.reads, k)
	if f.err != nil {
		return nil, f.err
	}
	return f.rows[k], nil
}

func example(t *testing.T, intentType string) *intents.Handler {
	t.Helper()
	data, err := exampleintents.Document(intentType)
	require.NoError(t, err)
	doc, err := intents.Parse(data)
	require.NoError(t, err)
	h, err := intents.Compile(doc, 1)
	require.NoError(t, err)
	return h
}

func compileYAML(t *testing.T, doc string, opts ...intents.Option) *intents.Handler {
	t.Helper()
	d, err := intents.Parse([]byte(doc), opts...)
	require.NoError(t, err)
	h, err := intents.Compile(d, 1, opts...)
	require.NoError(t, err)
	return h
}

func intent(typ string, payload map[string]any) intents.Intent {
	return intents.Intent{IntentID: "i-1", IntentType: typ, EntityID: "user-1", ForkID: "production", Payload: payload}
}

func TestExamplesParse(t *testing.T) {
	require.Equal(t, []string{"FollowArtist", "PlayTrack", "UnfollowArtist"}, exampleintents.Names())
	want := map[string][]string{
		"FollowArtist":   {"ARTIST_FOLLOWED"},
		"UnfollowArtist": {"ARTIST_UNFOLLOWED"},
		"PlayTrack":      {"TRACK_PLAYED"},
	}
	for name, types := range want {
		h := example(t, name)
		require.Equal(t, name, h.IntentType())
		require.Equal(t, types, h.EventTypes())
	}
}

func TestFollowArtistDecides(t *testing.T) {
	ctx := context.Background()
	h := example(t, "FollowArtist")
	r := &fakeReader{}
	d, err := h.Decide(ctx, intent("FollowArtist", map[string]any{"artistId": "artist-9"}), r)
	require.NoError(t, err)
	require.False(t, d.Rejected())
	require.Equal(t, 1, d.HandlerVersion)
	require.Len(t, d.Events, 1)
	require.Equal(t, "ARTIST_FOLLOWED", d.Events[0].EventType)
	require.JSONEq(t, `{"artistId":"artist-9"}`, string(d.Events[0].Payload))
	followKey := `artist_followers|artist_id="artist-9",user_id="user-1"`
	require.Equal(t, []string{followKey}, r.reads)

	r = &fakeReader{rows: map[string]map[string]any{followKey: {"user_id": "user-1", "artist_id": "artist-9"}}}
	d, err = h.Decide(ctx, intent("FollowArtist", map[string]any{"artistId": "artist-9"}), r)
	require.NoError(t, err)
	require.True(t, d.Rejected())
	require.Equal(t, "not_already_following", d.Rule)
	require.Equal(t, "already following artist-9", d.Reason)
	require.Empty(t, d.Events)
}

func TestRulesRunBeforeTheReadsTheyDoNotNeed(t *testing.T) {
	h := example(t, "FollowArtist")
	r := &fakeReader{}
	d, err := h.Decide(context.Background(), intent("FollowArtist", map[string]any{}), r)
	require.NoError(t, err)
	require.Equal(t, "artist_required", d.Rule)
	require.Empty(t, r.reads, "the key of a read is built only when a rule needs the row")
}

func TestUnfollowRequiresAFollow(t *testing.T) {
	h := example(t, "UnfollowArtist")
	d, err := h.Decide(context.Background(), intent("UnfollowArtist", map[string]any{"artistId": "a"}), &fakeReader{})
	require.NoError(t, err)
	require.Equal(t, "following", d.Rule)
	require.Equal(t, "not following a", d.Reason)
}

func TestPlayTrackEmitsWhatArtistStatsReads(t *testing.T) {
	h := example(t, "PlayTrack")
	ctx := context.Background()
	payload := map[string]any{"artistId": "artist-1", "trackId": "track-7", "plays": int64(3), "days": int64(1)}
	d, err := h.Decide(ctx, intent("PlayTrack", payload), &fakeReader{})
	require.NoError(t, err)
	require.Len(t, d.Events, 1)
	require.JSONEq(t, `{"artistId":"artist-1","trackId":"track-7","plays":3,"days":1}`, string(d.Events[0].Payload))
	env, err := json.Marshal(event.Envelope{EventID: "i-1:1", EventType: "TRACK_PLAYED", EntityID: "user-1",
		ForkID: "production", IntentID: "i-1", Sequence: 1, OccurredAt: time.Now().UTC(), Payload: d.Events[0].Payload})
	require.NoError(t, err)
	decoded, err := event.Decode(env)
	require.NoError(t, err)
	fields, err := decoded.Fields()
	require.NoError(t, err)
	require.Equal(t, int64(3), fields["payload"].(map[string]any)["plays"])

	for _, tc := range []struct {
		change map[string]any
		rule   string
	}{
		{map[string]any{"days": int64(0)}, "days_positive"},
		{map[string]any{"plays": "3"}, "plays_positive"},
		{map[string]any{"trackId": ""}, "track_required"},
	} {
		p := map[string]any{}
		for k, v := range payload {
			p[k] = v
		}
		for k, v := range tc.change {
			p[k] = v
		}
		d, err := h.Decide(ctx, intent("PlayTrack", p), &fakeReader{})
		require.NoError(t, err)
		require.Equal(t, tc.rule, d.Rule, "%v", tc.change)
	}
}

func TestEvalErrors(t *testing.T) {
	h := compileYAML(t, `
intent_type: Divide
rules:
  - {name: odd, reject_if: intent.payload.n % 2 == 1, reason: "'odd ' + intent.payload.n"}
emits:
  - event_type: DIVIDED
    payload: {q: intent.payload.a / intent.payload.b}
`)
	ctx := context.Background()
	_, err := h.Decide(ctx, intent("Divide", map[string]any{"n": int64(0), "a": int64(1), "b": int64(0)}), &fakeReader{})
	var ee *intents.EvalError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, "emits[0].payload.q", ee.Path)
	require.Contains(t, ee.Error(), "division by zero")

	// The reason adds a string and an int: no such overload at run time.
	_, err = h.Decide(ctx, intent("Divide", map[string]any{"n": int64(1)}), &fakeReader{})
	require.ErrorAs(t, err, &ee)
	require.Equal(t, "rules[0].reason", ee.Path)

	_, err = h.Decide(ctx, intent("Divide", map[string]any{}), &fakeReader{})
	require.ErrorAs(t, err, &ee)
	require.Contains(t, ee.Error(), "no such key")
}

func TestReadErrorNamesTheRead(t *testing.T) {
	h := example(t, "FollowArtist")
	boom := errors.New("boom")
	_, err := h.Decide(context.Background(), intent("FollowArtist", map[string]any{"artistId": "a"}), &fakeReader{err: boom})
	var re *intents.ReadError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "follow", re.Read)
	require.Equal(t, "artist_followers", re.Table)
	require.ErrorIs(t, err, boom)
}

func TestDecideValidatesTheIntent(t *testing.T) {
	h := example(t, "FollowArtist")
	in := intent("FollowArtist", map[string]any{"artistId": "a"})
	in.ForkID = strings.Repeat("f", event.MaxForkIDBytes+1)
	_, err := h.Decide(context.Background(), in, &fakeReader{})
	var ie *intents.InvalidError
	require.ErrorAs(t, err, &ie)
	require.Contains(t, ie.Error(), "forkId is 101 bytes")
}

func TestPayloadValuesAsJSON(t *testing.T) {
	h := compileYAML(t, `
intent_type: Shapes
emits:
  - event_type: SHAPED
    payload:
      n: 1
      f: 1.5
      t: true
      z: null
      s: "'x'"
      list: "[1, 'a', [true]]"
      map: "{'k': intent.payload.v}"
      ts: timestamp('2026-12-02T12:00:00Z')
      b: b'hi'
`)
	d, err := h.Decide(context.Background(), intent("Shapes", map[string]any{"v": 2.5}), &fakeReader{})
	require.NoError(t, err)
	require.JSONEq(t, `{"n":1,"f":1.5,"t":true,"z":null,"s":"x","list":[1,"a",[true]],"map":{"k":2.5},
		"ts":"2026-12-02T12:00:00Z","b":"aGk="}`, string(d.Events[0].Payload))
}

func TestIntentValidate(t *testing.T) {
	ok := intent("T", map[string]any{})
	require.NoError(t, ok.Validate())
	for _, id := range []string{"01JE7Z4K3M", "order-42:retry_1", "a.b", "...", "user@example~1", strings.Repeat("x", 200)} {
		require.NoError(t, intents.CheckIntentID(id), id)
	}
	for _, tc := range []struct {
		change func(*intents.Intent)
		want   string
	}{
		{func(in *intents.Intent) { in.IntentID = "" }, "intentId is required"},
		{func(in *intents.Intent) { in.EntityID = "  " }, "entityId is required"},
		{func(in *intents.Intent) { in.IntentType = strings.Repeat("t", 201) }, "intentType is 201 bytes, more than the 200 allowed"},
		{func(in *intents.Intent) { in.IntentID = strings.Repeat("i", 201) }, "intentId is 201 bytes"},
		{func(in *intents.Intent) { in.EntityID = strings.Repeat("e", 201) }, "entityId is 201 bytes"},
		{func(in *intents.Intent) { in.ForkID = "a\x00b" }, "forkId contains NUL"},
		{func(in *intents.Intent) { in.EntityID = "\xff" }, "entityId is not valid UTF-8"},
		{func(in *intents.Intent) { in.Payload = nil }, "payload is required"},
		{func(in *intents.Intent) { in.IntentID = "." }, `intentId "." is a relative path segment`},
		{func(in *intents.Intent) { in.IntentID = ".." }, `intentId ".." is a relative path segment`},
		{func(in *intents.Intent) { in.IntentID = " order-1" }, `intentId has ' ' at byte 0`},
		{func(in *intents.Intent) { in.IntentID = "order-1\n" }, `intentId has '\n' at byte 7`},
		{func(in *intents.Intent) { in.IntentID = "a/b" }, `intentId has '/' at byte 1`},
		{func(in *intents.Intent) { in.IntentID = "a\x01" }, `intentId has '\x01' at byte 1`},
		{func(in *intents.Intent) { in.IntentID = "café" }, `intentId has a non-ASCII character at byte 3`},
	} {
		in := ok
		tc.change(&in)
		err := in.Validate()
		var ie *intents.InvalidError
		require.ErrorAs(t, err, &ie, tc.want)
		require.Contains(t, err.Error(), tc.want)
	}
}

func TestParsePayload(t *testing.T) {
	p, err := intents.ParsePayload([]byte(`{"n": 3, "f": 1.5, "l": [1, {"x": -2}]}`))
	require.NoError(t, err)
	require.Equal(t, map[string]any{"n": int64(3), "f": 1.5, "l": []any{int64(1), map[string]any{"x": int64(-2)}}}, p)

	deep := strings.Repeat("[", intents.MaxDepth) + strings.Repeat("]", intents.MaxDepth)
	for raw, want := range map[string]string{
		``:                                   "must be a JSON object",
		`[1]`:                                "must be a JSON object",
		`{"a": "x\u0000"}`:                   "NUL (\\u0000)",
		"{\"a\": \"x\x00\"}":                 "NUL byte",
		`{"n": 123456789012345678901234567}`: "does not fit a 64-bit integer",
		`{"f": 1e999}`:                       "out of range",
		`{"a": ` + deep + `}`:                "nesting deeper than 64",
		`{"a": 1} {"b": 2}`:                  "trailing data",
		`{"a": "` + strings.Repeat("x", intents.MaxPayloadBytes) + `"}`: "more than the 262144 allowed",
	} {
		_, err := intents.ParsePayload([]byte(raw))
		var ie *intents.InvalidError
		require.ErrorAs(t, err, &ie, "%.40q", raw)
		require.Contains(t, err.Error(), want, "%.40q", raw)
	}
	// An escaped backslash before u0000 is text, not NUL.
	_, err = intents.ParsePayload([]byte(`{"a": "\\u0000"}`))
	require.NoError(t, err)
}

func TestIntentIDMustLeaveRoomForEventIDs(t *testing.T) {
	h := example(t, "FollowArtist")
	in := intent("FollowArtist", map[string]any{}) // its rules would reject it
	in.IntentID = strings.Repeat("i", event.MaxEventIDBytes-1)
	_, err := h.Decide(context.Background(), in, &fakeReader{})
	var ie *intents.InvalidError
	require.ErrorAs(t, err, &ie, "refused whatever the rules decide")
	require.Equal(t, "intentId is 199 bytes: the ID of its event 1 (<intentId>:1) would be 201 bytes, more than the 200 allowed", err.Error())
	in.IntentID = in.IntentID[1:]
	d, err := h.Decide(context.Background(), in, &fakeReader{})
	require.NoError(t, err)
	require.Equal(t, "artist_required", d.Rule)
}
