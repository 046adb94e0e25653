package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/causet/projection-retry/client"
	"github.com/causet/projection-retry/event"
)

// Submit sends an intent to `causet runtime` and returns its recorded
// outcome, re-submitting only when that cannot record it twice. Here an
// httptest.Server stands in for the runtime with the example handler
// examples/intents/FollowArtist.yaml deployed: its first answer is a 503, as
// when the ledger's database is away (nothing written), which Submit retries
// after a backoff; a second follow of the same artist is rejected by the
// handler's rule.
func ExampleClient_Submit() {
	rt, answers := standInRuntime()
	defer rt.Close()

	// The intent ID is the caller's: stable across re-submissions of the same
	// intent (client.NewIntentID makes a random one). WithToken adds the bearer
	// token where the runtime requires one.
	c := client.New(rt.URL)
	ctx := context.Background()
	follow := client.Intent{
		IntentID:   "intent-1",
		IntentType: "FollowArtist",
		EntityID:   "user-1",
		ForkID:     "main",
		Payload:    map[string]string{"artistId": "artist-7"},
	}
	res, err := c.Submit(ctx, follow)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Status)
	for _, ev := range res.Events {
		fmt.Println(ev.EventID, ev.EventType, ev.EntityID, ev.Sequence, string(ev.Payload))
	}

	follow.IntentID = "intent-2"
	res, err = c.Submit(ctx, follow)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Status, res.Rule+":", res.Reason)

	fmt.Println("runtime answered", answers())
	// Output:
	// SUCCESS
	// intent-1:1 ARTIST_FOLLOWED user-1 1 {"artistId":"artist-7"}
	// REJECTED not_already_following: already following artist-7
	// runtime answered [503 200 200]
}

// standInRuntime answers POST /v1/intents for FollowArtist as
// docs/CONTRACT.md §9 says `causet runtime` does: a 503 first (nothing
// written), then SUCCESS with the intent's event, or REJECTED when the user
// already follows the artist. answers lists the status of every answer.
func standInRuntime() (srv *httptest.Server, answers func() []int) {
	var mu sync.Mutex
	var codes []int
	following := map[string]bool{}  // entityId/artistId
	sequences := map[string]int64{} // entityId → its last event's sequence
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		var in struct {
			IntentID, EntityID, ForkID string
			Payload                    struct{ ArtistID string }
		}
		var body any
		code, follow := http.StatusOK, ""
		if err := json.NewDecoder(r.Body).Decode(&in); err == nil {
			follow = in.EntityID + "/" + in.Payload.ArtistID
		}
		switch {
		case follow == "":
			code, body = http.StatusBadRequest, map[string]string{"error": "malformed JSON body"}
		case len(codes) == 0:
			code, body = http.StatusServiceUnavailable,
				map[string]string{"error": "the ledger is unavailable; re-submitting this intent is safe"}
		case following[follow]:
			body = map[string]string{"status": "REJECTED", "intentId": in.IntentID,
				"rule": "not_already_following", "reason": "already following " + in.Payload.ArtistID}
		default:
			following[follow] = true
			sequences[in.EntityID]++
			payload, _ := json.Marshal(map[string]string{"artistId": in.Payload.ArtistID})
			body = map[string]any{"status": "SUCCESS", "intentId": in.IntentID, "events": []event.Envelope{{
				EventID: in.IntentID + ":1", EventType: "ARTIST_FOLLOWED", EntityID: in.EntityID, ForkID: in.ForkID,
				IntentID: in.IntentID, Sequence: sequences[in.EntityID], OccurredAt: time.Now().UTC(), Payload: payload,
			}}}
		}
		codes = append(codes, code)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(body)
	}))
	return srv, func() []int {
		mu.Lock()
		defer mu.Unlock()
		return codes
	}
}
