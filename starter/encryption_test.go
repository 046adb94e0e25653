package starter

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/internal/payloadcodec"
)

// With payload encryption on, a lane terminated from outside is recovered
// as without: the bridge reads the lost lane's history back with
// Options.DataConverter (the clients'), decrypting the queue it carried and
// the events its updates added, and sends them to a new lane run.
func TestBridgeKafkaOrderingEncryptedTerminatedLaneRedelivers(t *testing.T) {
	h := newHarness(t, harnessOptions{partitions: 1})
	_, err := h.pool.Exec(h.ctx, orderingDDL)
	require.NoError(t, err)
	codec, err := payloadcodec.New(config.PayloadKeys{Current: "k1",
		Keys: []config.PayloadKey{{ID: "k1", Key: bytes.Repeat([]byte{7}, config.PayloadKeySize)}}})
	require.NoError(t, err)
	dc := payloadcodec.DataConverter(codec)
	enc, err := client.NewClientFromExisting(h.temporal.Client, client.Options{
		Namespace: h.temporal.Namespace, DataConverter: dc,
		FailureConverter: temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{DataConverter: dc}),
	})
	require.NoError(t, err)
	t.Cleanup(enc.Close)
	h.temporal.Client = enc // the worker, the bridge and the test's queries all encrypt
	h.startWorker()
	o := h.options(nil)
	o.Retry = shortRetry
	o.Retry.MaxAttempts = 60 // the head retries until the test lets it succeed
	o.MaxBackoff = 200 * time.Millisecond
	o.DataConverter = dc
	r := h.start(o)

	const artist = "artist-enc-term"
	h.flag(artist, 1)
	var recs []*kgo.Record
	for n := 1; n <= 8; n++ {
		recs = append(recs, envRecord(0, nth(h, artist, n)))
	}
	h.produce(recs...)

	lane := contract.LaneWorkflowID("artist_stats", "production", artist)
	require.Eventually(t, func() bool { return h.laneQueue(lane) >= 6 }, 60*time.Second, 50*time.Millisecond)
	// The lane's start input is encrypted.
	it := enc.GetWorkflowHistory(h.ctx, lane, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	first, err := it.Next()
	require.NoError(t, err)
	in := first.GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads()
	require.NotEmpty(t, in)
	require.Equal(t, payloadcodec.EncodingEncrypted, string(in[0].GetMetadata()["encoding"]))

	require.NoError(t, enc.TerminateWorkflow(h.ctx, lane, "", "terminated by an operator (test)"))
	require.Eventually(t, func() bool { return value(r.b.m.lanesLost) == 1 }, 60*time.Second, 100*time.Millisecond)
	lines := h.logs.lines("projection_lane_lost")
	require.NotEmpty(t, lines)
	require.EqualValues(t, 7, lines[0]["redelivered"], "the encrypted lane history was read back")

	h.unflag(artist)
	require.Eventually(t, func() bool { return len(h.audit(artist)) == 8 }, 120*time.Second, 100*time.Millisecond)
	require.Equal(t, seq(1, 8), h.audit(artist), "every event applied once, in order")
	require.Eventually(t, func() bool { return h.blockedRows() == 0 }, 60*time.Second, 100*time.Millisecond)
}
