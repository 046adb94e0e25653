package bench

import (
	"encoding/xml"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/projection"
)

func TestCountLabel(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 500_000: "500k", 1_000_000: "1M", 10_000_000: "10M", 50_000_000: "50M", 1_500_000: "1500k", 1234: "1234"} {
		require.Equal(t, want, countLabel(n), "%d", n)
	}
}

func TestWithDatabase(t *testing.T) {
	got, err := withDatabase("postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "causet_bench_history_x")
	require.NoError(t, err)
	require.Equal(t, "postgres://postgres@127.0.0.1:5432/causet_bench_history_x?sslmode=disable", got)
	got, err = withDatabase("postgresql://u:p%40ss@db/app", "h")
	require.NoError(t, err)
	require.Equal(t, "postgresql://u:p%40ss@db/h", got)
	got, err = withDatabase("host=db user=u dbname=app", "h")
	require.NoError(t, err)
	require.Equal(t, "host=db user=u dbname=app dbname=h", got)
}

func TestHourShare(t *testing.T) {
	// Every row of a load goes to exactly one hour, and the hours differ by
	// at most one row.
	for _, c := range []struct{ from, to int }{{0, 10_000_000}, {10_000_000, 50_000_000}, {0, 1001}, {5, 5}} {
		next, lo, hi := c.from, c.to, 0
		for k := range historyHours {
			a, b := hourShare(c.from, c.to, k, historyHours)
			require.Equal(t, next, a, "hour %d starts where hour %d ended", k, k-1)
			next = b
			lo, hi = min(lo, b-a), max(hi, b-a)
		}
		require.Equal(t, c.to, next)
		require.LessOrEqual(t, hi-lo, 1)
	}
}

func TestHistoryRows(t *testing.T) {
	start := fixedNow.Truncate(time.Hour)
	bucket := projection.DedupeHour(start)
	src := &historyRows{runID: "r1", bucket: bucket, version: 3, start: start, from: 100, to: 104, i: 100}
	var rows [][]any
	for src.Next() {
		v, err := src.Values()
		require.NoError(t, err)
		rows = append(rows, append([]any(nil), v...))
	}
	require.NoError(t, src.Err())
	require.Len(t, rows, 4)
	for j, row := range rows {
		id := historyEventID("r1", 100+j)
		require.Equal(t, pgtype.UUID{Bytes: projection.DedupeKey(benchProjection, benchFork, id), Valid: true}, row[0])
		require.Equal(t, bucket, row[1])
		require.Equal(t, benchProjection, row[2])
		require.Equal(t, int32(3), row[3])
		at := row[4].(time.Time)
		require.Equal(t, start.Add(time.Duration(j)*15*time.Minute), at, "evenly spaced within the hour")
		require.Equal(t, bucket, projection.DedupeHour(at), "applied within its bucket's hour")
	}
	require.Equal(t, "h-r1-100", historyEventID("r1", 100))
}

func TestHistoryRatios(t *testing.T) {
	h := fixedResult().History
	require.InDelta(t, 0.95, h.ratio(), 1e-9)
	require.Equal(t, 130.0, h.bytesPerEvent())
	require.Zero(t, HistoryRun{}.ratio())
	require.Zero(t, HistoryRun{Steps: h.Steps[1:]}.ratio(), "no size without history: no ratio")
	require.Zero(t, HistoryRun{Steps: h.Steps[:1]}.bytesPerEvent())

	p := h.Prune
	require.True(t, p.bounded())
	p.Dropped = 0
	require.False(t, p.bounded(), "nothing dropped")
	p = h.Prune
	p.BytesAfter = p.BytesBefore
	require.False(t, p.bounded(), "nothing freed")
	p = h.Prune
	p.BytesAfter = p.BytesBefore / 2 // half the bytes left for 30% of the rows
	require.False(t, p.bounded(), "bytes left behind")
	require.False(t, HistoryPrune{}.bounded())
	require.Equal(t, "stops growing once the horizon is reached", HistoryPrune{}.goal())
}

func TestBytesLabelAndNiceCeil(t *testing.T) {
	require.Equal(t, "3 MB", bytesLabel(3_200_000))
	require.Equal(t, "830 MB", bytesLabel(830_000_000))
	require.Equal(t, "6.42 GB", bytesLabel(6_420_000_000))
	for v, want := range map[float64]float64{0: 1, -3: 1, 0.7: 1, 1: 1, 1.1: 2, 34000: 50000, 35200: 50000, 80000: 100000, 110000: 200000} {
		require.Equal(t, want, niceCeil(v), "%g", v)
	}
}

func TestHistorySVG(t *testing.T) {
	svg := fixedResult().HistorySVG()
	dec := xml.NewDecoder(strings.NewReader(svg))
	var rects, circles int
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err, "history.svg must be well-formed XML")
		if se, ok := tok.(xml.StartElement); ok {
			switch se.Name.Local {
			case "rect":
				rects++
			case "circle":
				circles++
			}
		}
	}
	require.Equal(t, 1+3, rects, "background + a bar per size")
	require.Equal(t, 3+1+1, circles, "a dot per drain")
	for _, want := range []string{"32k", "30.4k (×0.95)", "50M prior events", "ledger 6.50 GB", "target: 0.8 × no history (25.6k events/s)"} {
		require.Contains(t, svg, want)
	}
	require.NotContains(t, svg, "NaN")
	require.NotContains(t, (&Result{}).HistorySVG(), "NaN", "an empty result draws no NaN")
}
