package starter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// severableDialer dials the brokers until sever cuts every connection and
// refuses new ones: to the group coordinator the bridge then looks like a
// process killed with SIGKILL (no LeaveGroup, no more heartbeats).
type severableDialer struct {
	mu    sync.Mutex
	conns []net.Conn
	cut   bool
}

func (d *severableDialer) dial(ctx context.Context, network, host string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut {
		return nil, errors.New("severed (test)")
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, host)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

func (d *severableDialer) sever() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cut = true
	for _, c := range d.conns {
		_ = c.Close()
	}
}

// TestBridgeKafkaKillStall measures how long the partitions of a bridge
// that dies (or restarts) stop moving, with dynamic and static group
// membership. It needs a real broker (kfake has no static membership) and
// prints one STALL line per case; it is a measurement, not a check of
// timings: run it with CAUSET_MEASURE_STALL=1 KAFKA_BROKERS=127.0.0.1:9092.
func TestBridgeKafkaKillStall(t *testing.T) {
	if os.Getenv("CAUSET_MEASURE_STALL") == "" || os.Getenv("KAFKA_BROKERS") == "" {
		t.Skip("measurement: set CAUSET_MEASURE_STALL=1 and KAFKA_BROKERS (a real broker) to run it")
	}
	cases := []struct {
		name    string
		session time.Duration
		static  bool
		kill    bool // SIGKILL-like; false: a clean stop
		restart bool // the same bridge comes back at once
	}{
		{"kill, dynamic, 45s session (franz-go default)", 45 * time.Second, false, true, false},
		{"kill, dynamic, 15s session", 15 * time.Second, false, true, false},
		{"kill and restart, dynamic, 15s session", 15 * time.Second, false, true, true},
		{"kill and restart, static, 15s session", 15 * time.Second, true, true, true},
		{"rolling restart, dynamic, 15s session", 15 * time.Second, false, false, true},
		{"rolling restart, static, 15s session", 15 * time.Second, true, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{partitions: 4, noTemporal: true})
			bridge := func(id string) (*running, *severableDialer) {
				d := &severableDialer{}
				o := h.plainOptions(newRecordingStarter(nil))
				o.SessionTimeout = tc.session
				if tc.static {
					o.InstanceID = h.prefix + id
				}
				o.KafkaOptions = []kgo.Opt{kgo.Dialer(d.dial)}
				return h.start(o), d
			}
			a, da := bridge("a")
			b, _ := bridge("b")

			ctx, stopProducing := context.WithCancel(h.ctx)
			defer stopProducing()
			go func() {
				for i := 0; ctx.Err() == nil; i++ {
					var recs []*kgo.Record
					for p := range int32(4) {
						recs = append(recs, envRecord(p, played(fmt.Sprintf("%s%d-%d", h.prefix, p, i), fmt.Sprintf("artist-%d", p), 1, 1)))
					}
					_ = h.producer.ProduceSync(ctx, recs...).FirstErr()
					time.Sleep(20 * time.Millisecond)
				}
			}()
			require.Eventually(t, func() bool { return len(a.b.owned()) > 0 && len(b.b.owned()) > 0 }, 60*time.Second, 100*time.Millisecond)
			time.Sleep(3 * time.Second)
			var mine []int32
			for _, p := range a.b.owned() {
				mine = append(mine, p.id)
			}
			atKill := h.endOffsets()
			t0 := time.Now()
			if tc.kill {
				da.sever()
				a.cancel() // winds down without reaching the broker
			} else {
				a.stop(t)
			}
			if tc.restart {
				bridge("a")
			}
			// The stall ends when every partition the bridge owned has
			// committed past what was produced before it went away.
			require.Eventually(t, func() bool {
				c := h.committed()
				for _, p := range mine {
					if c[p] <= atKill[p] {
						return false
					}
				}
				return true
			}, 120*time.Second, 50*time.Millisecond)
			stall := time.Since(t0)
			fmt.Printf("STALL case=%q partitions=%v seconds=%.1f\n", tc.name, mine, stall.Seconds())
			if tc.kill {
				require.Error(t, <-a.done, "a severed bridge cannot commit on its way out")
				close(a.done)
			}
		})
	}
}
