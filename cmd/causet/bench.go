package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime/pprof"
	"strings"

	"github.com/causet/projection-retry/bench"
)

// benchOut is where `causet bench` prints its progress and summary line (tests swap it).
var benchOut io.Writer = os.Stdout

// benchCmd measures the pipeline against the PostgreSQL ceiling, workflow
// mode and the seed's in-place-retry design in one run (see package bench).
type benchCmd struct {
	Out        string `help:"Directory for results.md, results.json, chart.svg and the bridge logs." type:"path"`
	Quick      bool   `help:"Small sizes (under 3 minutes): proves the command works; the figures are not comparable with a full run."`
	CPUProfile string `name:"cpuprofile" help:"Write the bench process's CPU profile to FILE, and each bridge child's to FILE.bridge-PHASE." type:"path" placeholder:"FILE"`
	// SideBySide prints runs' Temporal figures side by side instead of
	// running (scripts/bench-temporal.sh: the dev server's and a cluster's).
	SideBySide []string `name:"side-by-side" sep:"none" help:"Print the Temporal figures of earlier runs side by side instead of running: LABEL=DIR, one per run (DIR holds its results.json)." placeholder:"LABEL=DIR"`

	// BridgeChild runs the bridge (as `causet bridge`) with the CPU profile;
	// the bench starts itself this way for every bridge it measures.
	BridgeChild bool `name:"bridge-child" hidden:""`
}

func (c benchCmd) Run(ctx context.Context, logger *slog.Logger) error {
	if c.CPUProfile != "" {
		stop, err := startCPUProfile(c.CPUProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if c.BridgeChild {
		return bridgeCmd{}.Run(ctx, logger)
	}
	if len(c.SideBySide) > 0 {
		return sideBySide(c.SideBySide)
	}
	if c.Out == "" {
		return errors.New("--out DIR is required")
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable for the bridge child: %w", err)
	}
	quiet := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	res, err := bench.Run(ctx, bench.Options{
		Out:        c.Out,
		Quick:      c.Quick,
		CPUProfile: c.CPUProfile,
		Logger:     quiet,
		Progress:   benchOut,
		BridgeCommand: func(profile string) *exec.Cmd {
			args := []string{"bench", "--bridge-child"}
			if profile != "" {
				args = append(args, "--cpuprofile", profile)
			}
			return exec.Command(exe, args...)
		},
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(benchOut, "bench: wrote %s/results.md, results.json and chart.svg\n", c.Out)
	fmt.Fprintln(benchOut, res.UnitsLine())
	fmt.Fprintln(benchOut, res.SummaryLine())
	return nil
}

// startCPUProfile profiles this process into path until the returned stop.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// sideBySide prints the Temporal figures of the runs in LABEL=DIR, one
// column each.
func sideBySide(runs []string) error {
	var labels []string
	var results []*bench.Result
	for _, run := range runs {
		label, dir, ok := strings.Cut(run, "=")
		if !ok || label == "" || dir == "" {
			return fmt.Errorf("--side-by-side %q: want LABEL=DIR", run)
		}
		r, err := bench.ReadResult(dir)
		if err != nil {
			return fmt.Errorf("--side-by-side %s: %w", label, err)
		}
		labels, results = append(labels, label), append(results, r)
	}
	fmt.Fprint(benchOut, bench.SideBySide(labels, results))
	return nil
}
