package main

import (
	"context"
	"log/slog"

	sdkworker "go.temporal.io/sdk/worker"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/config"
)

type workerCmd struct{}

func (workerCmd) Run(ctx context.Context, logger *slog.Logger) error {
	return serve(ctx, logger, (*app.Service).NewWorker, func(ctx context.Context, svc *app.Service, w sdkworker.Worker) error {
		attrs := []any{"taskQueue", svc.Config.TaskQueue, "metrics", svc.Config.MetricsAddr}
		if v := svc.Config.WorkerVersioning; v.Enabled() {
			// New workflows reach this build only once it is the deployment's current version.
			attrs = append(attrs, "workerDeployment", v.DeploymentName, "buildId", v.BuildID)
		}
		logger.Info("worker started", attrs...)
		// Run returns once ctx is done and running activities have drained.
		return w.Run(interruptOn(ctx))
	})
}

// serve runs `causet worker` and `causet bridge`: it opens the service from
// the environment (package app), builds what runs with build, serves
// /metrics, /healthz and /readyz on CAUSET_METRICS_ADDR, then calls run
// until ctx is done.
func serve[T any](ctx context.Context, logger *slog.Logger, build func(*app.Service) (T, error),
	run func(context.Context, *app.Service, T) error) error {
	cfg, err := config.FromEnv()
	if err != nil {
		return err
	}
	svc, err := app.Open(ctx, cfg, app.WithLogger(logger))
	if err != nil {
		return err
	}
	defer svc.Close()
	built, err := build(svc)
	if err != nil {
		return err
	}
	stopMetrics, err := svc.ServeMetrics()
	if err != nil {
		return err
	}
	defer stopMetrics()
	return run(ctx, svc, built)
}

// interruptOn turns ctx's end into the worker's interrupt channel.
func interruptOn(ctx context.Context) <-chan interface{} {
	ch := make(chan interface{})
	go func() {
		<-ctx.Done()
		close(ch)
	}()
	return ch
}
