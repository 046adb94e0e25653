package bench

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// series is one bar colour of the chart.
type series struct {
	name  string
	color string
	value func(pct float64) (float64, bool)
}

// SVG is chart.svg: events/s by failure rate (0%, 1%, 10%) for inline mode,
// workflow mode, the peer and retry topics, as grouped bars on a log scale
// (the figures span three orders of magnitude), with the PostgreSQL ceiling
// as a dashed line. Hand-written SVG; no dependency.
func (r *Result) SVG() string {
	rates := []float64{0, 1, 10}
	ss := []series{
		{"inline mode (bridge)", "#2b7bb9", func(p float64) (float64, bool) {
			x := r.inline(p)
			return x.EventsPerSec, x.Events > 0
		}},
		{"workflow mode", "#e08a1e", func(p float64) (float64, bool) {
			return r.Workflow.EventsPerSec, p == 0 && r.Workflow.Events > 0
		}},
		{"peer: in-place retry", "#9b3fb5", func(p float64) (float64, bool) {
			x := r.peer(p)
			return x.EventsPerSec, x.Events > 0
		}},
		// The events topic's drain, like inline mode's: every failure
		// durably handed on.
		{"retry topics (events topic drained)", "#2e9e5b", func(p float64) (float64, bool) {
			x := r.retryTopics(p)
			return x.DrainEventsPerSec, x.Events > 0
		}},
	}
	const (
		w, h                   = 760, 420
		left, right, top, bott = 80, 200, 50, 60
	)
	pw, ph := float64(w-left-right), float64(h-top-bott)
	maxV := r.Ceiling.RowsPerSec
	for _, p := range rates {
		for _, s := range ss {
			if v, ok := s.value(p); ok {
				maxV = math.Max(maxV, v)
			}
		}
	}
	lo, hi := 0.0, math.Ceil(math.Log10(math.Max(maxV, 10)))
	y := func(v float64) float64 {
		if v < 1 {
			v = 1
		}
		return float64(top) + ph*(1-(math.Log10(v)-lo)/(hi-lo))
	}

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	title := "events/s by failure rate (log scale)"
	if r.Quick {
		title += " — quick run"
	}
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="%d" y="40" fill="#555">retry schedule: %s; %d cores</text>`+"\n", left, html.EscapeString(r.ShortSchedule), r.Machine.Cores)
	for e := lo; e <= hi; e++ {
		yy := y(math.Pow(10, e))
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#ddd"/>`+"\n", left, yy, float64(left)+pw, yy)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", left-6, yy, tick(math.Pow(10, e)))
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%.0f" stroke="#333"/>`+"\n", left, top, left, float64(top)+ph)
	fmt.Fprintf(&b, `<line x1="%d" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#333"/>`+"\n", left, float64(top)+ph, float64(left)+pw, float64(top)+ph)

	group := pw / float64(len(rates))
	bw := group * 0.8 / float64(len(ss))
	for i, p := range rates {
		gx := float64(left) + group*float64(i) + group*0.1
		for j, s := range ss {
			v, ok := s.value(p)
			if !ok {
				continue
			}
			x := gx + bw*float64(j)
			yy := y(v)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s at %s failing: %.0f events/s</title></rect>`+"\n",
				x, yy, bw-2, float64(top)+ph-yy, s.color, html.EscapeString(s.name), pct(p), v)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="11">%s</text>`+"\n", x+(bw-2)/2, yy-4, tick(v))
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s failing</text>`+"\n", gx+group*0.4, float64(top)+ph+20, pct(p))
	}
	if r.Ceiling.RowsPerSec > 0 {
		yy := y(r.Ceiling.RowsPerSec)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#c0392b" stroke-dasharray="6 4"/>`+"\n", left, yy, float64(left)+pw, yy)
	}
	lx := float64(left) + pw + 16
	for j, s := range ss {
		ly := float64(top) + 10 + float64(j)*22
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="14" height="14" fill="%s"/><text x="%.0f" y="%.0f">%s</text>`+"\n", lx, ly, s.color, lx+20, ly+11, html.EscapeString(s.name))
	}
	ly := float64(top) + 10 + float64(len(ss))*22
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#c0392b" stroke-dasharray="6 4"/><text x="%.0f" y="%.0f">PostgreSQL ceiling %s rows/s</text>`+"\n",
		lx, ly+7, lx+14, ly+7, lx+20, ly+11, tick(r.Ceiling.RowsPerSec))
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555">events/s</text>`+"\n", 10, top-8)
	b.WriteString("</svg>\n")
	return b.String()
}

// tick formats an axis or bar value compactly: 950, 1.2k, 25k, 1M.
func tick(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.3gk", v/1e3)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

// HistorySVG is history.svg: inline events/s at 0% failing against the
// dedupe ledger's history, one bar per size (its drains as dots), on a
// linear scale from zero, with the 0.8 × no-history target dashed.
func (r *Result) HistorySVG() string {
	steps := r.History.Steps
	const (
		w, h                   = 760, 420
		left, right, top, bott = 80, 40, 60, 80
	)
	pw, ph := float64(w-left-right), float64(h-top-bott)
	maxV := 0.0
	for _, s := range steps {
		maxV = math.Max(maxV, s.Inline.EventsPerSec)
		for _, v := range s.Inline.EventsPerSecReps {
			maxV = math.Max(maxV, v)
		}
	}
	hi := niceCeil(maxV * 1.1)
	y := func(v float64) float64 { return float64(top) + ph*(1-v/hi) }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	title := "inline events/s (0% failing) against the dedupe ledger's history"
	if r.Quick {
		title += " — quick run"
	}
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="%d" y="40" fill="#555">prior events spread over the %d hours before the run, loaded with COPY; bars: median, dots: drains; %d cores</text>`+"\n",
		left, r.History.Hours, r.Machine.Cores)
	for i := 0; i <= 5; i++ {
		v := hi * float64(i) / 5
		yy := y(v)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#ddd"/>`+"\n", left, yy, float64(left)+pw, yy)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", left-6, yy, tick(v))
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%.0f" stroke="#333"/>`+"\n", left, top, left, float64(top)+ph)
	fmt.Fprintf(&b, `<line x1="%d" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#333"/>`+"\n", left, float64(top)+ph, float64(left)+pw, float64(top)+ph)
	if len(steps) > 0 {
		group := pw / float64(len(steps))
		bw := group * 0.5
		base := steps[0].Inline.EventsPerSec
		for i, s := range steps {
			x := float64(left) + group*float64(i) + (group-bw)/2
			v := s.Inline.EventsPerSec
			yy := y(v)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#2b7bb9"><title>%s prior events: %.0f events/s</title></rect>`+"\n",
				x, yy, bw, float64(top)+ph-yy, countLabel(s.PriorEvents), v)
			labelY := yy // above the bar and its dots
			for _, rv := range s.Inline.EventsPerSecReps {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="#0d3c61"/>`+"\n", x+bw/2, y(rv))
				labelY = math.Min(labelY, y(rv)-3)
			}
			label := tick(v)
			if i > 0 && base > 0 {
				label += fmt.Sprintf(" (×%.2f)", v/base)
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="11">%s</text>`+"\n", x+bw/2, labelY-6, html.EscapeString(label))
			fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s prior events</text>`+"\n", x+bw/2, float64(top)+ph+20, countLabel(s.PriorEvents))
			fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle" fill="#555">ledger %s</text>`+"\n", x+bw/2, float64(top)+ph+36, bytesLabel(s.LedgerBytes))
		}
		if base > 0 {
			yy := y(0.8 * base)
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#c0392b" stroke-dasharray="6 4"/>`+"\n", left, yy, float64(left)+pw, yy)
			ly := float64(h - 16)
			fmt.Fprintf(&b, `<line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="#c0392b" stroke-dasharray="6 4"/><text x="%d" y="%.0f">target: 0.8 × no history (%s events/s)</text>`+"\n",
				left, ly-4, left+24, ly-4, left+30, ly, tick(0.8*base))
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555">events/s</text>`+"\n", 10, top-14)
	b.WriteString("</svg>\n")
	return b.String()
}

// niceCeil rounds v up to 1, 2 or 5 × a power of ten (1 for v ≤ 0).
func niceCeil(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}
