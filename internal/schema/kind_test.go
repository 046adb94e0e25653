package schema

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A migration file declares its kind once, before its Up section; one that
// declares none, or two, is refused by name.
func TestAMigrationDeclaresItsKindOnce(t *testing.T) {
	up, _, kind, err := upSection("-- a new table\n-- +causet expand\n-- +goose Up\nCREATE TABLE t (a int);\n")
	require.NoError(t, err)
	require.Equal(t, Expand, kind)
	require.Equal(t, "CREATE TABLE t (a int);\n", up)

	_, _, _, err = upSection("-- +goose Up\nCREATE TABLE t (a int);\n")
	require.ErrorContains(t, err, "declares no kind")
	_, _, _, err = upSection("-- +causet expand\n-- +causet contract\n-- +goose Up\nSELECT 1;\n")
	require.ErrorContains(t, err, "declares its kind twice")
	_, _, _, err = upSection("-- +goose Up\n-- +causet contract\nSELECT 1;\n")
	require.ErrorContains(t, err, "after '-- +goose Up'")
}
