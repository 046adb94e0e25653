package rollout

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
)

// sources and outcomes in the order a report prints them.
var (
	sourceOrder  = []Source{DeadLettered, Held, Parked, Retrying}
	outcomeOrder = []Outcome{WouldApply, StillFails, OutOfOrder, NotHandled}
)

// Text renders the report for a terminal: the totals, then one row per
// fingerprint (at most groups of them; 0 prints all) with what still fails.
func (r Report) Text(groups int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "candidate %s tried as version %d on %d failing events", r.Projection, r.Deployed+1, r.Checked)
	var parts []string
	for _, s := range sourceOrder {
		if n := r.BySource[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, s))
		}
	}
	if len(parts) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(parts, ", "))
	}
	fmt.Fprintf(&b, " in %s; nothing was written\n", r.Took.Round(time.Millisecond))
	if r.Truncated {
		b.WriteString("only the first events were checked: raise --limit to check them all\n")
	}
	if r.Checked == 0 {
		b.WriteString("no event of the projection is failing now\n")
		return b.String()
	}
	parts = parts[:0]
	for _, o := range outcomeOrder {
		parts = append(parts, fmt.Sprintf("%s %d", o, r.Totals[o]))
	}
	fmt.Fprintf(&b, "%s\n\n", strings.Join(parts, ", "))
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FINGERPRINT\tEVENTS\tWOULD APPLY\tSTILL FAILS\tOUT OF ORDER\tFAILING NOW WITH")
	for i, g := range r.Groups {
		if groups > 0 && i == groups {
			fmt.Fprintf(tw, "…\t%d more groups\t\t\t\t\n", len(r.Groups)-groups)
			break
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s: %s\n", g.Fingerprint, g.Events, g.Outcomes[WouldApply], g.Outcomes[StillFails],
			g.Outcomes[OutOfOrder], g.ErrorKind, oneLine(g.Error, 80))
	}
	_ = tw.Flush()
	first := true
	for i, g := range r.Groups {
		if groups > 0 && i == groups {
			break
		}
		for _, f := range g.StillFailing {
			if first {
				b.WriteString("\nstill failing with the candidate:\n")
				first = false
			}
			fmt.Fprintf(&b, "  %s  %d × %s: %s (e.g. event %s)\n", g.Fingerprint, f.Events, f.ErrorKind, oneLine(f.Error, 120), f.SampleEventID)
		}
	}
	return b.String()
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len([]rune(s)) > n {
		return string([]rune(s)[:n]) + "…"
	}
	return s
}
