package projection

// The engine's cache of the deployed projections: loading the newest
// versions, refreshing on deploy notifications and on each apply.

import (
	"context"
	"fmt"
	"slices"
	"sort"
)

// catalogState is an immutable snapshot of the newest deployed versions.
type catalogState struct {
	version int64                // catalog counter this snapshot reflects; -1 before the first load
	byName  map[string]*compiled // newest version per projection
	byEvent map[string][]string  // event type → projection names, sorted
	broken  map[string]error     // projections whose stored document does not compile
}

// Refresh reloads the cache if a deploy happened since the last load.
func (e *Engine) Refresh(ctx context.Context) error {
	var v int64
	if err := e.pool.QueryRow(ctx, catalogVersionSQL).Scan(&v); err != nil {
		return fmt.Errorf("read projection catalog: %w", err)
	}
	_, err := e.refresh(ctx, e.pool, v)
	return err
}

// Projections returns the names of the cached projections whose newest
// version lists eventType, sorted. It does not touch the database; the cache
// is refreshed by deploy notifications, Refresh and every apply.
func (e *Engine) Projections(eventType string) []string {
	return slices.Clone(e.snapshot().byEvent[eventType])
}

// Version returns the cached newest deployed version of a projection (0 if
// none).
func (e *Engine) Version(projection string) int {
	if c := e.snapshot().byName[projection]; c != nil {
		return c.version
	}
	return 0
}

func (e *Engine) snapshot() *catalogState {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.state
}

const catalogVersionSQL = "SELECT version FROM causet_projection_catalog"

// refresh returns a snapshot at least as new as catalog counter v, loading the
// newest documents with q when the cache is older.
func (e *Engine) refresh(ctx context.Context, q querier, v int64) (*catalogState, error) {
	if st := e.snapshot(); st.version == v {
		return st, nil
	}
	e.reloadMu.Lock()
	defer e.reloadMu.Unlock()
	old := e.snapshot()
	if old.version >= v && old.version != -1 {
		return old, nil
	}
	deps, err := loadLatest(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("load deployed projections: %w", err)
	}
	st := &catalogState{version: v, byName: map[string]*compiled{}, byEvent: map[string][]string{}, broken: map[string]error{}}
	for _, d := range deps {
		c := old.byName[d.Name]
		if c == nil || c.version != d.Version {
			c, err = compile(d.Document, d.Version, WithCostLimit(e.costLimit), runtimeOnly())
			if err != nil {
				st.broken[d.Name] = fmt.Errorf("projection %s version %d: %w", d.Name, d.Version, err)
				e.logger.Error("deployed projection does not compile", "projectionName", d.Name, "irVersion", d.Version, "error", err.Error())
				c = &compiled{doc: d.Document, version: d.Version}
			}
		} else if old.broken[d.Name] != nil {
			st.broken[d.Name] = old.broken[d.Name]
		}
		st.byName[d.Name] = c
		for _, et := range d.Document.SourceEvents {
			st.byEvent[et] = append(st.byEvent[et], d.Name)
		}
	}
	for _, names := range st.byEvent {
		sort.Strings(names)
	}
	e.mu.Lock()
	if e.state.version < st.version || e.state.version == -1 {
		e.state = st
	}
	e.mu.Unlock()
	return st, nil
}
