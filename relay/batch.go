package relay

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/event"
)

// slowBatch is how long a batch may go unanswered before the relay says so:
// an idempotent producer keeps records a broker may have written, so a
// broker that takes requests and never answers holds the batch.
const slowBatch = 30 * time.Second

// row is one unpublished ledger event as it goes to Kafka.
type row struct {
	position         int64
	forkID, entityID string
	value            []byte
}

// fetch reads the first Batch unpublished rows in position order (the
// partial index causet_events_unpublished serves it).
func (r *Relay) fetch(ctx context.Context, conn *pgx.Conn) ([]row, error) {
	ctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	rs, err := conn.Query(ctx, `
		SELECT position, fork_id, entity_id, envelope FROM causet_events
		WHERE published_at IS NULL ORDER BY position LIMIT $1`, r.opts.Batch)
	if err != nil {
		return nil, err
	}
	var out []row
	for rs.Next() {
		var (
			rw       row
			envelope []byte
		)
		if err := rs.Scan(&rw.position, &rw.forkID, &rw.entityID, &envelope); err != nil {
			rs.Close()
			return nil, err
		}
		rw.value = recordValue(envelope)
		out = append(out, rw)
	}
	return out, rs.Err()
}

// recordValue is the envelope as event.Envelope encodes it: compact, in the
// envelope's field order, as the runtime's responses show it (jsonb keeps
// neither). A value that is no envelope goes out as stored, for the bridge
// to dead-letter, rather than hold up every event behind it.
func recordValue(envelope []byte) []byte {
	var env event.Envelope
	if err := json.Unmarshal(envelope, &env); err != nil {
		return envelope
	}
	b, err := json.Marshal(env)
	if err != nil {
		return envelope
	}
	return b
}

// produce sends rows in order and waits for every answer. It returns which
// rows Kafka acknowledged and the first error, if any.
func (r *Relay) produce(ctx context.Context, rows []row) ([]bool, error) {
	acked := make([]bool, len(rows))
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	wg.Add(len(rows))
	for i, rw := range rows {
		rec := &kgo.Record{Key: []byte(rw.entityID), Value: rw.value}
		r.cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			mu.Lock()
			if err == nil {
				acked[i] = true
			} else if first == nil {
				first = err
			}
			mu.Unlock()
			wg.Done()
		})
	}
	r.await(ctx, &wg)
	mu.Lock()
	defer mu.Unlock()
	return acked, first
}

// await waits for the promises of a batch. Once ctx is done the records not
// yet sent fail at once; those sent get ShutdownGrace for their answer, then
// the producer is closed, which fails them (they are sent again later).
func (r *Relay) await(ctx context.Context, wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	slow := time.NewTimer(slowBatch)
	defer slow.Stop()
	for waiting := true; waiting; {
		select {
		case <-done:
			return
		case <-slow.C:
			r.log.Warn("kafka has not answered the batch yet; records already sent are kept until it does", "after", slowBatch.String())
		case <-ctx.Done():
			waiting = false
		}
	}
	grace := time.NewTimer(r.opts.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-done:
		return
	case <-grace.C:
	}
	r.log.Warn("records unanswered after the shutdown grace; closing the producer, they will be sent again",
		"grace", r.opts.ShutdownGrace.String())
	r.closeProducer()
	<-done
}

// mark sets published_at on positions. It runs even after ctx is done:
// what Kafka acknowledged is recorded before Run returns.
func (r *Relay) mark(ctx context.Context, conn *pgx.Conn, positions []int64) error {
	if len(positions) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dbTimeout)
	defer cancel()
	_, err := conn.Exec(ctx, `UPDATE causet_events SET published_at = now() WHERE position = ANY($1) AND published_at IS NULL`, positions)
	return err
}

func allPositions(rows []row) []int64 {
	out := make([]int64, len(rows))
	for i, rw := range rows {
		out[i] = rw.position
	}
	return out
}

// ackedPrefix returns the positions of acknowledged rows that no
// unacknowledged row of the same (fork, entity) precedes in the batch:
// marking them keeps each entity's published rows a prefix of its sequence.
func ackedPrefix(rows []row, acked []bool) []int64 {
	type entity struct{ fork, id string }
	stopped := map[entity]bool{}
	var out []int64
	for i, rw := range rows {
		e := entity{rw.forkID, rw.entityID}
		if !acked[i] {
			stopped[e] = true
			continue
		}
		if !stopped[e] {
			out = append(out, rw.position)
		}
	}
	return out
}
