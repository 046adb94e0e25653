package relay

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/event"
)

// slowBatch is how long a batch may go unanswered before the relay says so:
// an idempotent producer keeps records a broker may have written, so a
// broker that takes requests and never answers holds the batch.
const slowBatch = 30 * time.Second

// row is one unpublished ledger event as it goes to Kafka.
type row struct {
	position                  int64
	eventID, forkID, entityID string
	value                     []byte
}

// fetch reads the first Batch unpublished rows in position order, skipping
// those set aside (the partial index causet_events_unpublished serves it;
// set-aside rows are few).
func (r *Relay) fetch(ctx context.Context, conn *pgx.Conn) ([]row, error) {
	ctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	rs, err := conn.Query(ctx, `
		SELECT position, event_id, fork_id, entity_id, envelope FROM causet_events e
		WHERE published_at IS NULL AND NOT EXISTS (SELECT 1 FROM causet_events_set_aside s WHERE s.position = e.position)
		ORDER BY position LIMIT $1`, r.opts.Batch)
	if err != nil {
		return nil, err
	}
	var out []row
	for rs.Next() {
		var (
			rw       row
			envelope []byte
		)
		if err := rs.Scan(&rw.position, &rw.eventID, &rw.forkID, &rw.entityID, &envelope); err != nil {
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

// produce sends rows in order and waits for every answer: each row's
// error, nil for those Kafka acknowledged. Every row is buffered before the
// flush: had a row been handed to the producer after Kafka refused an
// earlier batch of its partition, it could be acknowledged before the
// refused rows of its entity are sent again.
func (r *Relay) produce(ctx context.Context, rows []row) []error {
	errs := make([]error, len(rows))
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	wg.Add(len(rows))
	for i, rw := range rows {
		rec := &kgo.Record{Key: []byte(rw.entityID), Value: rw.value}
		r.cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			mu.Lock()
			errs[i] = err
			mu.Unlock()
			wg.Done()
		})
	}
	// The flush outlives ctx as the answers do (await bounds them).
	fctx, stopFlush := context.WithCancel(context.WithoutCancel(ctx))
	go func() { _ = r.cl.Flush(fctx) }()
	r.await(ctx, &wg)
	stopFlush()
	mu.Lock()
	defer mu.Unlock()
	return errs
}

// refused reports an error Kafka gives a record for the record itself
// (too large for the topic, invalid): sending it again can never succeed.
// A broker refuses a whole batch for one such record, so a row is judged
// on its own (judgeAlone) before it is set aside.
func refused(err error) bool {
	for _, e := range []error{kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord, kerr.CorruptMessage, kerr.InvalidTimestamp} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// judgeAlone sends each row whose batch Kafka refused on its own, in order:
// a row acknowledged alone was refused only with its batch; one refused
// alone is poison. It fills errs in place and returns the poison rows'
// indexes.
func (r *Relay) judgeAlone(ctx context.Context, rows []row, errs []error) []int {
	var poison []int
	for i, err := range errs {
		if !refused(err) || ctx.Err() != nil {
			continue
		}
		errs[i] = r.produce(ctx, rows[i:i+1])[0]
		if refused(errs[i]) {
			poison = append(poison, i)
		}
	}
	return poison
}

// setAside records the poison rows with Kafka's reason, so that the relay
// moves on past them; `causet outbox redrive` puts them back.
func (r *Relay) setAside(ctx context.Context, conn *pgx.Conn, rows []row, errs []error, poison []int) error {
	if len(poison) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dbTimeout)
	defer cancel()
	positions, ids, reasons := make([]int64, len(poison)), make([]string, len(poison)), make([]string, len(poison))
	for k, i := range poison {
		positions[k], ids[k], reasons[k] = rows[i].position, rows[i].eventID, errs[i].Error()
	}
	_, err := conn.Exec(ctx, `INSERT INTO causet_events_set_aside (position, event_id, reason)
		SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[]) ON CONFLICT (position) DO NOTHING`, positions, ids, reasons)
	if err != nil {
		return err
	}
	for _, i := range poison {
		r.m.setAside.Inc()
		r.log.Error("kafka refuses this event itself: set aside, the relay moves on (causet outbox list, causet outbox redrive)",
			"event", "relay_event_set_aside", "position", rows[i].position, "eventId", rows[i].eventID,
			"entityId", rows[i].entityID, "forkId", rows[i].forkID, "bytes", len(rows[i].value), "error", errs[i].Error())
	}
	return nil
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
// marking them keeps each entity's published rows a prefix of its sequence
// (a row set aside counts as done).
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
