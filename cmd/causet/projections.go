package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/internal/schema"
	"github.com/causet/projection-retry/projection"
)

// projectionsOut is where the projections subcommands print (tests swap it).
var projectionsOut io.Writer = os.Stdout

type projectionsCmd struct {
	Validate projectionsValidateCmd `cmd:"" help:"Check IR documents (no database needed)."`
	Check    projectionsCheckCmd    `cmd:"" help:"Try a candidate IR document on the projection's failing events (dead letters, held, parked, retrying) in transactions that roll back; nothing is deployed or written (DATABASE_URL, Temporal, Kafka)."`
	Rollout  projectionsRolloutCmd  `cmd:"" help:"Check, deploy and replay a fixed IR document as one Temporal workflow (projection-rollout:<projection>:<version>) with its progress in the UI."`
	Deploy   projectionsDeployCmd   `cmd:"" help:"Validate IR documents, then deploy each as the next version of its projection (DATABASE_URL)."`
	List     projectionsListCmd     `cmd:"" help:"List the newest deployed version of every projection and the dedupe ledger's size, oldest entry and horizon (DATABASE_URL)."`
}

type projectionsValidateCmd struct {
	Files []string `arg:"" name:"file" help:"IR documents (YAML or JSON)." type:"existingfile"`
}

type projectionsDeployCmd struct {
	Files []string `arg:"" name:"file" help:"IR documents (YAML or JSON)." type:"existingfile"`
}

type projectionsListCmd struct{}

// projectionDocs are the projection IR documents the projections
// subcommands handle.
var projectionDocs = docCommands[projection.Document, projection.Deployment, *projection.ValidationError, projection.Option]{
	out:           &projectionsOut,
	noun:          "projection",
	parse:         projection.ParseFile,
	withCostLimit: projection.WithCostLimit,
	problems:      func(ve *projection.ValidationError) []projection.Problem { return ve.Problems },
	summary: func(doc *projection.Document) string {
		return fmt.Sprintf("projection %s, table %s, events %s", doc.Name, doc.Table, strings.Join(doc.SourceEvents, ", "))
	},
	name:    func(doc *projection.Document) string { return doc.Name },
	deploy:  projection.Deploy,
	nameKey: "projectionName", versionKey: "irVersion",
	connect: documentsPool,
	list:    projection.List,
	header:  "NAME\tVERSION\tDEPLOYED AT\tSOURCE EVENTS",
	row: func(d projection.Deployment) (string, int, time.Time, string) {
		return d.Name, d.Version, d.DeployedAt, strings.Join(d.SourceEvents, ", ")
	},
}

func (c projectionsValidateCmd) Run(ctx context.Context, logger *slog.Logger) error {
	return projectionDocs.validate(c.Files)
}

func (c projectionsDeployCmd) Run(ctx context.Context, logger *slog.Logger) error {
	return projectionDocs.deployFiles(ctx, logger, c.Files)
}

func (c projectionsListCmd) Run(ctx context.Context, logger *slog.Logger) error {
	if err := projectionDocs.listDeployed(ctx); err != nil {
		return err
	}
	pool, err := documentsPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := projection.ReadDedupeStats(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Fprint(projectionsOut, dedupeSummary(st))
	return nil
}

// dedupeSummary describes the dedupe ledger in two lines.
func dedupeSummary(st projection.DedupeStats) string {
	oldest := "none"
	if o := st.Oldest(); !o.IsZero() {
		oldest = o.Format(time.RFC3339)
	}
	window := "none yet (every event in bucket 0 until a worker or bridge maintains it)"
	if !st.MaintainedAt.IsZero() && st.To.After(st.From) {
		window = fmt.Sprintf("occurredAt %s to %s, maintained %s", st.From.Format(time.RFC3339), st.To.Format(time.RFC3339),
			st.MaintainedAt.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("\ndedupe ledger: %s in %d hour partitions and bucket 0 (about %d rows); oldest entry %s; horizon %s\nhour partitions: %s\n",
		bytesIEC(st.Bytes), st.Partitions, st.UnbucketedRows, oldest, st.Horizon, window)
}

// bytesIEC renders n bytes as KiB, MiB or GiB.
func bytesIEC(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 3; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGT"[exp])
}

// documentsPool connects to DATABASE_URL for the projections and intents
// commands and checks the database's schema version as every process does
// (schema.Check, migrating only with CAUSET_AUTO_MIGRATE).
func documentsPool(ctx context.Context) (*pgxpool.Pool, error) {
	cfg, err := config.FromEnv()
	if err != nil {
		return nil, err
	}
	pool, err := connectPostgres(ctx)
	if err != nil {
		return nil, err
	}
	if err := schema.Check(ctx, pool, cfg.AutoMigrate, nil); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// connectPostgres connects to DATABASE_URL with a small pool and pings it.
// Errors never echo the URL, which may hold a password.
func connectPostgres(ctx context.Context) (*pgxpool.Pool, error) {
	url := strings.TrimSpace(os.Getenv("DATABASE_URL"))
	if err := (config.Config{DatabaseURL: url}).RequireDatabaseURL(); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, errors.New("DATABASE_URL is not a valid PostgreSQL connection string")
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: connect to PostgreSQL at %s:%d: %v", cfg.ConnConfig.Host, cfg.ConnConfig.Port, errorWithoutPassword(err, cfg.ConnConfig.Password))
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("DATABASE_URL: cannot reach PostgreSQL at %s:%d: %v", cfg.ConnConfig.Host, cfg.ConnConfig.Port, errorWithoutPassword(err, cfg.ConnConfig.Password))
	}
	return pool, nil
}

// errorWithoutPassword renders err on one line with any occurrence of the
// password masked.
func errorWithoutPassword(err error, password string) string {
	s := strings.ReplaceAll(strings.ReplaceAll(err.Error(), "\n\t", "; "), "\n", " ")
	if password != "" {
		s = strings.ReplaceAll(s, password, "xxxxx")
	}
	return s
}

// docCommands are the validate, deploy and list subcommands of one kind of
// document, D, deployed as Dep, whose validation error is VE and whose
// options are O: `causet projections` and `causet intents`.
type docCommands[D, Dep any, VE error, O any] struct {
	out  *io.Writer // where they print
	noun string     // names the kind: "<noun> documents", "no <noun>s deployed"
	// parse and deploy are given the CEL cost limit the engine will apply
	// (CAUSET_IR_COST_LIMIT) as withCostLimit's option.
	parse         func(path string, opts ...O) (*D, error)
	withCostLimit func(limit uint64) O
	problems      func(ve VE) []projection.Problem
	summary       func(doc *D) string // what a valid file prints after "ok"
	name          func(doc *D) string
	deploy        func(ctx context.Context, pool *pgxpool.Pool, doc *D, opts ...O) (int, error)
	// nameKey and versionKey are the log attributes of a deployed document.
	nameKey, versionKey string
	connect             func(ctx context.Context) (*pgxpool.Pool, error)
	list                func(ctx context.Context, pool *pgxpool.Pool) ([]Dep, error)
	header              string // list's header line
	row                 func(d Dep) (name string, version int, deployedAt time.Time, detail string)
}

// parseFiles parses every file, printing one line per file (and one per
// fault); it fails if any is invalid.
func (k docCommands[D, Dep, VE, O]) parseFiles(files []string) ([]*D, error) {
	return k.parseFilesTo(*k.out, files)
}

// parseFilesTo is parseFiles printing to w.
func (k docCommands[D, Dep, VE, O]) parseFilesTo(w io.Writer, files []string) ([]*D, error) {
	cfg, err := config.FromEnv()
	if err != nil {
		return nil, err
	}
	var docs []*D
	bad := 0
	for _, f := range files {
		doc, err := k.parse(f, k.withCostLimit(cfg.IRCostLimit))
		if err != nil {
			bad++
			var ve VE
			if errors.As(err, &ve) {
				fmt.Fprintf(w, "%s: invalid\n", f)
				for _, p := range k.problems(ve) {
					fmt.Fprintf(w, "  %s\n", p)
				}
			} else {
				fmt.Fprintf(w, "%s: invalid: %v\n", f, err)
			}
			continue
		}
		fmt.Fprintf(w, "%s: ok (%s)\n", f, k.summary(doc))
		docs = append(docs, doc)
	}
	if bad > 0 {
		return nil, fmt.Errorf("%d of %d %s documents are invalid", bad, len(files), k.noun)
	}
	return docs, nil
}

func (k docCommands[D, Dep, VE, O]) validate(files []string) error {
	_, err := k.parseFiles(files)
	return err
}

// deployFiles deploys every file, once all are valid, in order.
func (k docCommands[D, Dep, VE, O]) deployFiles(ctx context.Context, logger *slog.Logger, files []string) error {
	cfg, err := config.FromEnv()
	if err != nil {
		return err
	}
	docs, err := k.parseFiles(files)
	if err != nil {
		return fmt.Errorf("%w; nothing deployed", err)
	}
	pool, err := k.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	for i, doc := range docs {
		v, err := k.deploy(ctx, pool, doc, k.withCostLimit(cfg.IRCostLimit))
		if err != nil {
			return err
		}
		fmt.Fprintf(*k.out, "deployed %s version %d (%s)\n", k.name(doc), v, files[i])
		logger.Debug(k.noun+" deployed", k.nameKey, k.name(doc), k.versionKey, v)
	}
	return nil
}

// listDeployed prints the newest deployed version of every document.
func (k docCommands[D, Dep, VE, O]) listDeployed(ctx context.Context) error {
	pool, err := k.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	deps, err := k.list(ctx, pool)
	if err != nil {
		return err
	}
	if len(deps) == 0 {
		fmt.Fprintf(*k.out, "no %ss deployed\n", k.noun)
		return nil
	}
	tw := tabwriter.NewWriter(*k.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, k.header)
	for _, d := range deps {
		name, version, deployedAt, detail := k.row(d)
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", name, version, deployedAt.UTC().Format(time.RFC3339), detail)
	}
	return tw.Flush()
}
