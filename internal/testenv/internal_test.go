package testenv

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWithDatabase(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://u:p@h:5432/app?sslmode=disable", "postgres://u:p@h:5432/t1?sslmode=disable"},
		{"postgresql://h/", "postgresql://h/t1"},
		{"host=h user=u", "host=h user=u dbname=t1"},
	} {
		got, err := withDatabase(tc.in, "t1")
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
	}
}

func TestUniqueName(t *testing.T) {
	n := uniqueName(t, "t", "_", 63)
	require.LessOrEqual(t, len(n), 63)
	require.Regexp(t, `^t_testuniquename_\d+_[0-9a-f]+$`, n)
	require.NotEqual(t, n, uniqueName(t, "t", "_", 63))
}
