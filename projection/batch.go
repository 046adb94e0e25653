package projection

// Applying a batch: one transaction per attempt, the (projection, event)
// pairs, their evaluation, and the savepoint algorithm that isolates the
// failing writes.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"

	"cel.dev/cel-go/interpreter"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
)

// pair is one (projection, event) to apply.
type pair struct {
	res  Result
	op   *compiledOp
	ev   *event.Envelope
	vals []any // evaluated column values
	args []any // values adapted to the statement's parameter types
	sd   *pgconn.StatementDescription
	ec   *evalCache
	// prefail is set when the pair cannot be written (CEL error, statement
	// PostgreSQL rejects); it still goes through the ledger lookup, so that
	// an event applied by an earlier version stays a duplicate.
	prefail *ApplyError
	done    bool // status final

	dedupeKey uuid.UUID
	hasKey    bool
}

func (e *Engine) run(ctx context.Context, evs []event.Envelope, only string, opts ApplyOptions) ([]Result, error) {
	var (
		res   []Result
		err   error
		retry bool
	)
	for attempt := 0; attempt < 3; attempt++ {
		res, retry, err = e.attempt(ctx, evs, only, opts)
		// A connection that timed out is a silent link, and another
		// pooled connection crosses the same link: the caller's outage
		// probe decides, without two more waits of the link timeout.
		if !retry || ctx.Err() != nil || timedOut(err) {
			break
		}
	}
	return res, err
}

// timedOut reports a network timeout (a read or dial on a silent link).
func timedOut(err error) bool {
	var ne net.Error
	return pgconn.Timeout(err) || errors.As(err, &ne) && ne.Timeout()
}

// attempt runs one apply transaction. retry is true when it failed on a
// connection error before anything was sent in a transaction, so running it
// again (on another pooled connection) is safe.
func (e *Engine) attempt(ctx context.Context, evs []event.Envelope, only string, opts ApplyOptions) ([]Result, bool, error) {
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		res, err := failAll(e.pairs(e.snapshot(), evs, only, opts.Hold), err)
		return res, false, err
	}
	defer conn.Release()

	var catVersion int64
	if err := conn.QueryRow(ctx, catalogVersionSQL).Scan(&catVersion); err != nil {
		res, ferr := failAll(e.pairs(e.snapshot(), evs, only, opts.Hold), fmt.Errorf("read projection catalog: %w", err))
		return res, Classify(err) == contract.KindConnection, ferr
	}
	st, err := e.refresh(ctx, conn, catVersion)
	if err != nil {
		res, err := failAll(e.pairs(e.snapshot(), evs, only, opts.Hold), err)
		return res, false, err
	}
	if opts.candidate != nil {
		st = st.with(opts.candidate)
	}
	pairs := e.pairs(st, evs, only, opts.Hold)
	if len(pairs) == 0 {
		return nil, false, nil
	}

	// Prepare the statements (a no-op for those already prepared on this
	// connection) outside the transaction, so that a statement PostgreSQL
	// rejects (e.g. a missing column) fails only its own pairs.
	ledgerSD, err := conn.Conn().Prepare(ctx, ledgerInsertSQL, ledgerInsertSQL)
	if err != nil {
		res, ferr := failAll(pairs, err)
		return res, Classify(err) == contract.KindConnection, ferr
	}
	stmts := map[string]*pgconn.StatementDescription{}
	stmtErr := map[string]error{}
	for _, p := range pairs {
		if p.done || p.prefail != nil {
			continue
		}
		sql := p.op.sql
		if stmts[sql] == nil && stmtErr[sql] == nil {
			sd, err := conn.Conn().Prepare(ctx, sql, sql)
			if err != nil && Classify(err) == contract.KindConnection {
				res, ferr := failAll(pairs, err)
				return res, false, ferr
			}
			stmts[sql], stmtErr[sql] = sd, err
		}
		if err := stmtErr[sql]; err != nil {
			p.prefail = &ApplyError{Kind: contract.KindSQL, Err: err}
		}
		p.sd = stmts[sql]
	}

	tx, err := conn.Begin(ctx)
	if err != nil {
		res, ferr := failAll(pairs, err)
		return res, false, ferr
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	if opts.Guard {
		if err := guardSequences(ctx, tx, pairs); err != nil {
			res, ferr := failAll(pairs, err)
			return res, Classify(err) == contract.KindConnection, ferr
		}
	}
	badStmts, err := e.execPairs(ctx, conn.Conn(), ledgerSD, pairs, opts.HoldAfterFailure)
	if err != nil {
		res, ferr := failAll(pairs, err)
		return res, false, ferr
	}

	if err := raiseMarks(ctx, tx, pairs); err != nil {
		res, ferr := failAll(pairs, err)
		return res, false, ferr
	}
	if opts.Guard {
		// The guard read the marks before writing, without a lock: an apply
		// of a later event of the same entity may have committed since. The
		// mark upsert has waited for it, so it shows now; the attempt is run
		// again, and its guard refuses what would go back.
		if err := recheckSequences(ctx, tx, pairs); err != nil {
			res, ferr := failAll(pairs, err)
			return res, errors.Is(err, errSequenceRaced), ferr
		}
	}
	res := results(pairs)
	if opts.BeforeCommit != nil {
		if err := opts.BeforeCommit(ctx, tx, slices.Clone(res)); err != nil {
			res, ferr := failAll(pairs, fmt.Errorf("before commit: %w", err))
			return res, false, ferr
		}
	}
	if opts.rollBack {
		if err := tx.Rollback(ctx); err != nil {
			res, ferr := failAll(pairs, err)
			return res, false, ferr
		}
		for _, sql := range badStmts {
			_ = conn.Conn().Deallocate(ctx, sql)
		}
		return res, false, errRolledBack
	}
	if err := tx.Commit(ctx); err != nil {
		res, ferr := failAll(pairs, err)
		return res, false, ferr
	}
	// Drop statements that failed at execution so the next attempt prepares
	// them against the current schema.
	for _, sql := range badStmts {
		_ = conn.Conn().Deallocate(ctx, sql)
	}
	return res, false, nil
}

// pairs builds the (projection, event) pairs in input order. Invalid events
// and undeployed projections fail here; columns are evaluated later
// (evaluate), while the database inserts the ledger rows.
func (e *Engine) pairs(st *catalogState, evs []event.Envelope, only string, hold func(string, *event.Envelope) bool) []*pair {
	var out []*pair
	for i := range evs {
		ev := &evs[i]
		var names []string
		if only != "" {
			names = []string{only}
		} else {
			names = st.byEvent[ev.EventType]
		}
		if len(names) == 0 {
			continue
		}
		ec := &evalCache{ev: ev}
		ec.check()
		for _, name := range names {
			p := &pair{ev: ev, ec: ec, res: Result{Projection: name, Index: i, EventID: ev.EventID}}
			out = append(out, p)
			c := st.byName[name]
			if c != nil {
				p.res.IRVersion = c.version
			}
			switch {
			case hold != nil && hold(name, ev):
				p.res.Status = StatusHeld
				p.done = true
			case ec.err != nil:
				p.fail(&ApplyError{Kind: Classify(ec.err), Err: ec.err})
			case c == nil:
				p.fail(&ApplyError{Kind: contract.KindIREval, Err: fmt.Errorf("%w: %s", ErrNotDeployed, name)})
			case st.broken[name] != nil:
				// Not evaluated, but still looked up in the ledger: a
				// duplicate stays a duplicate.
				p.prefail = &ApplyError{Kind: contract.KindIREval, Err: st.broken[name]}
			default:
				p.op = c.ops[ev.EventType]
				if p.op == nil {
					p.res.Status = StatusSkipped
					p.done = true
				}
			}
		}
	}
	return out
}

// evalCache holds one event's CEL activation, shared by its pairs.
type evalCache struct {
	ev         *event.Envelope
	fields     map[string]any
	activation interpreter.Activation
	err        error // the event is invalid
}

// check validates the envelope, decoding its payload once.
func (c *evalCache) check() {
	ev := c.ev
	for _, s := range []string{ev.EventID, ev.EventType, ev.EntityID, ev.ForkID} {
		if strings.TrimSpace(s) == "" {
			c.err = ev.Validate()
			if c.err == nil {
				c.err = &event.InvalidError{Reason: "required field missing"}
			}
			return
		}
	}
	c.fields, c.err = ev.Fields()
	if c.err != nil && !event.IsInvalid(c.err) {
		c.err = &event.InvalidError{Reason: c.err.Error()}
	}
}

// evaluate computes the pair's column values and binds them to its
// statement's parameter types; a failure becomes p.prefail.
func (p *pair) evaluate(ctx context.Context) {
	if p.done || p.prefail != nil {
		return
	}
	if p.ec.activation == nil {
		act, err := interpreter.NewActivation(map[string]any{"event": p.ec.fields})
		if err != nil {
			p.prefail = &ApplyError{Kind: contract.KindIREval, Err: err}
			return
		}
		p.ec.activation = act
	}
	vals, err := p.op.eval(ctx, p.ec.activation)
	if err != nil {
		p.prefail = &ApplyError{Kind: Classify(err), Err: err}
		return
	}
	p.vals = vals
	if err := p.bind(); err != nil {
		p.prefail = &ApplyError{Kind: contract.KindSQL, Err: err}
	}
}

func (p *pair) fail(ae *ApplyError) {
	p.res.Status = StatusFailed
	p.res.Err = ae
	p.done = true
}

// bind adapts the values to the statement's parameter types.
func (p *pair) bind() error {
	if len(p.sd.ParamOIDs) != len(p.vals) {
		return fmt.Errorf("statement has %d parameters, want %d", len(p.sd.ParamOIDs), len(p.vals))
	}
	args := make([]any, len(p.vals))
	for i, v := range p.vals {
		a, err := adapt(p.sd.ParamOIDs[i], v)
		if err != nil {
			return fmt.Errorf("column %s: %w", p.op.cols[i].name, err)
		}
		args[i] = a
	}
	p.args = args
	return nil
}

const savepointName = "causet_apply"

// key is the pair's dedupe-ledger key, computed once (it is hashed).
func (p *pair) key() uuid.UUID {
	if !p.hasKey {
		p.dedupeKey, p.hasKey = DedupeKey(p.res.Projection, p.ev.ForkID, p.ev.EventID), true
	}
	return p.dedupeKey
}

// returnedKey reads a key the ledger insert returned: 16 bytes in binary
// format, its text form otherwise.
func returnedKey(b []byte) (uuid.UUID, error) {
	if len(b) == 16 {
		return uuid.UUID(b), nil
	}
	k, err := uuid.ParseBytes(b)
	if err != nil {
		return uuid.UUID{}, fmt.Errorf("ledger insert returned key %q: %w", b, err)
	}
	return k, nil
}

// execPairs applies the pairs in rounds of two round trips.
//
// Round trip 1 inserts the round's ledger rows in one multi-row INSERT: the
// rows it returns are new, the others are duplicates. It is sent before the
// CEL expressions are evaluated, so the database works while the client
// evaluates. Round trip 2 removes the new ledger rows of pairs that failed to
// evaluate or prepare, then runs the writes of the new pairs as pipelined
// prepared statements.
//
// When write k fails, the round is rolled back to the savepoint, its pair is
// marked failed, and the next round resends the others with a window that
// halves on each failure (but keeps the writes known to be good) and doubles
// on success, so even a batch in which everything fails costs O(n)
// statements. It returns the SQL of statements that failed at execution, and
// an error when the whole transaction is lost.
//
// With holdAfterFailure, a pair that fails holds every later pair of its
// key (projection, fork, entity): they get StatusHeld and no ledger row,
// as if Hold had held them, so an entity's later events never apply before
// its earlier one that failed.
func (e *Engine) execPairs(ctx context.Context, conn *pgx.Conn, ledgerSD *pgconn.StatementDescription, pairs []*pair, holdAfterFailure bool) ([]string, error) {
	var pending []*pair
	failed := failedKeys{}
	for _, p := range pairs {
		if !p.done {
			pending = append(pending, p)
		} else if holdAfterFailure && p.res.Status == StatusFailed {
			failed.add(p)
		}
	}
	var (
		eqb       pgx.ExtendedQueryBuilder
		typeMap   = conn.TypeMap()
		pgConn    = conn.PgConn()
		control   = []string{"SAVEPOINT " + savepointName}
		window    = len(pending)
		badStmts  []string
		evaluated = false
		evalErr   error
	)
	for len(pending) > 0 {
		if holdAfterFailure && len(failed) > 0 {
			pending = failed.holdLater(pending)
			if len(pending) == 0 {
				break
			}
		}
		chunk := pending[:min(window, len(pending))]

		// Round trip 1: savepoint bookkeeping and the ledger rows.
		// The keys go as plain 16-byte arrays: pgx encodes those in binary
		// directly, where a uuid.UUID takes its driver.Valuer's detour
		// through text and a failed plan per element.
		keys, buckets := make([][16]byte, len(chunk)), make([]int32, len(chunk))
		projs, vers := make([]string, len(chunk)), make([]int32, len(chunk))
		for i, p := range chunk {
			keys[i] = p.key()
			buckets[i], projs[i], vers[i] = dedupeBucket(p.ev), p.res.Projection, int32(p.res.IRVersion)
		}
		batch := &pgconn.Batch{}
		for _, sql := range control {
			batch.ExecParams(sql, nil, nil, nil, nil)
		}
		if err := eqb.Build(typeMap, ledgerSD, []any{keys, buckets, projs, vers}); err != nil {
			return nil, err
		}
		batch.ExecStatement(ledgerSD, eqb.ParamValues, eqb.ParamFormats, eqb.ResultFormats)
		mrr := pgConn.ExecBatch(ctx, batch)
		if !evaluated {
			// While the database inserts the ledger rows.
			for _, p := range pending {
				if ctx.Err() != nil {
					break
				}
				p.evaluate(ctx)
			}
			// Evaluation the context cut short left pairs without values:
			// the attempt is lost.
			evalErr = ctx.Err()
			evaluated = true
		}
		rs, err := mrr.ReadAll()
		if err == nil {
			err = evalErr
		}
		if err == nil && len(rs) != len(control)+1 {
			err = fmt.Errorf("ledger insert returned %d results, want %d", len(rs), len(control)+1)
		}
		if err != nil {
			return nil, err
		}
		// The new keys and the bucket each landed in. A key returned once
		// is new for the first of its pairs in the round only.
		inserted, bucketOf := map[uuid.UUID]int{}, map[uuid.UUID]string{}
		for _, row := range rs[len(control)].Rows {
			k, err := returnedKey(row[0])
			if err != nil {
				return nil, err
			}
			inserted[k]++
			bucketOf[k] = string(row[1])
		}
		isNew := make([]bool, len(chunk))
		var writes []*pair
		var writePos []int            // position in chunk of each write
		undo := map[string][]string{} // bucket (as returned) → keys, as text (the undo is not prepared)
		var undoBuckets []string
		for i, p := range chunk {
			k := p.key()
			if inserted[k] == 0 {
				continue
			}
			inserted[k]--
			isNew[i] = true
			if p.prefail != nil {
				b := bucketOf[k]
				if undo[b] == nil {
					undoBuckets = append(undoBuckets, b)
				}
				undo[b] = append(undo[b], k.String())
				continue
			}
			writes = append(writes, p)
			writePos = append(writePos, i)
		}
		// A pair that could not be evaluated or prepared is settled now:
		// failed, unless the ledger already had it (a duplicate). A repeat,
		// within this round, of a pair that failed so, failed too.
		failedNew := map[uuid.UUID]bool{}
		for i, p := range chunk {
			if p.prefail == nil {
				continue
			}
			switch k := p.key(); {
			case isNew[i]:
				failedNew[k] = true
				p.fail(p.prefail)
			case failedNew[k]:
				p.fail(p.prefail)
			default:
				p.done = true
				p.res.Status = StatusDuplicate
			}
		}
		if holdAfterFailure {
			for _, p := range chunk {
				if p.res.Status == StatusFailed {
					failed.add(p)
				}
			}
			if len(failed) > 0 {
				// Later pairs of a key that failed in this round are held: no
				// write, and their ledger rows go with the failed ones'.
				kept, keptPos := writes[:0:0], writePos[:0:0]
				for i, p := range chunk {
					if p.done || !failed.after(p) {
						continue
					}
					p.hold()
					if isNew[i] {
						k := p.key()
						b := bucketOf[k]
						if undo[b] == nil {
							undoBuckets = append(undoBuckets, b)
						}
						undo[b] = append(undo[b], k.String())
					}
				}
				for j, p := range writes {
					if !p.done {
						kept, keptPos = append(kept, p), append(keptPos, writePos[j])
					}
				}
				writes, writePos = kept, keptPos
			}
		}

		lockOrder(writes, writePos)

		// Round trip 2: undo the ledger rows of failed pairs, then the writes.
		failAt, failErr := -1, error(nil)
		if len(writes) > 0 || len(undo) > 0 {
			batch = &pgconn.Batch{}
			nUndo := 0
			for _, b := range undoBuckets {
				// One statement per bucket: it touches that partition only.
				bucket, err := strconv.ParseInt(b, 10, 32)
				if err != nil {
					return nil, fmt.Errorf("ledger insert returned bucket %q: %w", b, err)
				}
				if err := eqb.Build(typeMap, nil, []any{int32(bucket), undo[b]}); err != nil {
					return nil, err
				}
				batch.ExecParams(ledgerUndoSQL, eqb.ParamValues, nil, eqb.ParamFormats, eqb.ResultFormats)
				nUndo++
			}
			for k, p := range writes {
				if err := eqb.Build(typeMap, p.sd, p.args); err != nil {
					failAt, failErr = k, err // nothing sent; the ledger rows are rolled back below
					break
				}
				batch.ExecStatement(p.sd, eqb.ParamValues, eqb.ParamFormats, eqb.ResultFormats)
			}
			if failAt < 0 {
				n := 0
				mrr := pgConn.ExecBatch(ctx, batch)
				for mrr.NextResult() {
					if _, err := mrr.ResultReader().Close(); err != nil {
						failErr = err
						break
					}
					n++
				}
				if err := mrr.Close(); failErr == nil {
					failErr = err
				}
				if failErr == nil && n != nUndo+len(writes) {
					failErr = fmt.Errorf("pipeline returned %d results, want %d", n, nUndo+len(writes))
				}
				if failErr != nil {
					var pe *pgconn.PgError
					if Classify(failErr) == contract.KindConnection || !errors.As(failErr, &pe) || n < nUndo || n-nUndo >= len(writes) {
						return nil, failErr
					}
					failAt = n - nUndo
				}
			}
		}

		if failAt < 0 {
			for i, p := range chunk {
				if p.done {
					continue
				}
				p.done = true
				if isNew[i] {
					p.res.Status = StatusApplied
				} else {
					p.res.Status = StatusDuplicate
				}
			}
			pending = pending[len(chunk):]
			control = []string{"RELEASE SAVEPOINT " + savepointName, "SAVEPOINT " + savepointName}
			window = min(window*2, 1<<20)
			continue
		}

		bad := writes[failAt]
		bad.fail(&ApplyError{Kind: contract.KindSQL, Err: failErr})
		if holdAfterFailure {
			failed.add(bad)
		}
		badStmts = append(badStmts, bad.op.sql)
		e.logger.Debug("projection write failed; isolating it", "projectionName", bad.res.Projection,
			"eventId", bad.res.EventID, "error", failErr.Error())
		rest := make([]*pair, 0, len(pending))
		for _, p := range pending {
			if !p.done {
				rest = append(rest, p)
			}
		}
		pending = rest
		control = []string{"ROLLBACK TO SAVEPOINT " + savepointName}
		window = max(writePos[failAt], window/2, 1)
	}
	if strings.HasPrefix(control[0], "ROLLBACK") {
		// The last round failed and nothing followed to roll it back: do it
		// now, or the transaction stays aborted and its commit rolls back.
		if _, err := pgConn.Exec(ctx, control[0]).ReadAll(); err != nil {
			return nil, err
		}
	}
	return badStmts, nil
}

// lockOrder sorts a round's writes by the row each one locks (table, key),
// keeping the input order of writes to the same row. Concurrent batches (one
// per partition) then take row locks in one global order and cannot deadlock
// on rows they share, such as a counter that events of many entities
// increment; the effect on every row is unchanged.
func lockOrder(writes []*pair, pos []int) {
	if len(writes) < 2 {
		return
	}
	keys := make([]string, len(writes))
	var b strings.Builder
	for i, p := range writes {
		b.Reset()
		b.WriteString(p.op.table)
		for _, v := range p.args[:p.op.nkeys] {
			b.WriteByte(0)
			fmt.Fprint(&b, v)
		}
		keys[i] = b.String()
	}
	idx := make([]int, len(writes))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return keys[idx[a]] < keys[idx[b]] })
	w, ps := slices.Clone(writes), slices.Clone(pos)
	for i, j := range idx {
		writes[i], pos[i] = w[j], ps[j]
	}
}

// entityKey is the key entity ordering keeps in order: (projection, fork,
// entity).
type entityKey struct{ projection, fork, entity string }

func (p *pair) entityKey() entityKey {
	return entityKey{p.res.Projection, p.ev.ForkID, p.ev.EntityID}
}

// failedKeys maps each key with a failed pair to the event index of its
// first failure.
type failedKeys map[entityKey]int

func (f failedKeys) add(p *pair) {
	k := p.entityKey()
	if at, ok := f[k]; !ok || p.res.Index < at {
		f[k] = p.res.Index
	}
}

// after reports whether p is a later pair of a key that failed.
func (f failedKeys) after(p *pair) bool {
	at, ok := f[p.entityKey()]
	return ok && p.res.Index > at
}

// holdLater holds the pairs of pending that come after a failure of their
// key and returns the rest.
func (f failedKeys) holdLater(pending []*pair) []*pair {
	rest := pending[:0:0]
	for _, p := range pending {
		if !p.done && f.after(p) {
			p.hold()
			continue
		}
		rest = append(rest, p)
	}
	return rest
}

func (p *pair) hold() {
	p.res.Status = StatusHeld
	p.res.Err = nil
	p.done = true
}

func results(pairs []*pair) []Result {
	out := make([]Result, len(pairs))
	for i, p := range pairs {
		out[i] = p.res
	}
	return out
}

// failAll marks every pair failed with err (invalid events keep their own
// error, held pairs stay held) and returns the results and err as an *ApplyError.
func failAll(pairs []*pair, err error) ([]Result, error) {
	ae := newApplyError(err)
	out := make([]Result, len(pairs))
	for i, p := range pairs {
		r := p.res
		if r.Status == StatusHeld {
			out[i] = r
			continue
		}
		if !(r.Status == StatusFailed && r.Err != nil && r.Err.Kind == contract.KindInvalidEvent) {
			r.Status = StatusFailed
			r.Err = ae
		}
		out[i] = r
	}
	return out, ae
}
