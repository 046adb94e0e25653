package rollout

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A check's progress goes through its heartbeat as JSON: what comes back
// is what went in, and adding a page to a report leaves the progress
// reported before it as it was.
func TestCheckProgressSurvivesItsHeartbeat(t *testing.T) {
	r := Report{Projection: "p", Deployed: 3, Checked: 2, BySource: map[Source]int{DeadLettered: 2}, Totals: map[Outcome]int{WouldApply: 1, StillFails: 1},
		Groups: []Group{{Fingerprint: "fp1", ErrorKind: "sql", Error: "column x", Events: 2, Outcomes: map[Outcome]int{WouldApply: 1, StillFails: 1},
			StillFailing: []Failure{{ErrorKind: "sql", Error: "column y does not exist", Events: 1, SampleEventID: "e2"}}, SampleEventID: "e1"}},
		Took: 2 * time.Second}
	p := CheckProgress{Recorded: 2, ToReplay: 1, Report: r.clone()}
	b, err := json.Marshal(p)
	require.NoError(t, err)
	var back CheckProgress
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, p, back)

	r.add(Report{Checked: 3, BySource: map[Source]int{Parked: 3}, Totals: map[Outcome]int{StillFails: 3},
		Groups: []Group{
			{Fingerprint: "fp1", Events: 2, Outcomes: map[Outcome]int{StillFails: 2},
				StillFailing: []Failure{{ErrorKind: "sql", Error: "column y does not exist", Events: 2, SampleEventID: "e3"}}},
			{Fingerprint: "fp2", Events: 1, Outcomes: map[Outcome]int{StillFails: 1}},
		}})
	require.Equal(t, back, p, "the progress reported is a copy")
	require.Equal(t, 5, r.Checked)
	require.Equal(t, map[Outcome]int{WouldApply: 1, StillFails: 4}, r.Totals)
	require.Equal(t, []string{"fp1", "fp2"}, []string{r.Groups[0].Fingerprint, r.Groups[1].Fingerprint})
	require.Equal(t, 4, r.Groups[0].Events)
	require.Equal(t, []Failure{{ErrorKind: "sql", Error: "column y does not exist", Events: 3, SampleEventID: "e2"}}, r.Groups[0].StillFailing,
		"one failure of one fingerprint, counted across pages")
}
