package starter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/incident"
	"github.com/causet/projection-retry/projection"
)

// Releasing parked events (policy hold; incidents.go). A key with parked
// events stays blocked; its events are applied (or dead-lettered) in
// parking order once the key's head lets them go: its incident left
// holding, or, after a parked event failed again, that event's retry
// workflow settled. One drain at a time per partition (drainMu), so a key's
// events are never released by two drains at once; the key is unblocked
// under mu once none is left and no batch holds it.

// drainLimit bounds the parked events one drain reads (one transaction).
const drainLimit = 3000

func incidentKey(k LaneKey) incident.Key {
	return incident.Key{Projection: k.Projection, ForkID: k.ForkID, EntityID: k.EntityID}
}

func laneKeyOf(in contract.RetryInput) LaneKey { return keyOf(in.Projection, &in.Event) }

// settleParked drains, in every owned partition, the parked keys whose
// incident no longer holds.
func (b *Bridge) settleParked() {
	for _, p := range b.owned() {
		r, ok := p.router.(*laneRouter)
		if !ok {
			continue
		}
		var keys []LaneKey
		r.mu.Lock()
		for k := range r.parked {
			head := r.head[k]
			if !isIncidentHead(head) || r.queued[k] > 0 {
				continue
			}
			if st, ok := b.inc.stateOf(head); ok && st != contract.IncidentHolding {
				keys = append(keys, k)
			}
		}
		r.mu.Unlock()
		if len(keys) == 0 || !p.hold() {
			continue
		}
		for r.drainParked(keys) && p.ctx.Err() == nil {
		}
		p.wg.Done()
	}
}

// drainParked releases up to drainLimit parked events of keys, in parking
// order, and unblocks the keys left with none. A key's events wait while
// their incident still holds: a key whose head was a retry workflow then
// takes the incident as its head. It reports whether more are left to read.
func (r *laneRouter) drainParked(keys []LaneKey) (more bool) {
	p := r.p
	b := p.b
	r.drainMu.Lock()
	defer r.drainMu.Unlock()
	ikeys := make([]incident.Key, len(keys))
	for i, k := range keys {
		ikeys[i] = incidentKey(k)
	}
	rows, err := b.opts.IncidentStore.ParkedOf(p.ctx, p.topic, p.id, ikeys, drainLimit)
	var states map[string]contract.IncidentState
	if err == nil {
		ids := map[string]bool{}
		for _, row := range rows {
			ids[row.IncidentID] = true
		}
		list := make([]string, 0, len(ids))
		for id := range ids {
			list = append(list, id)
		}
		states, err = b.opts.IncidentStore.States(p.ctx, list)
	}
	if err != nil {
		if p.ctx.Err() == nil {
			p.log.Debug("cannot read parked events, next sweep retries", "error", err.Error())
		}
		return false
	}
	// Per key, the events of its first event's incident, in order: applied,
	// dead-lettered, or (still holding) left to wait under the incident.
	var apply, dead []incident.Parked
	firstOf := map[LaneKey]string{}
	wait := map[LaneKey]string{}
	cut := false
	for _, row := range rows {
		k := laneKeyOf(row.Retry)
		if id, ok := firstOf[k]; ok && id != row.IncidentID {
			cut = true
			continue
		}
		firstOf[k] = row.IncidentID
		switch states[row.IncidentID] {
		case contract.IncidentHolding:
			wait[k] = row.IncidentID
		case contract.IncidentDeadLettered:
			dead = append(dead, row)
		default:
			apply = append(apply, row)
		}
	}
	if len(wait) > 0 && !r.waitForIncident(wait) {
		return false
	}
	if len(dead) > 0 && !r.deadLetterParked(dead) {
		return false
	}
	if len(apply) > 0 && !r.applyParked(apply) {
		return false
	}
	if (len(rows) == drainLimit || cut) && len(apply)+len(dead) > 0 {
		return true
	}
	r.unblockDrained(keys)
	return false
}

// waitForIncident makes each key's holding incident its head: its parked
// events are released with the incident's.
func (r *laneRouter) waitForIncident(keys map[LaneKey]string) bool {
	p := r.p
	r.mu.Lock()
	defer r.mu.Unlock()
	var change []BlockedKey
	for k, id := range keys {
		if r.head[k] != id {
			change = append(change, BlockedKey{LaneKey: k, Head: id})
		}
	}
	if len(change) == 0 {
		return true
	}
	if err := p.b.opts.Blocks.Add(p.ctx, nil, p.topic, p.id, change); err != nil {
		p.log.Warn("cannot record parked keys' incident as their head, next sweep retries", "error", err.Error())
		return false
	}
	for _, bk := range change {
		r.head[bk.LaneKey] = bk.Head
	}
	return true
}

// deadLetterParked writes parked events of a dead-lettered incident to the
// DLQ in order, then deletes them.
func (r *laneRouter) deadLetterParked(rows []incident.Parked) bool {
	p := r.p
	now := time.Now().UTC()
	seqs := make([]int64, 0, len(rows))
	for _, row := range rows {
		in := row.Retry
		attempts := []contract.Attempt{}
		if in.FirstAttempt != nil {
			attempts = append(attempts, *in.FirstAttempt)
		}
		attempts = append(attempts, contract.Attempt{Number: len(attempts) + 1, StartedAt: now, ErrorKind: string(contract.KindSQL),
			Error: "held by incident " + row.IncidentID + ", dead-lettered by the dead-letter-all signal"})
		if in.FirstAttempt != nil {
			attempts[len(attempts)-1].ErrorKind = in.FirstAttempt.ErrorKind
		}
		dl := contract.DeadLetterInput{Event: in.Event, Key: in.Key, Projection: in.Projection, Attempts: attempts, Source: in.Source}
		if !p.publishDeadLetter(p.parkedLog(in), "held event", in.Key, dlq.RunRecord(dl, now)) {
			return false
		}
		seqs = append(seqs, row.Seq)
		p.b.inc.parked.WithLabelValues(in.Projection, "dead_lettered").Inc()
	}
	if err := p.b.opts.IncidentStore.Unpark(p.ctx, seqs); err != nil {
		// Published again by the next drain: a DLQ record may repeat, never go missing.
		p.log.Warn("cannot delete dead-lettered parked events, next sweep retries", "error", err.Error())
		return false
	}
	return true
}

// applyParked applies parked events in order in one transaction that
// deletes those applied. A key's first event that fails becomes its head
// (a retry workflow, as any failure); its later events stay parked behind
// it.
func (r *laneRouter) applyParked(rows []incident.Parked) bool {
	p := r.p
	b := p.b
	evs := make([]event.Envelope, len(rows))
	index := make(map[*event.Envelope]int, len(rows))
	for i := range rows {
		evs[i] = rows[i].Retry.Event
	}
	for i := range evs {
		index[&evs[i]] = i
	}
	held := map[LaneKey]int{} // hold every event of the key after this index
	hold := func(proj string, ev *event.Envelope) bool {
		i := index[ev]
		if proj != rows[i].Retry.Projection {
			return true
		}
		at, ok := held[laneKeyOf(rows[i].Retry)]
		return ok && i > at
	}
	var fails map[LaneKey]int
	beforeCommit := func(ctx context.Context, tx pgx.Tx, outs []projection.Result) error {
		fails = map[LaneKey]int{}
		for _, o := range outs {
			if o.Status == projection.StatusFailed {
				k := laneKeyOf(rows[o.Index].Retry)
				if at, ok := fails[k]; !ok || o.Index < at {
					fails[k] = o.Index
				}
			}
		}
		rerun := false
		var seqs []int64
		for _, o := range outs {
			if o.Status != projection.StatusApplied && o.Status != projection.StatusDuplicate {
				continue
			}
			k := laneKeyOf(rows[o.Index].Retry)
			if at, ok := fails[k]; ok && o.Index > at {
				held[k] = at
				rerun = true
			}
			seqs = append(seqs, rows[o.Index].Seq)
		}
		if rerun {
			return errRerun
		}
		return incident.Unpark(ctx, tx, seqs)
	}
	var (
		outs      []projection.Result
		err       error
		startedAt time.Time
	)
	for run := 0; ; run++ {
		startedAt = time.Now().UTC()
		outs, err = b.opts.Engine.ApplyBatch(p.ctx, evs, projection.ApplyOptions{Hold: hold, BeforeCommit: beforeCommit})
		if !errors.Is(err, errRerun) || run >= maxOrderedRuns {
			break
		}
	}
	if err != nil {
		if p.ctx.Err() == nil {
			p.log.Warn("cannot apply parked events, next sweep retries", "error", err.Error())
		}
		return false
	}
	released := map[string]int{}
	for _, o := range outs {
		if o.Status == projection.StatusApplied || o.Status == projection.StatusDuplicate {
			released[o.Projection]++
		}
	}
	for proj, n := range released {
		b.inc.parked.WithLabelValues(proj, "released").Add(float64(n))
	}
	if n := len(outs); n > 0 {
		p.log.Info("parked events released", "event", "projection_parked_released", "released", sum(released), "failedAgain", len(fails))
	}
	for _, o := range outs {
		k := laneKeyOf(rows[o.Index].Retry)
		if o.Status != projection.StatusFailed || fails[k] != o.Index {
			continue
		}
		if !r.newHeadFromParked(rows[o.Index], o, startedAt) {
			return false
		}
	}
	return true
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// newHeadFromParked hands a parked event that failed again to its own
// retry workflow, which becomes the key's head; the key's later parked
// events wait for it to settle.
func (r *laneRouter) newHeadFromParked(row incident.Parked, o projection.Result, startedAt time.Time) bool {
	p := r.p
	b := p.b
	in := row.Retry
	in.Mode = config.ModeInline
	in.FirstAttempt = firstAttempt(o, startedAt)
	in.Retry = b.opts.Retry
	in.ReplayWindow = b.opts.ReplayWindow
	log := p.parkedLog(in)
	outage, end := p.startUntilDurable(log, nil, in)
	head := ""
	switch end {
	case handoffStopped:
		return false
	case handoffStarted:
		b.m.handedOff.WithLabelValues(string(in.Mode)).Inc()
		logHandOff(log, in, outage)
		head = in.WorkflowID()
	}
	k := laneKeyOf(in)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := b.opts.Blocks.Add(p.ctx, nil, p.topic, p.id, []BlockedKey{{LaneKey: k, Head: head}}); err != nil {
		p.log.Warn("cannot record a parked event's retry workflow as its key's head, next sweep retries", "error", err.Error())
		return false
	}
	if err := b.opts.IncidentStore.Unpark(p.ctx, []int64{row.Seq}); err != nil {
		p.log.Warn("cannot delete a parked event handed to its retry workflow, next sweep retries", "error", err.Error())
		return false
	}
	r.head[k] = head
	delete(r.recheck, k)
	return true
}

// unblockDrained unblocks those of keys that have no parked event left and
// that no batch holds, under mu so that no batch parks one meanwhile.
func (r *laneRouter) unblockDrained(keys []LaneKey) {
	p := r.p
	b := p.b
	r.mu.Lock()
	defer r.mu.Unlock()
	var cands []LaneKey
	for _, k := range keys {
		if _, ok := r.parked[k]; ok && r.queued[k] == 0 {
			cands = append(cands, k)
		}
	}
	if len(cands) == 0 {
		return
	}
	ikeys := make([]incident.Key, len(cands))
	for i, k := range cands {
		ikeys[i] = incidentKey(k)
	}
	left, err := b.opts.IncidentStore.WithParked(p.ctx, p.topic, p.id, ikeys)
	if err != nil {
		p.log.Debug("cannot check parked keys, next sweep retries", "error", err.Error())
		return
	}
	for _, k := range cands {
		if left[incidentKey(k)] {
			continue
		}
		if isIncidentHead(r.head[k]) || r.head[k] == "" {
			if err := b.opts.Blocks.Remove(p.ctx, nil, p.topic, p.id, k); err != nil {
				p.log.Warn("cannot clear a released key's block, next sweep retries", "error", err.Error())
				return
			}
			r.forgetLocked(k)
			b.m.blockedKeys.Dec()
			b.m.unblocked.WithLabelValues("released").Inc()
			continue
		}
		// Its head is a retry workflow: the sweeper unblocks it once that settles.
		delete(r.parked, k)
	}
}

// loadParked marks the partition's keys that have parked events.
func (r *laneRouter) loadParked() bool {
	p := r.p
	if !p.b.inc.holding() {
		return true
	}
	var keys map[incident.Key]string
	if !p.until(p.log, "database", "cannot load parked keys", func(ctx context.Context) (err error) {
		keys, err = p.b.opts.IncidentStore.ParkedKeys(ctx, p.topic, p.id)
		return err
	}) {
		return false
	}
	r.mu.Lock()
	for k, id := range keys {
		r.parked[LaneKey{Projection: k.Projection, ForkID: k.ForkID, EntityID: k.EntityID}] = id
	}
	r.mu.Unlock()
	if len(keys) > 0 {
		p.log.Info("parked keys loaded", "parkedKeys", len(keys))
	}
	return true
}

var errNoIncidentStore = fmt.Errorf("starter: CAUSET_INCIDENT_POLICY=hold needs Options.IncidentStore, entity ordering and inline mode")

func (p *partition) parkedLog(in contract.RetryInput) *slog.Logger {
	return p.log.With("projectionName", in.Projection, "eventType", in.Event.EventType, "entityId", in.Event.EntityID,
		"forkId", in.Event.ForkID, "eventId", in.Event.EventID, "offset", in.Source.Offset)
}

// pairKey is one (event index, projection) pair of a batch.
type pairKey struct {
	index      int
	projection string
}

func pairOf(o projection.Result) pairKey { return pairKey{o.Index, o.Projection} }

// parking is what one run of a batch parks (policy hold): the failures of
// holding incidents, the later pairs of their keys, and the pairs of keys
// already parked or whose head failed the way a holding incident does.
// Decided in the batch's transaction, acted on once it committed.
type parking struct {
	keys   map[LaneKey]string // keys this batch parks first → their incident
	heads  map[LaneKey]string // of those, keys whose head is the incident (their first failure is parked)
	headFP map[LaneKey]string // keys whose first failure here starts a retry workflow → its fingerprint
	pairs  map[pairKey]bool
	rows   []incident.Parked
	opened []contract.IncidentInput
	counts map[string]*parkCount
}

type parkCount struct {
	projection     string
	failed, held   int
	sampleEventIDs []string
}

// parkSnapshot is what the router knew of the batch's blocked keys when the
// batch began.
type parkSnapshot struct {
	blocked map[LaneKey]struct{}
	parked  map[LaneKey]string // keys with parked events → incident of the next ones
	headFP  map[LaneKey]string // keys whose head failed with this fingerprint
}

// decide parks, in tx, the pairs of outs that belong to a holding incident
// or to a key already parked. It is run again with each run of the batch.
func (pk *parking) decide(ctx context.Context, tx pgx.Tx, p *partition, items []item, evs []event.Envelope, outs []projection.Result,
	first map[LaneKey]int, snap parkSnapshot, startedAt time.Time) error {
	*pk = parking{keys: map[LaneKey]string{}, heads: map[LaneKey]string{}, headFP: map[LaneKey]string{},
		pairs: map[pairKey]bool{}, counts: map[string]*parkCount{}}
	inc := p.b.inc
	if !inc.holding() {
		return nil
	}
	byKey := make(map[LaneKey]string, len(snap.parked))
	for k, id := range snap.parked {
		byKey[k] = id
	}
	openedFP := map[string]string{} // incidents opened in this run
	holding := func(fp string) string {
		if id := openedFP[fp]; id != "" {
			return id
		}
		return inc.holdingID(fp)
	}
	now := time.Now()
	var failed []bool // per row of pk.rows: a failure (else a later pair held behind one)
	for _, o := range outs {
		if o.Status != projection.StatusFailed && o.Status != projection.StatusHeld {
			continue
		}
		k := keyOf(o.Projection, &evs[o.Index])
		id, ok := byKey[k]
		if !ok {
			// A key whose head failed as a holding incident does: its later
			// events are parked behind that head instead of going to a lane.
			fp := pk.headFP[k]
			if fp == "" {
				fp = snap.headFP[k]
			}
			if fp != "" {
				if id = holding(fp); id != "" {
					ok = true
					byKey[k], pk.keys[k] = id, id
				}
			}
		}
		if !ok {
			if _, blocked := snap.blocked[k]; blocked || o.Status != projection.StatusFailed || first[k] != o.Index {
				continue
			}
			var open *contract.IncidentInput
			id, open = inc.heldBy(failure{o.Projection, o, &evs[o.Index]}, now)
			if open != nil {
				holds, err := inc.openInTx(ctx, tx, *open)
				if err != nil {
					return err
				}
				if holds {
					id = contract.IncidentWorkflowID(open.Projection, open.Fingerprint)
					openedFP[open.Fingerprint] = id
					pk.opened = append(pk.opened, *open)
				}
			}
			if id == "" {
				pk.headFP[k] = incident.Of(o.Projection, kindOf(o), errOf(o)).ID
				continue
			}
			byKey[k], pk.keys[k], pk.heads[k] = id, id, id
		}
		var attempt *contract.Attempt
		if o.Status == projection.StatusFailed {
			attempt = firstAttempt(o, startedAt)
		}
		pk.rows = append(pk.rows, incident.Parked{IncidentID: id, Topic: p.topic, Partition: p.id, Retry: p.retryInput(items[o.Index], o.Projection, attempt)})
		failed = append(failed, o.Status == projection.StatusFailed)
		pk.pairs[pairOf(o)] = true
	}
	inserted, err := p.b.opts.IncidentStore.Park(ctx, tx, pk.rows)
	if err != nil {
		return err
	}
	// Only rows parked now count: a batch read again after a restart finds
	// its events parked already.
	for i, row := range pk.rows {
		if !inserted[i] {
			continue
		}
		c := pk.counts[row.IncidentID]
		if c == nil {
			c = &parkCount{projection: row.Retry.Projection}
			pk.counts[row.IncidentID] = c
		}
		if failed[i] {
			c.failed++
			if len(c.sampleEventIDs) < contract.MaxIncidentSamples {
				c.sampleEventIDs = append(c.sampleEventIDs, row.Retry.Event.EventID)
			}
		} else {
			c.held++
		}
	}
	return nil
}

// committed records the parked keys and reports the batch's parked events
// to their incidents, once the batch committed.
func (pk *parking) committed(r *laneRouter) {
	if len(pk.rows) == 0 && len(pk.opened) == 0 && len(pk.headFP) == 0 {
		return
	}
	r.mu.Lock()
	for k, id := range pk.keys {
		r.parked[k] = id
	}
	for k, fp := range pk.headFP {
		r.headFP[k] = fp
	}
	r.mu.Unlock()
	inc := r.p.b.inc
	for _, in := range pk.opened {
		inc.openedIncident(in)
	}
	for id, c := range pk.counts {
		inc.countHeld(id, c.projection, c.failed, c.held, c.sampleEventIDs)
	}
}

// noteFailure counts a failure handed off the normal way towards its
// fingerprint's incident (policy dead-letter; under hold, the batch's
// transaction counts them).
func (p *partition) noteFailure(o projection.Result, env *event.Envelope) {
	inc := p.b.inc
	if inc == nil || inc.holding() {
		return
	}
	if _, open := inc.heldBy(failure{o.Projection, o, env}, time.Now()); open != nil {
		inc.openedIncident(*open)
	}
}

// add records, under the router's mu, what blocked key k parks.
func (s *parkSnapshot) add(r *laneRouter, k LaneKey) {
	if id := r.parked[k]; id != "" {
		if s.parked == nil {
			s.parked = map[LaneKey]string{}
		}
		s.parked[k] = id
	}
	if fp := r.headFP[k]; fp != "" {
		if s.headFP == nil {
			s.headFP = map[LaneKey]string{}
		}
		s.headFP[k] = fp
	}
}
