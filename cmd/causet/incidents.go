package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/incident"
)

type incidentsCmd struct {
	List          incidentsListCmd    `cmd:"" help:"List incidents (open ones; --all for closed too) with their state, events and error."`
	Show          incidentsShowCmd    `cmd:"" help:"Show one incident's status (the workflow's status query, or its result once closed) as JSON."`
	Resolve       incidentsSignalCmd  `cmd:"" help:"Resolve an incident: its held events are applied in entity order (signal resolve)."`
	DeadLetterAll incidentsDeadAllCmd `cmd:"" name:"dead-letter-all" help:"Close an incident by dead-lettering every event it holds (signal dead-letter-all)."`
}

// incidentsOut is where the incidents commands print (tests replace it).
var incidentsOut io.Writer = os.Stdout

// maxIncidentsListed bounds one list.
const maxIncidentsListed = 1000

type incidentsListCmd struct {
	All        bool   `help:"Closed incidents too."`
	Projection string `help:"Only this projection."`
}

func (c incidentsListCmd) Run(ctx context.Context, logger *slog.Logger) error {
	cfg, tc, err := dialIncidents(ctx, logger)
	if err != nil {
		return err
	}
	defer tc.Close()
	q := fmt.Sprintf("WorkflowType = %q AND TaskQueue = %q", contract.IncidentWorkflowName, cfg.TaskQueue)
	if !c.All {
		q += " AND ExecutionStatus = 'Running'"
	}
	if c.Projection != "" {
		q += fmt.Sprintf(" AND %s = %q", contract.AttrProjection.GetName(), c.Projection)
	}
	var runs []*workflowservice.ListWorkflowExecutionsResponse
	var token []byte
	n := 0
	for {
		resp, err := tc.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: tc.Namespace, Query: q, PageSize: 100, NextPageToken: token,
		})
		if err != nil {
			return fmt.Errorf("list incidents: %w", err)
		}
		runs = append(runs, resp)
		n += len(resp.Executions)
		token = resp.NextPageToken
		if len(token) == 0 || n >= maxIncidentsListed {
			break
		}
	}
	tw := tabwriter.NewWriter(incidentsOut, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INCIDENT\tSTATE\tEVENTS\tHELD\tFIRST SEEN\tLAST SEEN\tERROR")
	for _, resp := range runs {
		for _, e := range resp.Executions {
			st, err := incidentStatus(ctx, tc.Client, e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId(), e.GetStatus())
			if err != nil {
				fmt.Fprintf(tw, "%s\t?\t\t\t\t\t%s\n", e.GetExecution().GetWorkflowId(), oneLine(err))
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", e.GetExecution().GetWorkflowId(), st.State, st.EventsAffected, st.EventsHeld,
				st.FirstSeen.Format(time.RFC3339), st.LastSeen.Format(time.RFC3339), shorten(st.Pattern, 80))
		}
	}
	if n == 0 {
		fmt.Fprintln(tw, "(none)")
	}
	return tw.Flush()
}

// incidentStatus is a running incident's status query, or a closed one's
// result.
func incidentStatus(ctx context.Context, c client.Client, id, runID string, status enumspb.WorkflowExecutionStatus) (contract.IncidentStatus, error) {
	var st contract.IncidentStatus
	if status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		v, err := c.QueryWorkflow(ctx, id, runID, contract.QueryStatus)
		if err != nil {
			return st, err
		}
		return st, v.Get(&st)
	}
	err := c.GetWorkflow(ctx, id, runID).Get(ctx, &st)
	return st, err
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

type incidentsShowCmd struct {
	ID string `arg:"" help:"Incident workflow ID (projection-incident:<projection>:<fingerprint>)."`
}

func (c incidentsShowCmd) Run(ctx context.Context, logger *slog.Logger) error {
	_, tc, err := dialIncidents(ctx, logger)
	if err != nil {
		return err
	}
	defer tc.Close()
	desc, err := tc.Client.DescribeWorkflow(ctx, c.ID, "")
	if err != nil {
		return fmt.Errorf("incident %s: %w", c.ID, err)
	}
	st, err := incidentStatus(ctx, tc.Client, c.ID, "", desc.RawResponse.GetWorkflowExecutionInfo().GetStatus())
	if err != nil {
		return fmt.Errorf("incident %s: %w", c.ID, err)
	}
	enc := json.NewEncoder(incidentsOut)
	enc.SetIndent("", "  ")
	return enc.Encode(st)
}

type incidentsSignalCmd struct {
	ID       string `arg:"" help:"Incident workflow ID."`
	Reason   string `help:"Why (kept in the incident's status and logs)."`
	Identity string `help:"Who (default causet-incidents:$USER@$HOST)."`
}

func (c incidentsSignalCmd) Run(ctx context.Context, logger *slog.Logger) error {
	return signalIncident(ctx, logger, c.ID, contract.SignalResolve, c.Reason, c.Identity)
}

type incidentsDeadAllCmd struct {
	incidentsSignalCmd `embed:""`
}

func (c incidentsDeadAllCmd) Run(ctx context.Context, logger *slog.Logger) error {
	return signalIncident(ctx, logger, c.ID, contract.SignalDeadLetterAll, c.Reason, c.Identity)
}

func signalIncident(ctx context.Context, logger *slog.Logger, id, signal, reason, identity string) error {
	if !strings.HasPrefix(id, "projection-incident:") {
		return fmt.Errorf("%q is not an incident ID: want projection-incident:<projection>:<fingerprint> (causet incidents list)", id)
	}
	cfg, tc, err := dialIncidents(ctx, logger)
	if err != nil {
		return err
	}
	defer tc.Close()
	if identity == "" {
		identity = "causet-incidents:" + userAtHost()
	}
	arg := contract.OperatorSignal{Identity: identity, Reason: reason}
	if st, ok := decided(ctx, tc.Client, id); ok {
		// Its run no longer listens for a decision: it finishes the one taken.
		fmt.Fprintf(incidentsOut, "%s: %s not sent: already decided by %s (%s), now %s\n", id, signal, st.ResolvedBy, st.Reason, st.State)
		return nil
	}
	err = tc.Client.SignalWorkflow(ctx, id, "", signal, arg)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		// Its workflow ended while its row still holds events: a new run,
		// started from the row, takes the decision.
		restarted, rerr := restartIncident(ctx, cfg, tc, id, signal, arg)
		if rerr != nil {
			return fmt.Errorf("signal %s to %s: %w (and %w)", signal, id, err, rerr)
		}
		if restarted {
			fmt.Fprintf(incidentsOut, "%s: %s sent to a new run (its workflow had ended while it held events)\n", id, signal)
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("signal %s to %s: %w", signal, id, err)
	}
	fmt.Fprintf(incidentsOut, "%s: %s sent\n", id, signal)
	return nil
}

// decided reports the status of incident id's running workflow when it has
// already been decided (resolved, dead-lettered, or past a bound); false
// when it has not, or when it cannot be asked (no run, no worker).
func decided(ctx context.Context, c client.Client, id string) (contract.IncidentStatus, bool) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := c.QueryWorkflow(qctx, id, "", contract.QueryStatus)
	var st contract.IncidentStatus
	if err != nil || v.Get(&st) != nil {
		return st, false
	}
	return st, st.ResolvedAt != nil
}

// restartIncident starts a new run of incident id from its row with signal,
// when the row still holds or releases events; false when it does not.
func restartIncident(ctx context.Context, cfg config.Config, tc *app.Temporal, id, signal string, arg contract.OperatorSignal) (bool, error) {
	pool, err := documentsPool(ctx)
	if err != nil {
		return false, err
	}
	defer pool.Close()
	row, found, err := incident.NewStore(pool).Get(ctx, id)
	if err != nil || !found || (row.State != contract.IncidentHolding && row.State != contract.IncidentReleasing && row.State != contract.IncidentDeadLettering) {
		return false, err
	}
	_, err = incident.SignalWithStart(ctx, tc.Client, cfg.TaskQueue, id, row.State, row.RestartInput(time.Now()), signal, arg)
	return err == nil, err
}

func userAtHost() string {
	user := os.Getenv("USER")
	if user == "" {
		user = "unknown"
	}
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return user + "@" + host
}

func dialIncidents(ctx context.Context, logger *slog.Logger) (config.Config, *app.Temporal, error) {
	cfg, err := config.FromEnv()
	if err != nil {
		return cfg, nil, err
	}
	tc, err := app.DialTemporal(ctx, logger, app.TemporalOptions{})
	return cfg, tc, err
}
