package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/projection"
	"github.com/causet/projection-retry/rollout"
)

type projectionsCheckCmd struct {
	File    string        `arg:"" name:"candidate" help:"The candidate IR document (YAML or JSON)." type:"existingfile"`
	JSON    bool          `name:"json" help:"Print the report as JSON."`
	Limit   int           `default:"10000" help:"Check at most this many failing events, 1-100000."`
	Timeout time.Duration `default:"5m" help:"Give up after this long (the events checked so far are reported)."`
}

type projectionsRolloutCmd struct {
	File       string  `arg:"" name:"candidate" help:"The fixed IR document (YAML or JSON)." type:"existingfile"`
	MaxFailing float64 `name:"max-failing" default:"0.1" help:"Stop when this share of the affected events still fails: at the check (nothing is deployed) or after the replays."`
	Rate       float64 `default:"20" help:"Replays a second."`
	Limit      int     `default:"10000" help:"Act on at most this many failing events, 1-100000."`
	Reason     string  `help:"Reason sent with each replay signal."`
	Identity   string  `help:"Who rolls out, sent with each replay (default causet-rollout:$USER@$HOST)."`
	Wait       bool    `default:"true" negatable:"" help:"Wait for the rollout to end, printing its progress."`
}

func (c projectionsCheckCmd) Run(ctx context.Context, logger *slog.Logger) error {
	if c.Limit < 1 || c.Limit > contract.MaxRolloutLimit {
		return fmt.Errorf("--limit=%d is invalid: want 1 to %d", c.Limit, contract.MaxRolloutLimit)
	}
	validation := projectionsOut
	if c.JSON {
		validation = os.Stderr
	}
	docs, err := projectionDocs.parseFilesTo(validation, []string{c.File})
	if err != nil {
		return fmt.Errorf("%w; nothing checked", err)
	}
	svc, err := openService(ctx, logger, app.WithReadOnly())
	if err != nil {
		return err
	}
	defer svc.Close()
	runner, err := svc.RolloutRunner()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	failing, g, err := rollout.Gather(ctx, runner.Sources, docs[0].Name, c.Limit)
	if err != nil {
		return err
	}
	rep, err := rollout.Check(ctx, svc.Engine, docs[0], failing, g)
	if err != nil && rep.Checked == 0 {
		return err
	}
	if c.JSON {
		enc := json.NewEncoder(projectionsOut)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(rep); jerr != nil {
			return jerr
		}
	} else {
		fmt.Fprint(projectionsOut, rep.Text(0))
	}
	return err
}

func (c projectionsRolloutCmd) Run(ctx context.Context, logger *slog.Logger) error {
	switch {
	case c.Limit < 1 || c.Limit > contract.MaxRolloutLimit:
		return fmt.Errorf("--limit=%d is invalid: want 1 to %d", c.Limit, contract.MaxRolloutLimit)
	case c.MaxFailing < 0 || c.MaxFailing > 1:
		return fmt.Errorf("--max-failing=%g is invalid: want a share from 0 to 1", c.MaxFailing)
	case c.Rate <= 0 || c.Rate > 1000:
		return fmt.Errorf("--rate=%g is invalid: want more than 0 and at most 1000 replays a second", c.Rate)
	}
	docs, err := projectionDocs.parseFiles([]string{c.File})
	if err != nil {
		return fmt.Errorf("%w; nothing rolled out", err)
	}
	doc := docs[0]
	cfg, err := config.FromEnv()
	if err != nil {
		return err
	}
	pool, err := documentsPool(ctx)
	if err != nil {
		return err
	}
	deps, err := projection.List(ctx, pool)
	pool.Close()
	if err != nil {
		return err
	}
	// The version the rollout deploys: the newest one when the candidate is
	// it already, so a second start finds the first rollout.
	newest, same := rollout.SameAsDeployed(deps, doc)
	version := 0
	if newest != nil {
		version = newest.Version
	}
	if !same {
		version++
	}
	body, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	in := contract.RolloutInput{Projection: doc.Name, Document: body, Version: version, MaxFailing: c.MaxFailing,
		Rate: c.Rate, Limit: c.Limit, Reason: c.Reason, Identity: c.identity()}
	tc, err := app.DialTemporal(ctx, logger, app.TemporalOptions{})
	if err != nil {
		return err
	}
	defer tc.Close()
	id := contract.RolloutWorkflowID(doc.Name, version, body)
	run, err := tc.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: id, TaskQueue: cfg.TaskQueue,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		StaticSummary:            in.Summary(),
	}, contract.RolloutWorkflowName, in)
	if err != nil {
		return err
	}
	// A rollout started before with this ID is found, running or done,
	// rather than run again; one that stopped or was cancelled is run anew.
	fmt.Fprintf(projectionsOut, "rollout %s (run %s): follow it in the Temporal UI, or with\n  temporal workflow query --workflow-id '%s' --type %s\n",
		id, run.GetRunID(), id, contract.QueryRolloutProgress)
	if !c.Wait {
		return nil
	}
	return followRollout(ctx, tc.Client, run)
}

// followRollout prints the rollout's progress when it changes, then its end.
func followRollout(ctx context.Context, c client.Client, run client.WorkflowRun) error {
	done := make(chan error, 1)
	var final contract.RolloutProgress
	go func() { done <- run.Get(ctx, &final) }()
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	last := ""
	for {
		select {
		case err := <-done:
			var appErr *temporal.ApplicationError
			if errors.As(err, &appErr) && appErr.Type() == contract.RolloutStoppedType && appErr.HasDetails() {
				_ = appErr.Details(&final)
			} else if err != nil {
				return fmt.Errorf("rollout %s: %w", run.GetID(), err)
			}
			fmt.Fprintln(projectionsOut, progressLine(final))
			if final.Reason != "" {
				fmt.Fprintln(projectionsOut, final.Reason)
			}
			if final.State == contract.RolloutStopped {
				return fmt.Errorf("rollout %s stopped", run.GetID())
			}
			return nil
		case <-t.C:
			v, err := c.QueryWorkflow(ctx, run.GetID(), run.GetRunID(), contract.QueryRolloutProgress)
			if err != nil {
				continue
			}
			var p contract.RolloutProgress
			if v.Get(&p) == nil {
				if line := progressLine(p); line != last {
					fmt.Fprintln(projectionsOut, line)
					last = line
				}
			}
		}
	}
}

func progressLine(p contract.RolloutProgress) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-9s affected %d (would apply %d, still fail %d, out of order %d)", p.State, p.Affected, p.WouldApply, p.WouldFail, p.OutOfOrder)
	if p.Deployed {
		fmt.Fprintf(&b, " · version %d deployed · replayed %d · applied %d · failing %d · pending %d", p.Version, p.Replayed, p.Applied, p.Failing, p.Pending)
	}
	return b.String()
}

func (c projectionsRolloutCmd) identity() string {
	if c.Identity != "" {
		return c.Identity
	}
	return "causet-rollout:" + userAtHost()
}

// openService opens the whole service from the environment.
func openService(ctx context.Context, logger *slog.Logger, opts ...app.Option) (*app.Service, error) {
	cfg, err := config.FromEnv()
	if err != nil {
		return nil, err
	}
	return app.Open(ctx, cfg, append([]app.Option{app.WithLogger(logger)}, opts...)...)
}
