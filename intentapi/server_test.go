package intentapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/intentapi"
	"github.com/causet/projection-retry/intents"
)

func TestSuccessEmitsEnvelopesWithEntitySequences(t *testing.T) {
	f := setup(t, 0)
	code, body := f.post(t, intentBody(t, "f-1", "FollowArtist", "user-1", map[string]any{"artistId": "artist-9"}))
	require.Equal(t, http.StatusOK, code, "%s", body)
	evs := envelopes(t, body)
	require.Len(t, evs, 1)
	require.Equal(t, event.Envelope{EventID: "f-1:1", EventType: "ARTIST_FOLLOWED", EntityID: "user-1", ForkID: "production",
		IntentID: "f-1", Sequence: 1, OccurredAt: evs[0].OccurredAt, Payload: evs[0].Payload}, evs[0])
	require.JSONEq(t, `{"artistId":"artist-9"}`, string(evs[0].Payload))
	require.WithinDuration(t, time.Now(), evs[0].OccurredAt, time.Minute)

	code, body = f.post(t, intentBody(t, "p-1", "PlayTrack", "user-1",
		map[string]any{"artistId": "artist-9", "trackId": "t-1", "plays": 3, "days": 1}))
	require.Equal(t, http.StatusOK, code, "%s", body)
	plays := envelopes(t, body)
	require.Equal(t, int64(2), plays[0].Sequence, "the entity's next number")
	require.Equal(t, "TRACK_PLAYED", plays[0].EventType)

	code, body = f.post(t, intentBody(t, "p-2", "PlayTrack", "user-2",
		map[string]any{"artistId": "artist-9", "trackId": "t-1", "plays": 4, "days": 2}))
	require.Equal(t, http.StatusOK, code, "%s", body)
	other := envelopes(t, body)
	require.Equal(t, int64(1), other[0].Sequence, "another entity counts from 1")

	// The example projections apply the events.
	f.apply(t, "artist_followers", evs...)
	f.apply(t, "artist_stats", plays[0], other[0])
	var n, perDay int64
	require.NoError(t, f.pool.QueryRow(f.ctx, "SELECT plays, plays_per_day FROM artist_stats WHERE artist_id = 'artist-9'").Scan(&n, &perDay))
	require.Equal(t, int64(7), n)
	var followers int
	require.NoError(t, f.pool.QueryRow(f.ctx, "SELECT count(*) FROM artist_followers WHERE user_id = 'user-1' AND artist_id = 'artist-9'").Scan(&followers))
	require.Equal(t, 1, followers)

	// The ledger holds the same envelopes, unpublished.
	rows, err := f.pool.Query(f.ctx, "SELECT envelope::text FROM causet_events WHERE published_at IS NULL ORDER BY position")
	require.NoError(t, err)
	var stored []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		stored = append(stored, s)
	}
	require.NoError(t, rows.Err())
	require.Len(t, stored, 3)
	ev, err := event.Decode([]byte(stored[1]))
	require.NoError(t, err)
	require.Equal(t, plays[0].EventID, ev.EventID)
}

func TestRejectedWhenFollowingTwice(t *testing.T) {
	f := setup(t, 0)
	follow := func(id string) (int, []byte) {
		return f.post(t, intentBody(t, id, "FollowArtist", "user-1", map[string]any{"artistId": "artist-9"}))
	}
	code, body := follow("f-1")
	require.Equal(t, http.StatusOK, code)
	f.apply(t, "artist_followers", envelopes(t, body)...)

	code, body = follow("f-2")
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"status":"REJECTED","intentId":"f-2","rule":"not_already_following","reason":"already following artist-9"}`, string(body))
	require.Equal(t, 2, f.count(t, "causet_intents"), "the rejection is recorded")
	require.Equal(t, 1, f.count(t, "causet_events"), "a rejection writes no event")

	code, body = f.post(t, intentBody(t, "u-1", "UnfollowArtist", "user-1", map[string]any{"artistId": "artist-9"}))
	require.Equal(t, http.StatusOK, code)
	unfollow := envelopes(t, body)
	require.Equal(t, int64(2), unfollow[0].Sequence)
	f.apply(t, "artist_followers", unfollow...)
	code, body = follow("f-3")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, int64(3), envelopes(t, body)[0].Sequence, "following again after unfollowing succeeds")
}

func TestBadRequestsWriteNothing(t *testing.T) {
	f := setup(t, 0)
	valid := func(change func(m map[string]any)) string {
		m := map[string]any{"intentId": "i-1", "intentType": "FollowArtist", "entityId": "user-1", "forkId": "production",
			"payload": map[string]any{"artistId": "a"}}
		change(m)
		b, err := json.Marshal(m)
		require.NoError(t, err)
		return string(b)
	}
	set := func(k string, v any) string { return valid(func(m map[string]any) { m[k] = v }) }
	drop := func(k string) string { return valid(func(m map[string]any) { delete(m, k) }) }
	big := strings.Repeat("x", intents.MaxPayloadBytes)
	deep := strings.Repeat("[", 70) + strings.Repeat("]", 70)
	cases := []struct {
		name, body string
		code       int
		want       string
	}{
		{"malformed JSON", `{"intentId":`, 400, "malformed JSON body"},
		{"not an object", `[1]`, 400, "malformed JSON body"},
		{"empty body", ``, 400, "malformed JSON body"},
		{"unknown field", set("extra", 1), 400, `unknown field "extra"`},
		{"data after the object", set("forkId", "p") + `{}`, 400, "data after the JSON object"},
		{"missing intentId", drop("intentId"), 400, "intentId is required"},
		{"empty entityId", set("entityId", ""), 400, "entityId is required"},
		{"blank forkId", set("forkId", "  "), 400, "forkId is required"},
		{"missing intentType", drop("intentType"), 400, "intentType is required"},
		{"intentId not a string", set("intentId", 5), 400, "intentId must be a string"},
		{"field name in another case", drop("intentId")[:len(drop("intentId"))-1] + `,"IntentId":"i-1"}`, 400, `unknown field "IntentId"`},
		{"unknown intentType", set("intentType", "Nope"), 400, `unknown intentType "Nope": no intent handler is deployed for it`},
		{"missing payload", drop("payload"), 400, "payload is required and must be a JSON object"},
		{"null payload", set("payload", nil), 400, "payload is required and must be a JSON object"},
		{"array payload", set("payload", []any{1}), 400, "payload is required and must be a JSON object"},
		{"payload over 256 KiB", set("payload", map[string]any{"artistId": big}), 400, "more than the 262144 allowed"},
		{"NUL byte", strings.Replace(set("entityId", "u"), `"u"`, "\"u\x00\"", 1), 400, "NUL byte at offset"},
		{"escaped NUL in an ID", set("entityId", "u\x00"), 400, `NUL (\u0000)`},
		{"escaped NUL in a payload key", set("payload", map[string]any{"a\x00": 1}), 400, `NUL (\u0000)`},
		{"intentId over 200 bytes", set("intentId", strings.Repeat("i", 201)), 400, "intentId is 201 bytes, more than the 200 allowed"},
		{"entityId over 200 bytes", set("entityId", strings.Repeat("e", 201)), 400, "entityId is 201 bytes, more than the 200 allowed"},
		{"forkId over 100 bytes", set("forkId", strings.Repeat("f", 101)), 400, "forkId is 101 bytes, more than the 100 allowed"},
		{"intentType over 200 bytes", set("intentType", strings.Repeat("t", 201)), 400, "intentType is 201 bytes"},
		{"eventId over 200 bytes", set("intentId", strings.Repeat("i", 199)), 400, "the ID of its event 1 (<intentId>:1) would be 201 bytes, more than the 200 allowed"},
		{"invalid UTF-8", strings.Replace(set("entityId", "u"), `"u"`, "\"\xff\"", 1), 400, "not valid UTF-8"},
		{"nesting too deep", strings.Replace(set("payload", map[string]any{"d": 0}), "0", deep, 1), 400, "nesting deeper than 64"},
		{"integer over 64 bits", strings.Replace(set("payload", map[string]any{"n": 0}), "0", "99999999999999999999", 1), 400, "does not fit a 64-bit integer"},
		{"body over 1 MiB", set("payload", map[string]any{"a": strings.Repeat("x", intentapi.MaxBodyBytes)}), 413, "request body is more than the 1048576 bytes allowed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := f.post(t, tc.body)
			require.Equal(t, tc.code, code, "%s", body)
			require.Contains(t, decode(t, body).Error, tc.want)
			f.requireNothingWritten(t, tc.name)
		})
	}
	require.Equal(t, float64(len(cases)), f.metric(t, "causet_runtime_intents_total", "invalid"))
	require.Len(t, f.logs.Where(t, "msg", "intent_outcome"), len(cases), "one line per intent")
}
