package workflows_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
)

func TestWorkflowIDs(t *testing.T) {
	tests := []struct {
		name                    string
		projection, fork, field string
		retry                   string
	}{
		{"plain fields are unchanged", "artist_followers", "production", "01JE0001",
			"projection-retry:artist_followers:production:01JE0001"},
		{"other punctuation is unchanged", "p", "fork/1 ü", "a-b_c.d@e#f",
			"projection-retry:p:fork/1 ü:a-b_c.d@e#f"},
		{"colon", "p", "a:b", "c",
			"projection-retry:p:a%3Ab:c"},
		{"percent", "p", "100%", "%3A",
			"projection-retry:p:100%25:%253A"},
		{"both", "p", ":%:", "::",
			"projection-retry:p:%3A%25%3A:%3A%3A"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.retry, contract.RetryWorkflowID(tc.projection, tc.fork, tc.field))
		})
	}
}

func TestWorkflowIDsDoNotCollide(t *testing.T) {
	tests := []struct {
		name string
		a, b [3]string // projection, fork, event or entity
	}{
		{"colon moves from fork to event", [3]string{"p", "a:b", "c"}, [3]string{"p", "a", "b:c"}},
		{"colon moves from projection to fork", [3]string{"p:x", "f", "e"}, [3]string{"p", "x:f", "e"}},
		{"escape written literally", [3]string{"p", "a%3Ab", "c"}, [3]string{"p", "a:b", "c"}},
		{"escaped percent written literally", [3]string{"p", "a%253A", "c"}, [3]string{"p", "a%3A", "c"}},
		{"trailing colon", [3]string{"p", "f:", "e"}, [3]string{"p", "f", ":e"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.NotEqual(t, contract.RetryWorkflowID(tc.a[0], tc.a[1], tc.a[2]), contract.RetryWorkflowID(tc.b[0], tc.b[1], tc.b[2]))
		})
	}
}

// FuzzRetryWorkflowID: an ID splits into its prefix and three fields that
// unescape to the originals, so two different triples never share an ID.
func FuzzRetryWorkflowID(f *testing.F) {
	f.Add("p", "a:b", "c")
	f.Add("p", "%3A", "%%::")
	f.Fuzz(func(t *testing.T, projection, fork, id string) {
		for _, got := range []string{contract.RetryWorkflowID(projection, fork, id)} {
			parts := strings.Split(got, ":")
			require.Len(t, parts, 4, got)
			for i, want := range []string{projection, fork, id} {
				field, err := url.PathUnescape(parts[i+1])
				require.NoError(t, err)
				require.Equal(t, want, field)
			}
		}
	})
}

// The limits of event keep every ID under Temporal's 1000-byte limit, even
// when every byte of a field is escaped and the projection name is as long
// as an identifier may be (63 bytes).
func TestWorkflowIDsWithinTemporalLimit(t *testing.T) {
	projection := strings.Repeat("p", 63)
	fork := strings.Repeat(":", event.MaxForkIDBytes)
	require.LessOrEqual(t, len(contract.RetryWorkflowID(projection, fork, strings.Repeat("%", event.MaxEventIDBytes))), 1000)
}
