package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/uber-go/tally/v4"
	tallyprom "github.com/uber-go/tally/v4/prometheus"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdktally "go.temporal.io/sdk/contrib/tally"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/workflows"
)

// Options configure New.
type Options struct {
	// Client is the Temporal client. Required.
	Client client.Client
	// TaskQueue is CAUSET_TASK_QUEUE. Required.
	TaskQueue string
	// Activities implements the activities. Required.
	Activities *activities.Activities
	// MaxConcurrentActivities bounds activity executions. Optional, defaults to 200.
	MaxConcurrentActivities int
	// MaxConcurrentWorkflowTasks bounds workflow task executions. Optional, defaults to 200.
	MaxConcurrentWorkflowTasks int
	// StopTimeout is how long a stop waits for running activities. Optional, defaults to 30s.
	StopTimeout time.Duration
	// Version is the Worker Deployment Version the worker polls as
	// (config.WorkerVersioning). Optional: zero runs unversioned.
	Version sdkworker.WorkerDeploymentVersion
	// Incidents implements the incident workflow's activities. Optional:
	// without it incidents are not probed on this worker.
	Incidents *activities.Incidents
	// Rollouts implements the rollout workflow's activities. Optional:
	// without it this worker runs no rollout.
	Rollouts *activities.Rollouts
}

func (o *Options) validate() error {
	switch {
	case o.Client == nil:
		return errors.New("worker: Client is required")
	case o.TaskQueue == "":
		return errors.New("worker: TaskQueue is required")
	case o.Activities == nil:
		return errors.New("worker: Activities is required")
	case (o.Version.DeploymentName == "") != (o.Version.BuildID == ""):
		return errors.New("worker: Version needs both DeploymentName and BuildID, or neither")
	}
	return nil
}

// New builds a worker with the workflows and activities registered. The
// defaults are sized for many short retry workflows: the SDK's defaults poll
// too little for thousands of concurrent retries on one process.
func New(o Options) (sdkworker.Worker, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.MaxConcurrentActivities == 0 {
		o.MaxConcurrentActivities = 200
	}
	if o.MaxConcurrentWorkflowTasks == 0 {
		o.MaxConcurrentWorkflowTasks = 200
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = 30 * time.Second
	}
	w := sdkworker.New(o.Client, o.TaskQueue, sdkworker.Options{
		MaxConcurrentActivityExecutionSize:     o.MaxConcurrentActivities,
		MaxConcurrentWorkflowTaskExecutionSize: o.MaxConcurrentWorkflowTasks,
		MaxConcurrentActivityTaskPollers:       8,
		MaxConcurrentWorkflowTaskPollers:       8,
		WorkerStopTimeout:                      o.StopTimeout,
		DeploymentOptions:                      deploymentOptions(o.Version),
	})
	Register(w, o.Activities)
	if o.Incidents != nil {
		RegisterIncidents(w, o.Incidents)
	}
	if o.Rollouts != nil {
		RegisterRollouts(w, o.Rollouts)
	}
	return w, nil
}

// Register adds the workflows and activities under their contract names,
// the workflows with their versioning behaviors (versioning.go).
func Register(r sdkworker.Registry, a *activities.Activities) {
	r.RegisterWorkflowWithOptions(workflows.ProjectionRetryWorkflow, workflow.RegisterOptions{
		Name: contract.RetryWorkflowName, VersioningBehavior: RetryVersioningBehavior})
	r.RegisterActivityWithOptions(a.ApplyProjection, activity.RegisterOptions{Name: contract.ApplyProjectionActivity})
	r.RegisterActivityWithOptions(a.PublishDeadLetter, activity.RegisterOptions{Name: contract.PublishDeadLetterActivity})
	r.RegisterActivityWithOptions(a.SettleHead, activity.RegisterOptions{Name: contract.SettleHeadActivity})
	r.RegisterActivityWithOptions(a.JoinIncidentHold, activity.RegisterOptions{Name: contract.JoinIncidentHoldActivity})
	r.RegisterActivityWithOptions(a.IncidentHoldEnded, activity.RegisterOptions{Name: contract.IncidentHoldEndedActivity})
	r.RegisterActivityWithOptions(a.AwaitIncidentEnded, activity.RegisterOptions{Name: contract.AwaitIncidentEndedActivity})
	r.RegisterActivityWithOptions(a.DatabaseAnswers, activity.RegisterOptions{Name: contract.DatabaseAnswersActivity})
	r.RegisterWorkflowWithOptions(workflows.ProjectionIncidentWorkflow, workflow.RegisterOptions{
		Name: contract.IncidentWorkflowName, VersioningBehavior: IncidentVersioningBehavior})
}

// IncidentVersioningBehavior: an incident waits for the fix, which may ship
// as a new build; its probes must run on that build, not the one it opened on.
const IncidentVersioningBehavior = workflow.VersioningBehaviorAutoUpgrade

// RegisterIncidents adds the incident workflow's activities.
func RegisterIncidents(r sdkworker.Registry, a *activities.Incidents) {
	r.RegisterActivityWithOptions(a.ProbeIncident, activity.RegisterOptions{Name: contract.ProbeIncidentActivity})
	r.RegisterActivityWithOptions(a.SetIncidentState, activity.RegisterOptions{Name: contract.SetIncidentStateActivity})
	r.RegisterActivityWithOptions(a.AwaitIncidentReleased, activity.RegisterOptions{Name: contract.AwaitIncidentReleasedActivity})
	r.RegisterActivityWithOptions(a.IncidentRestart, activity.RegisterOptions{Name: contract.IncidentRestartActivity})
}

// RolloutVersioningBehavior: a rollout replays for minutes and its
// activities are the ones of the build that deployed the fix; it keeps the
// build it started on.
const RolloutVersioningBehavior = workflow.VersioningBehaviorPinned

// RegisterRollouts adds the rollout workflow and its activities.
func RegisterRollouts(r sdkworker.Registry, a *activities.Rollouts) {
	r.RegisterWorkflowWithOptions(workflows.ProjectionRolloutWorkflow, workflow.RegisterOptions{
		Name: contract.RolloutWorkflowName, VersioningBehavior: RolloutVersioningBehavior})
	r.RegisterActivityWithOptions(a.CheckCandidate, activity.RegisterOptions{Name: contract.CheckCandidateActivity})
	r.RegisterActivityWithOptions(a.DeployCandidate, activity.RegisterOptions{Name: contract.DeployCandidateActivity})
	r.RegisterActivityWithOptions(a.ReplayFailing, activity.RegisterOptions{Name: contract.ReplayFailingActivity})
	r.RegisterActivityWithOptions(a.CountSettled, activity.RegisterOptions{Name: contract.CountSettledActivity})
}

// MissingSearchAttributesError lists the commands that create the search
// attributes when the worker may not create them itself.
type MissingSearchAttributesError struct {
	Namespace string
	Missing   []string
	Cause     error
}

func (e *MissingSearchAttributesError) Error() string {
	var b strings.Builder
	if e.Cause != nil && strings.Contains(e.Cause.Error(), "cannot have more than") {
		// The visibility store's per-type limit: creating them by hand fails too.
		fmt.Fprintf(&b, "search attributes %s are missing in namespace %q and there is no room for them (%v): "+
			"Causet needs %d Keyword and %d Int custom search attributes, and SQL visibility (PostgreSQL, MySQL, SQLite) "+
			"allows 10 Keyword and 3 Int per namespace; give Causet a namespace of its own (temporal operator namespace create) "+
			"or remove attributes this namespace no longer uses",
			strings.Join(e.Missing, ", "), e.Namespace, e.Cause, len(contract.SearchAttributeNames), len(contract.IntSearchAttributeNames))
		return b.String()
	}
	fmt.Fprintf(&b, "search attributes %s are missing in namespace %q and could not be added (%v); create them with:",
		strings.Join(e.Missing, ", "), e.Namespace, e.Cause)
	for _, name := range e.Missing {
		fmt.Fprintf(&b, "\n  temporal operator search-attribute create --namespace %s --name %s --type %s", e.Namespace, name, searchAttributeType(name))
	}
	return b.String()
}

func allSearchAttributes() []string {
	return append(slices.Clone(contract.SearchAttributeNames), contract.IntSearchAttributeNames...)
}

func searchAttributeType(name string) string {
	if slices.Contains(contract.IntSearchAttributeNames, name) {
		return "Int"
	}
	return "Keyword"
}

// EnsureSearchAttributes adds the Keyword and Int search attributes the
// workflows use, where the server allows it; ops is client.OperatorService().
func EnsureSearchAttributes(ctx context.Context, ops operatorservice.OperatorServiceClient, namespace string) error {
	resp, err := ops.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return &MissingSearchAttributesError{Namespace: namespace, Missing: allSearchAttributes(), Cause: err}
	}
	add := map[string]enumspb.IndexedValueType{}
	var missing []string
	for _, name := range allSearchAttributes() {
		if _, ok := resp.GetCustomAttributes()[name]; !ok {
			add[name] = enumspb.INDEXED_VALUE_TYPE_KEYWORD
			if searchAttributeType(name) == "Int" {
				add[name] = enumspb.INDEXED_VALUE_TYPE_INT
			}
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if _, err := ops.AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: namespace, SearchAttributes: add,
	}); err != nil {
		return &MissingSearchAttributesError{Namespace: namespace, Missing: missing, Cause: err}
	}
	return nil
}

// MetricsHandler exposes the SDK's metrics on reg with Prometheus naming.
func MetricsHandler(reg prometheus.Registerer, logger *slog.Logger) (client.MetricsHandler, func(), error) {
	reporter := tallyprom.NewReporter(tallyprom.Options{
		Registerer: reg,
		OnRegisterError: func(err error) {
			logger.Warn("temporal metric registration failed", "err", err)
		},
	})
	scope, closer := tally.NewRootScope(tally.ScopeOptions{
		CachedReporter:  reporter,
		Separator:       tallyprom.DefaultSeparator,
		SanitizeOptions: &sdktally.PrometheusSanitizeOptions,
	}, time.Second)
	return sdktally.NewMetricsHandler(sdktally.NewPrometheusNamingScope(scope)), func() { _ = closer.Close() }, nil
}
