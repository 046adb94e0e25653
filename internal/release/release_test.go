package release

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReleasesAreRecordedOldestFirst(t *testing.T) {
	rs := Releases()
	require.NotEmpty(t, rs)
	require.Equal(t, "0.1.0", rs[0].Version)
	seen := map[string]bool{}
	for _, r := range rs {
		require.Regexp(t, `^\d+\.\d+\.\d+$`, r.Version)
		require.Regexp(t, `^[0-9a-f]{40}$`, r.Commit)
		require.Regexp(t, `^\d{4}-\d{2}-\d{2}$`, r.Date)
		require.False(t, seen[r.Version], "%s recorded twice", r.Version)
		seen[r.Version] = true
	}
}

func TestABuildIsNamedByItsCommit(t *testing.T) {
	rs := []Release{{"0.1.0", "aaaa", "2026-12-06"}, {"0.2.0", "bbbb", "2026-12-20"}}
	require.Equal(t, "0.1.0", versionOf(rs, "aaaa", false), "a build of a release's commit is that release")
	require.Equal(t, "0.2.0+dev", versionOf(rs, "aaaa", true), "unless its tree was changed")
	require.Equal(t, "0.2.0+dev", versionOf(rs, "cccc", false), "past the last release")
	require.Equal(t, "0.2.0+dev", versionOf(rs, "", false), "no VCS stamp (go run, go test)")
}

func TestABadReleasesFileIsRefused(t *testing.T) {
	_, err := parse("0.1.0\tabc\t2026-12-06\n")
	require.ErrorContains(t, err, "line 1: want version, 40-hex commit and date")
	_, err = parse("# nothing\n")
	require.ErrorContains(t, err, "records no release")
}
