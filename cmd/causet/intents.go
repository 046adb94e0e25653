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

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/intents"
)

// intentsOut is where the intents subcommands print (tests swap it).
var intentsOut io.Writer = os.Stdout

type intentsCmd struct {
	Validate intentsValidateCmd `cmd:"" help:"Check intent handler documents (no database needed)."`
	Deploy   intentsDeployCmd   `cmd:"" help:"Validate intent handler documents, then deploy each as the next version of its intent type (DATABASE_URL)."`
	List     intentsListCmd     `cmd:"" help:"List the newest deployed version of every intent handler (DATABASE_URL)."`
}

type intentsValidateCmd struct {
	Files []string `arg:"" name:"file" help:"Intent handler documents (YAML or JSON)." type:"existingfile"`
}

type intentsDeployCmd struct {
	Files []string `arg:"" name:"file" help:"Intent handler documents (YAML or JSON)." type:"existingfile"`
}

type intentsListCmd struct{}

// parseIntentFiles parses every file against the CEL cost limit the runtime
// will apply (CAUSET_IR_COST_LIMIT), printing one line per file; it fails if
// any is invalid.
func parseIntentFiles(files []string) ([]*intents.Document, error) {
	cfg, err := config.FromEnv()
	if err != nil {
		return nil, err
	}
	var docs []*intents.Document
	bad := 0
	for _, f := range files {
		doc, err := intents.ParseFile(f, intents.WithCostLimit(cfg.IRCostLimit))
		if err != nil {
			bad++
			var ve *intents.ValidationError
			if errors.As(err, &ve) {
				fmt.Fprintf(intentsOut, "%s: invalid\n", f)
				for _, p := range ve.Problems {
					fmt.Fprintf(intentsOut, "  %s\n", p)
				}
			} else {
				fmt.Fprintf(intentsOut, "%s: invalid: %v\n", f, err)
			}
			continue
		}
		fmt.Fprintf(intentsOut, "%s: ok (intent %s, %d reads, %d rules, emits %s)\n",
			f, doc.IntentType, len(doc.Reads), len(doc.Rules), strings.Join(emitted(doc), ", "))
		docs = append(docs, doc)
	}
	if bad > 0 {
		return nil, fmt.Errorf("%d of %d intent handler documents are invalid", bad, len(files))
	}
	return docs, nil
}

func emitted(doc *intents.Document) []string {
	out := make([]string, len(doc.Emits))
	for i, e := range doc.Emits {
		out[i] = e.EventType
	}
	return out
}

func (c intentsValidateCmd) Run(ctx context.Context, logger *slog.Logger) error {
	_, err := parseIntentFiles(c.Files)
	return err
}

func (c intentsDeployCmd) Run(ctx context.Context, logger *slog.Logger) error {
	cfg, err := config.FromEnv()
	if err != nil {
		return err
	}
	docs, err := parseIntentFiles(c.Files)
	if err != nil {
		return fmt.Errorf("%w; nothing deployed", err)
	}
	pool, err := openDatabase(ctx, cfg, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	for i, doc := range docs {
		v, err := intents.Deploy(ctx, pool, doc, intents.WithCostLimit(cfg.IRCostLimit))
		if err != nil {
			return err
		}
		fmt.Fprintf(intentsOut, "deployed %s version %d (%s)\n", doc.IntentType, v, c.Files[i])
		logger.Debug("intent handler deployed", "intentType", doc.IntentType, "handlerVersion", v)
	}
	return nil
}

func (c intentsListCmd) Run(ctx context.Context, logger *slog.Logger) error {
	cfg, err := config.FromEnv()
	if err != nil {
		return err
	}
	pool, err := openDatabase(ctx, cfg, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	deps, err := intents.List(ctx, pool)
	if err != nil {
		return err
	}
	if len(deps) == 0 {
		fmt.Fprintln(intentsOut, "no intent handlers deployed")
		return nil
	}
	tw := tabwriter.NewWriter(intentsOut, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INTENT TYPE\tVERSION\tDEPLOYED AT\tEMITS")
	for _, d := range deps {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", d.IntentType, d.Version, d.DeployedAt.UTC().Format(time.RFC3339), strings.Join(emitted(d.Document), ", "))
	}
	return tw.Flush()
}
