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
