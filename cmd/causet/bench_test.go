package main

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBenchRequiresOut(t *testing.T) {
	err := benchCmd{Quick: true}.Run(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.EqualError(t, err, "--out DIR is required")
}

func TestBenchSideBySideSaysWhatIsWrong(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	err := benchCmd{SideBySide: []string{"dev"}}.Run(context.Background(), quiet)
	require.EqualError(t, err, `--side-by-side "dev": want LABEL=DIR`)
	err = benchCmd{SideBySide: []string{"dev=" + t.TempDir()}}.Run(context.Background(), quiet)
	require.ErrorContains(t, err, "--side-by-side dev: open ")
	require.ErrorContains(t, err, "results.json: no such file or directory")
}
