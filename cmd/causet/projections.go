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
	"github.com/causet/projection-retry/projection"
)

// projectionsOut is where the projections subcommands print (tests swap it).
var projectionsOut io.Writer = os.Stdout

type projectionsCmd struct {
	Validate projectionsValidateCmd `cmd:"" help:"Check IR documents (no database needed)."`
	Deploy   projectionsDeployCmd   `cmd:"" help:"Validate IR documents, then deploy each as the next version of its projection (DATABASE_URL)."`
	List     projectionsListCmd     `cmd:"" help:"List the newest deployed version of every projection (DATABASE_URL)."`
}

type projectionsValidateCmd struct {
	Files []string `arg:"" name:"file" help:"IR documents (YAML or JSON)." type:"existingfile"`
}

type projectionsDeployCmd struct {
	Files []string `arg:"" name:"file" help:"IR documents (YAML or JSON)." type:"existingfile"`
}

type projectionsListCmd struct{}

// parseProjectionFiles parses every file against the CEL cost limit the
// worker will apply (CAUSET_IR_COST_LIMIT), printing one line per file; it
// fails if any is invalid.
func parseProjectionFiles(files []string) ([]*projection.Document, error) {
	cfg, err := config.FromEnv()
	if err != nil {
		return nil, err
	}
	var docs []*projection.Document
	bad := 0
	for _, f := range files {
		doc, err := projection.ParseFile(f, projection.WithCostLimit(cfg.IRCostLimit))
		if err != nil {
			bad++
			var ve *projection.ValidationError
			if errors.As(err, &ve) {
				fmt.Fprintf(projectionsOut, "%s: invalid\n", f)
				for _, p := range ve.Problems {
					fmt.Fprintf(projectionsOut, "  %s\n", p)
				}
			} else {
				fmt.Fprintf(projectionsOut, "%s: invalid: %v\n", f, err)
			}
			continue
		}
		fmt.Fprintf(projectionsOut, "%s: ok (projection %s, table %s, events %s)\n",
			f, doc.Name, doc.Table, strings.Join(doc.SourceEvents, ", "))
		docs = append(docs, doc)
	}
	if bad > 0 {
		return nil, fmt.Errorf("%d of %d projection documents are invalid", bad, len(files))
	}
	return docs, nil
}

func (c projectionsValidateCmd) Run(ctx context.Context, logger *slog.Logger) error {
	_, err := parseProjectionFiles(c.Files)
	return err
}

func (c projectionsDeployCmd) Run(ctx context.Context, logger *slog.Logger) error {
	cfg, err := config.FromEnv()
	if err != nil {
		return err
	}
	docs, err := parseProjectionFiles(c.Files)
	if err != nil {
		return fmt.Errorf("%w; nothing deployed", err)
	}
	pool, err := projectionsPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	for i, doc := range docs {
		v, err := projection.Deploy(ctx, pool, doc, projection.WithCostLimit(cfg.IRCostLimit))
		if err != nil {
			return err
		}
		fmt.Fprintf(projectionsOut, "deployed %s version %d (%s)\n", doc.Name, v, c.Files[i])
		logger.Debug("projection deployed", "projectionName", doc.Name, "irVersion", v)
	}
	return nil
}

func (c projectionsListCmd) Run(ctx context.Context, logger *slog.Logger) error {
	pool, err := projectionsPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	deps, err := projection.List(ctx, pool)
	if err != nil {
		return err
	}
	if len(deps) == 0 {
		fmt.Fprintln(projectionsOut, "no projections deployed")
		return nil
	}
	tw := tabwriter.NewWriter(projectionsOut, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVERSION\tDEPLOYED AT\tSOURCE EVENTS")
	for _, d := range deps {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", d.Name, d.Version, d.DeployedAt.UTC().Format(time.RFC3339), strings.Join(d.SourceEvents, ", "))
	}
	return tw.Flush()
}

// projectionsPool connects to DATABASE_URL. Errors never echo the URL, which
// may hold a password.
func projectionsPool(ctx context.Context) (*pgxpool.Pool, error) {
	url := strings.TrimSpace(os.Getenv("DATABASE_URL"))
	if url == "" {
		return nil, errors.New("DATABASE_URL is not set; set it to the PostgreSQL URL holding the projections, e.g. postgres://user:pass@host:5432/db")
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
