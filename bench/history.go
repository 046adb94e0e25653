package bench

// The history phase: inline mode at 0% failing with the dedupe ledger
// already holding many applied events, loaded with COPY as a running system
// would hold them, and what maintenance frees at a shorter horizon.

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/projection"
)

const (
	// historyHours is how many hours the prior events fill: the 240 before
	// the phase's hour (10 days, inside the default 14-day horizon).
	historyHours = 240
	// historyPruneHorizon is the horizon of the pruning measurement: hours
	// older than it plus projection.DedupeGrace are dropped, 72 of the 240
	// loaded ones are kept.
	historyPruneHorizon = 24 * time.Hour
	// historyLoaders is how many COPY streams load the prior events at once.
	historyLoaders = 2
)

// HistoryRun is the history phase: the inline 0% run at each size of the
// ledger's history, then the ledger pruned to a shorter horizon.
type HistoryRun struct {
	// Hours is how many hours (partitions) before the phase's hour the
	// prior events fill, evenly; HorizonHours is the maintenance horizon
	// during the measurements.
	Hours        int           `json:"hours"`
	HorizonHours float64       `json:"horizonHours"`
	Steps        []HistoryStep `json:"steps"`
	Prune        HistoryPrune  `json:"prune"`
}

// HistoryStep is one size of the ledger's history and the inline run on it.
type HistoryStep struct {
	// PriorEvents is the applied events the ledger holds before the runs;
	// Loaded of them were loaded with COPY for this step, at LoadRowsPerSec.
	PriorEvents    int     `json:"priorEvents"`
	Loaded         int     `json:"loaded"`
	LoadSeconds    float64 `json:"loadSeconds"`
	LoadRowsPerSec float64 `json:"loadRowsPerSec"`
	// SettleSeconds is the VACUUM (ANALYZE) and CHECKPOINT after the load.
	SettleSeconds float64 `json:"settleSeconds"`
	// LedgerRows (counted), LedgerBytes (projection.ReadDedupeStats) and
	// Partitions describe the ledger when the runs start.
	LedgerRows    int64     `json:"ledgerRows"`
	LedgerBytes   int64     `json:"ledgerBytes"`
	Partitions    int       `json:"partitions"`
	BytesPerEvent float64   `json:"bytesPerEvent"`
	Inline        InlineRun `json:"inline"`
}

// HistoryPrune is projection.MaintainDedupe at a shorter horizon, after the
// last step.
type HistoryPrune struct {
	HorizonHours     float64 `json:"horizonHours"`
	Seconds          float64 `json:"seconds"`
	Dropped          int     `json:"dropped"`
	RowsBefore       int64   `json:"rowsBefore"`
	RowsAfter        int64   `json:"rowsAfter"`
	BytesBefore      int64   `json:"bytesBefore"`
	BytesAfter       int64   `json:"bytesAfter"`
	PartitionsBefore int     `json:"partitionsBefore"`
	PartitionsAfter  int     `json:"partitionsAfter"`
}

// ratio is the inline rate at the largest history over the rate at none.
func (h HistoryRun) ratio() float64 {
	if len(h.Steps) < 2 || h.Steps[0].PriorEvents != 0 {
		return 0
	}
	return ratio(h.Steps[len(h.Steps)-1].Inline.EventsPerSec, h.Steps[0].Inline.EventsPerSec)
}

// bytesPerEvent is the ledger's bytes per row at the first size with history.
func (h HistoryRun) bytesPerEvent() float64 {
	for _, s := range h.Steps {
		if s.PriorEvents > 0 {
			return s.BytesPerEvent
		}
	}
	return 0
}

// bounded reports whether pruning dropped partitions and took their bytes
// with them: what is left costs no more per row than before (10% slack for
// the empty hours ahead).
func (p HistoryPrune) bounded() bool {
	if p.Dropped == 0 || p.BytesAfter >= p.BytesBefore {
		return false
	}
	if p.RowsAfter == 0 || p.RowsBefore == 0 {
		return true
	}
	return float64(p.BytesAfter)/float64(p.RowsAfter) <= 1.1*float64(p.BytesBefore)/float64(p.RowsBefore)
}

// countLabel names a count compactly: 0, 500k, 1M, 10M.
func countLabel(n int) string {
	switch {
	case n >= 1e6 && n%1e6 == 0:
		return strconv.Itoa(n/1e6) + "M"
	case n >= 1e3 && n%1e3 == 0:
		return strconv.Itoa(n/1e3) + "k"
	default:
		return strconv.Itoa(n)
	}
}

// withDatabase is dsn (a URL or keyword/value string) naming database db.
func withDatabase(dsn, db string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", errors.New("DATABASE_URL is not a valid URL")
		}
		u.Path, u.RawPath = "/"+db, ""
		return u.String(), nil
	}
	return dsn + " dbname=" + db, nil // the last setting wins
}

// hourShare is the rows [lo, hi) of the load [from, to) that go to hour k
// of hours, so the load fills them evenly.
func hourShare(from, to, k, hours int) (lo, hi int) {
	n := to - from
	return from + n*k/hours, from + n*(k+1)/hours
}

// historyEventID is prior event i of a run.
func historyEventID(runID string, i int) string { return "h-" + runID + "-" + strconv.Itoa(i) }

// historyRows is the COPY source of prior events [from, to) in one hour:
// rows as the engine writes them (the key of the bench projection, fork and
// event, the hour's bucket, the IR version), applied at evenly spaced
// times of the hour. Keys come in hash order, like the engine's inserts, so
// the indexes are as full as a running system's.
type historyRows struct {
	runID    string
	bucket   int32
	version  int32
	start    time.Time
	from, to int
	i        int
	row      []any
}

func (r *historyRows) Next() bool {
	if r.i >= r.to {
		return false
	}
	id := historyEventID(r.runID, r.i)
	at := r.start.Add(time.Duration(r.i-r.from) * projection.DedupeBucket / time.Duration(r.to-r.from))
	r.row = append(r.row[:0], pgtype.UUID{Bytes: projection.DedupeKey(benchProjection, benchFork, id), Valid: true},
		r.bucket, benchProjection, r.version, at)
	r.i++
	return true
}

func (r *historyRows) Values() ([]any, error) { return r.row, nil }
func (r *historyRows) Err() error             { return nil }

// loadHistory copies prior events [from, to) into the ledger, spread evenly
// over the historyHours hours before base, by historyLoaders streams.
func loadHistory(ctx context.Context, pool *pgxpool.Pool, runID string, version int32, base int32, from, to int) error {
	hours := make(chan int)
	errc := make(chan error, historyLoaders)
	var wg sync.WaitGroup
	for range historyLoaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range hours {
				lo, hi := hourShare(from, to, k, historyHours)
				bucket := base - historyHours + int32(k)
				src := &historyRows{runID: runID, bucket: bucket, version: version,
					start: projection.DedupeHourStart(bucket), from: lo, to: hi, i: lo}
				if _, err := pool.CopyFrom(ctx, pgx.Identifier{"causet_projection_applied"},
					[]string{"key", "bucket", "projection", "ir_version", "applied_at"}, src); err != nil {
					errc <- fmt.Errorf("copy into the dedupe ledger (bucket %d): %w", bucket, err)
					return
				}
			}
		}()
	}
	var err error
send:
	for k := range historyHours {
		select {
		case hours <- k:
		case err = <-errc:
			break send
		case <-ctx.Done():
			err = ctx.Err()
			break send
		}
	}
	close(hours)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errc:
		default:
		}
	}
	return err
}

// historyDB creates the phase's database (so 50M rows and the maintenance
// at a short horizon touch nothing of the other phases, and dropping it is
// the cleanup), deploys the bench projection in it and returns it, the IR
// version and a func that drops it.
func (b *bench) historyDB(ctx context.Context) (benchDB, int32, func(), error) {
	name := "causet_bench_history_" + b.runID
	dsn, err := withDatabase(b.dbURL, name)
	if err != nil {
		return benchDB{}, 0, nil, err
	}
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := b.svc.Pool.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return benchDB{}, 0, nil, fmt.Errorf("create the history database: %w", err)
	}
	drop := func() {
		if _, err := b.svc.Pool.Exec(context.Background(), "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			b.log.Error("drop the history database", "database", name, "error", err.Error())
		}
	}
	pool, err := app.OpenPool(ctx, dsn, 0)
	if err != nil {
		drop()
		return benchDB{}, 0, nil, err
	}
	cleanup := func() { pool.Close(); drop() }
	version, err := deployBench(ctx, pool)
	if err != nil {
		cleanup()
		return benchDB{}, 0, nil, err
	}
	return benchDB{pool: pool, env: map[string]string{"DATABASE_URL": dsn}}, int32(version), cleanup, nil
}

func (b *bench) historyPhase(ctx context.Context) error {
	db, version, cleanup, err := b.historyDB(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	h := &b.res.History
	h.Hours, h.HorizonHours = historyHours, projection.DefaultDedupeHorizon.Hours()
	// The hour partitions of the horizon, as the services' maintenance
	// keeps them.
	if _, _, err := projection.MaintainDedupe(ctx, db.pool, projection.DefaultDedupeHorizon); err != nil {
		return err
	}
	var now time.Time
	if err := db.pool.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return err
	}
	base := projection.DedupeHour(now)
	loaded := 0
	for _, size := range b.sizes.History {
		step := HistoryStep{PriorEvents: size}
		if size > loaded {
			start := time.Now()
			if err := loadHistory(ctx, db.pool, b.runID, version, base, loaded, size); err != nil {
				return err
			}
			step.Loaded, step.LoadSeconds = size-loaded, time.Since(start).Seconds()
			step.LoadRowsPerSec = float64(step.Loaded) / step.LoadSeconds
			b.progress("  history: copied %d prior events into the dedupe ledger in %.1f s (%.0f rows/s)", step.Loaded, step.LoadSeconds, step.LoadRowsPerSec)
			loaded = size
		}
		if err := clearRuns(ctx, db.pool, base); err != nil {
			return err
		}
		start := time.Now()
		if err := b.settle(ctx, db.pool); err != nil {
			return err
		}
		step.SettleSeconds = time.Since(start).Seconds()
		rows, st, err := ledgerSize(ctx, db.pool)
		if err != nil {
			return err
		}
		step.LedgerRows, step.LedgerBytes, step.Partitions = rows, st.Bytes, st.Partitions
		if rows > 0 {
			step.BytesPerEvent = float64(st.Bytes) / float64(rows)
		}
		label := "history " + countLabel(size)
		run, err := b.inlineOn(ctx, "history"+strings.ToLower(countLabel(size)), label, db, 0, b.sizes.Inline[0])
		if err != nil {
			return err
		}
		step.Inline = run
		h.Steps = append(h.Steps, step)
		b.progress("history %s prior events (ledger %d rows, %.0f MB, %.1f bytes/event; settled in %.1f s): inline 0%% %.0f events/s, p50 %.1f ms, p99 %.1f ms",
			countLabel(size), rows, float64(st.Bytes)/1e6, step.BytesPerEvent, step.SettleSeconds, run.EventsPerSec, run.P50Ms, run.P99Ms)
	}
	return b.prune(ctx, db.pool)
}

// clearRuns empties bench_rows and the ledger's hours from base on, which
// hold only the measured events, so every size starts from the same
// current hour and only the history differs.
func clearRuns(ctx context.Context, pool *pgxpool.Pool, base int32) error {
	hours, err := projection.DedupeHourPartitions(ctx, pool)
	if err != nil {
		return err
	}
	var parts []string
	for _, h := range hours {
		if h >= base {
			parts = append(parts, pgx.Identifier{projection.DedupePartition(h)}.Sanitize())
		}
	}
	_, err = pool.Exec(ctx, "TRUNCATE "+strings.Join(append([]string{"bench_rows"}, parts...), ", "))
	return err
}

// settle vacuums and analyzes the ledger and checkpoints, so neither
// autovacuum of the loaded hours nor their dirty pages compete with the
// runs (a running system's older hours were vacuumed long ago).
func (b *bench) settle(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) causet_projection_applied, bench_rows"); err != nil {
		return fmt.Errorf("vacuum the dedupe ledger: %w", err)
	}
	if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
		b.log.Warn("checkpoint after the history load (needs superuser or pg_checkpoint)", "error", err.Error())
	}
	return nil
}

// ledgerSize counts the ledger's rows and reads its stats.
func ledgerSize(ctx context.Context, pool *pgxpool.Pool) (int64, projection.DedupeStats, error) {
	var rows int64
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM causet_projection_applied").Scan(&rows); err != nil {
		return 0, projection.DedupeStats{}, err
	}
	st, err := projection.ReadDedupeStats(ctx, pool)
	return rows, st, err
}

// prune runs maintenance at historyPruneHorizon, after every measurement so
// none of them runs on a pruned ledger, and records what it freed.
func (b *bench) prune(ctx context.Context, pool *pgxpool.Pool) error {
	p := HistoryPrune{HorizonHours: historyPruneHorizon.Hours()}
	rows, st, err := ledgerSize(ctx, pool)
	if err != nil {
		return err
	}
	p.RowsBefore, p.BytesBefore, p.PartitionsBefore = rows, st.Bytes, st.Partitions
	start := time.Now()
	if p.Dropped, _, err = projection.MaintainDedupe(ctx, pool, historyPruneHorizon); err != nil {
		return err
	}
	p.Seconds = time.Since(start).Seconds()
	if rows, st, err = ledgerSize(ctx, pool); err != nil {
		return err
	}
	p.RowsAfter, p.BytesAfter, p.PartitionsAfter = rows, st.Bytes, st.Partitions
	b.res.History.Prune = p
	b.progress("history: maintenance at a %s horizon dropped %d partitions in %.2f s: %d rows, %.0f MB → %d rows, %.0f MB",
		historyPruneHorizon, p.Dropped, p.Seconds, p.RowsBefore, float64(p.BytesBefore)/1e6, p.RowsAfter, float64(p.BytesAfter)/1e6)
	return nil
}

// goal is the bytes-per-event target, with what pruning showed.
func (p HistoryPrune) goal() string {
	const g = "stops growing once the horizon is reached"
	if p.BytesBefore == 0 {
		return g
	}
	return fmt.Sprintf("%s (pruned at a %gh horizon: %s → %s, %d partitions dropped)", g, p.HorizonHours, bytesLabel(p.BytesBefore), bytesLabel(p.BytesAfter), p.Dropped)
}

// bytesLabel formats a size: 830 MB, 6.42 GB.
func bytesLabel(n int64) string {
	if n >= 1e9 {
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	}
	return fmt.Sprintf("%.0f MB", float64(n)/1e6)
}

// historyMarkdown is the history phase's section of results.md.
func (r *Result) historyMarkdown(b *strings.Builder) {
	h := r.History
	b.WriteString("## Dedupe ledger: cost against history\n\n")
	first := h.Steps[0].Inline
	drains := fmt.Sprintf("median of %d drains", len(first.EventsPerSecReps))
	if len(first.EventsPerSecReps) == 1 {
		drains = "one drain"
	}
	fmt.Fprintf(b, "Inline mode at 0%% failing (%d events per drain, %s, then the paced latency phase: the inline 0%% run) with the dedupe ledger already holding the prior applied events shown. They are rows as the engine writes them (the key of the bench projection, its fork and a unique event ID; the IR version; applied_at within the row's hour), loaded with COPY, cumulatively, spread evenly over the %d hour partitions before the phase's hour (%d days, inside the %gh horizon, whose partitions maintenance created first). The measured events carry occurredAt now, so they go to the current hour's partition. ",
		first.Events, drains, h.Hours, h.Hours/24, h.HorizonHours)
	b.WriteString("The phase runs in a database of its own. Before each size, bench_rows and the current hours are emptied and the ledger is vacuumed (ANALYZE) and checkpointed (settle), so the sizes differ in history only.\n\n")
	b.WriteString("| prior events | ledger rows | ledger MB | bytes/event | hour partitions | COPY rows/s | settle s | events/s | reps | vs none | p50 ms | p99 ms | bridge peak RSS MB |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|\n")
	var loaded int
	var loadS float64
	for _, s := range h.Steps {
		copyRate, perEvent := "", ""
		if s.Loaded > 0 {
			copyRate = num(s.LoadRowsPerSec)
			loaded += s.Loaded
			loadS += s.LoadSeconds
		}
		if s.LedgerRows > 0 {
			perEvent = fmt.Sprintf("%.1f", s.BytesPerEvent)
		}
		tableRow(b, countLabel(s.PriorEvents), strconv.FormatInt(s.LedgerRows, 10), fmt.Sprintf("%.0f", float64(s.LedgerBytes)/1e6),
			perEvent, strconv.Itoa(s.Partitions), copyRate, fmt.Sprintf("%.1f", s.SettleSeconds),
			num(s.Inline.EventsPerSec), floats(s.Inline.EventsPerSecReps, 0), fmt.Sprintf("%.2f", ratio(s.Inline.EventsPerSec, first.EventsPerSec)),
			fmt.Sprintf("%.1f", s.Inline.P50Ms), fmt.Sprintf("%.1f", s.Inline.P99Ms), fmt.Sprintf("%.0f", s.Inline.PeakRSSMB))
	}
	b.WriteString("\n")
	if loadS > 0 {
		fmt.Fprintf(b, "COPY loaded %d rows in %.1f s (%s rows/s, %d streams, one COPY per hour).\n\n", loaded, loadS, num(float64(loaded)/loadS), historyLoaders)
	}
	p := h.Prune
	if p.BytesBefore > 0 {
		perRow := func(bytes, rows int64) string {
			if rows == 0 {
				return "–"
			}
			return fmt.Sprintf("%.1f", float64(bytes)/float64(rows))
		}
		fmt.Fprintf(b, "Pruning, after the last size (so no measurement runs on a pruned ledger): maintenance at a %gh horizon dropped %d hour partitions (older than the horizon plus the %gh grace) in %.2f s; the ledger went from %d rows, %s to %d rows, %s (bytes per row %s → %s; %d → %d hour partitions).\n\n",
			p.HorizonHours, p.Dropped, projection.DedupeGrace.Hours(), p.Seconds, p.RowsBefore, bytesLabel(p.BytesBefore), p.RowsAfter, bytesLabel(p.BytesAfter),
			perRow(p.BytesBefore, p.RowsBefore), perRow(p.BytesAfter, p.RowsAfter), p.PartitionsBefore, p.PartitionsAfter)
	}
}

// tableRow writes a markdown table row; an empty cell is "| |".
func tableRow(b *strings.Builder, cells ...string) {
	for _, c := range cells {
		b.WriteString("| ")
		if c != "" {
			b.WriteString(c + " ")
		}
	}
	b.WriteString("|\n")
}
