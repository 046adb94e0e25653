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
