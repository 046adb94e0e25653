package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"text/tabwriter"
	"time"

	"github.com/causet/projection-retry/internal/schema"
)

type migrateCmd struct {
	Up     migrateUpCmd     `cmd:"" help:"Apply the pending schema migrations to DATABASE_URL, in order, under an advisory lock (two runs never interleave)."`
	Status migrateStatusCmd `cmd:"" help:"Show the database's schema version and every migration this build knows, applied or pending."`
	SQL    migrateSQLCmd    `cmd:"" name:"sql" help:"Print the SQL of the pending migrations, exactly as up runs it, for teams that apply schema changes with their own tools (psql, goose, golang-migrate, Atlas)."`
}

// migrateOut is where the migrate commands print (tests replace it).
var migrateOut io.Writer = os.Stdout

type migrateUpCmd struct{}

func (migrateUpCmd) Run(ctx context.Context, logger *slog.Logger) error {
	pool, err := connectPostgres(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	before, err := schema.Version(ctx, pool)
	if err != nil {
		return err
	}
	applied, err := schema.Up(ctx, pool, logger)
	for _, m := range applied {
		fmt.Fprintf(migrateOut, "applied %s (version %d)\n", m.Name, m.Version)
	}
	if err != nil {
		return err
	}
	switch {
	case len(applied) == 0 && before > schema.Latest():
		fmt.Fprintf(migrateOut, "nothing to apply: the database schema is at version %d, newer than this build's %d and within its window (every migration past it is an expand step)\n", before, schema.Latest())
		return nil
	case len(applied) == 0:
		fmt.Fprintf(migrateOut, "nothing to apply: the database schema is at version %d, this build's newest\n", before)
		return nil
	}
	fmt.Fprintf(migrateOut, "the database schema is at version %d (was %d)\n", applied[len(applied)-1].Version, before)
	return nil
}

type migrateStatusCmd struct{}

func (migrateStatusCmd) Run(ctx context.Context) error {
	pool, err := connectPostgres(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	version, err := schema.Version(ctx, pool)
	if err != nil {
		return err
	}
	states, err := schema.Status(ctx, pool)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(migrateOut, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tSTATE\tAPPLIED AT\tMIGRATION")
	pending := 0
	for _, s := range states {
		state, at := "applied", s.Applied.UTC().Format(time.RFC3339)
		if s.Pending() {
			state, at = "pending", "-"
			pending++
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", s.Version, state, at, s.Name)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch latest := schema.Latest(); {
	case version > latest:
		if err := schema.InWindow(ctx, pool, version); err != nil {
			fmt.Fprintln(migrateOut, err)
			break
		}
		fmt.Fprintf(migrateOut, "the database schema is at version %d, newer than this build knows (%d), within its window: every migration past it is an expand step, and this build runs on it\n", version, latest)
	case pending == 0:
		fmt.Fprintf(migrateOut, "the database schema is at version %d: up to date\n", version)
	default:
		fmt.Fprintf(migrateOut, "the database schema is at version %d; %d pending (causet migrate up, or causet migrate sql to review them)\n", version, pending)
	}
	return nil
}

type migrateSQLCmd struct{}

func (migrateSQLCmd) Run(ctx context.Context) error {
	pool, err := connectPostgres(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	out, err := schema.PendingSQL(ctx, pool)
	if err != nil {
		return err
	}
	if out == "" {
		fmt.Fprintln(os.Stderr, "causet migrate sql: nothing pending")
		return nil
	}
	_, err = io.WriteString(migrateOut, out)
	return err
}
