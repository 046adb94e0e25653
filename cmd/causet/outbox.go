package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/causet/projection-retry/relay"
)

// outboxCmd inspects and re-drives the events the outbox relay set aside
// because Kafka refuses them.
type outboxCmd struct {
	List    outboxListCmd    `cmd:"" help:"List the events the relay set aside (Kafka refuses them for themselves), with the reason."`
	Redrive outboxRedriveCmd `cmd:"" help:"Put set-aside events back in the outbox so that the relay sends them again (after raising the topic's max.message.bytes, say)."`
}

type outboxListCmd struct {
	Limit int  `default:"100" help:"At most this many events, oldest first, 1-10000."`
	JSON  bool `name:"json" help:"Print JSON lines instead of a table."`
}

// outboxOut is where causet outbox prints (tests replace it).
var outboxOut io.Writer = os.Stdout

func (c outboxListCmd) Run(ctx context.Context) error {
	return listing[relay.SetAsideEvent]{
		out:   outboxOut,
		empty: "no events set aside",
		read:  relay.ListSetAside,
		json:  func(e relay.SetAsideEvent) any { return e },
		head:  "POSITION\tEVENT\tTYPE\tFORK\tENTITY\tBYTES\tSET ASIDE\tREASON",
		row: func(e relay.SetAsideEvent) string {
			return fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s", e.Position, e.EventID, e.EventType, e.ForkID, e.EntityID, e.Bytes,
				e.SetAsideAt.UTC().Format(time.RFC3339), e.Reason)
		},
	}.run(ctx, c.Limit, c.JSON)
}

type outboxRedriveCmd struct {
	EventIDs []string `arg:"" optional:"" name:"event-id" help:"The events to send again."`
	All      bool     `help:"Every event set aside."`
	Force    bool     `help:"Send events whose entity has published a later event since (their projections' read models may go back); needs --identity and --reason."`
	Identity string   `help:"Who forces the redrive (with --force)."`
	Reason   string   `help:"Why (with --force)."`
}

func (c outboxRedriveCmd) Run(ctx context.Context) error {
	if len(c.EventIDs) == 0 && !c.All {
		return fmt.Errorf("name the events to send again, or --all")
	}
	if len(c.EventIDs) > 0 && c.All {
		return fmt.Errorf("name events or --all, not both")
	}
	if c.Force && (strings.TrimSpace(c.Identity) == "" || strings.TrimSpace(c.Reason) == "") {
		return fmt.Errorf("--force needs --identity and --reason: a forced redrive is recorded with who and why")
	}
	pool, err := documentsPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	n, refused, err := relay.Redrive(ctx, pool, c.EventIDs, c.Force)
	if err != nil {
		return err
	}
	if c.Force {
		slog.Warn("set-aside events redriven with --force: the sequence check was skipped", "event", "outbox_redrive_forced",
			"identity", c.Identity, "reason", c.Reason, "eventIds", c.EventIDs, "all", c.All, "redriven", n)
	}
	fmt.Fprintf(outboxOut, "%d events back in the outbox: the relay sends them again, after the later events of their entities it published meanwhile\n", n)
	if len(refused) > 0 {
		for _, r := range refused {
			fmt.Fprintln(outboxOut, r.Error())
		}
		return fmt.Errorf("%d events not redriven: their entities published later events since", len(refused))
	}
	return nil
}
