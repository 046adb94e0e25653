package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/causet/projection-retry/intents"
	"github.com/causet/projection-retry/projection"
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

// intentDocs are the intent handler documents the intents subcommands
// handle.
var intentDocs = docCommands[intents.Document, intents.Deployment, *intents.ValidationError, intents.Option]{
	out:           &intentsOut,
	noun:          "intent handler",
	parse:         intents.ParseFile,
	withCostLimit: intents.WithCostLimit,
	problems:      func(ve *intents.ValidationError) []projection.Problem { return ve.Problems },
	summary: func(doc *intents.Document) string {
		return fmt.Sprintf("intent %s, %d reads, %d rules, emits %s",
			doc.IntentType, len(doc.Reads), len(doc.Rules), strings.Join(emitted(doc), ", "))
	},
	name:    func(doc *intents.Document) string { return doc.IntentType },
	deploy:  intents.Deploy,
	nameKey: "intentType", versionKey: "handlerVersion",
	connect: documentsPool,
	list:    intents.List,
	header:  "INTENT TYPE\tVERSION\tDEPLOYED AT\tEMITS",
	row: func(d intents.Deployment) (string, int, time.Time, string) {
		return d.IntentType, d.Version, d.DeployedAt, strings.Join(emitted(d.Document), ", ")
	},
}

func emitted(doc *intents.Document) []string {
	out := make([]string, len(doc.Emits))
	for i, e := range doc.Emits {
		out[i] = e.EventType
	}
	return out
}

func (c intentsValidateCmd) Run(ctx context.Context, logger *slog.Logger) error {
	return intentDocs.validate(c.Files)
}

func (c intentsDeployCmd) Run(ctx context.Context, logger *slog.Logger) error {
	return intentDocs.deployFiles(ctx, logger, c.Files)
}

func (c intentsListCmd) Run(ctx context.Context, logger *slog.Logger) error {
	return intentDocs.listDeployed(ctx)
}
