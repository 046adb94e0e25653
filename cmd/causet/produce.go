package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/tracing"
	"github.com/causet/projection-retry/starter"
)

// produceIn and produceOut are stdin and the summary's destination (tests swap them).
var (
	produceIn  io.Reader = os.Stdin
	produceOut io.Writer = os.Stdout
	produceErr io.Writer = os.Stderr
)

// produceBatch is how many records one ProduceSync call carries.
const produceBatch = 500

type produceCmd struct {
	File string `arg:"" optional:"" name:"file" help:"JSON lines, one event envelope per line (default or \"-\": stdin)."`
}

// Run validates every line with event.Decode and produces the valid ones to
// CAUSET_EVENTS_TOPIC at KAFKA_BROKERS, keyed by entityId, in batches. Blank
// lines are skipped. Every invalid line is reported on stderr with its line
// number and is not produced; the valid lines are still produced, and the
// command then exits non-zero. Lines are produced in file order (per key,
// the order Kafka keeps).
func (c produceCmd) Run(ctx context.Context, logger *slog.Logger) error {
	cfg, err := config.FromEnv()
	if err != nil {
		return err
	}
	in, name, closeIn, err := openInput(c.File, produceIn)
	if err != nil {
		return err
	}
	defer closeIn()
	// Traced, each produced event starts its trace (traceparent header).
	cl, err := app.NewKafkaClient(cfg, append([]kgo.Opt{
		kgo.DefaultProduceTopic(cfg.EventsTopic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.WithLogger(starter.KafkaLogger(logger)),
	}, tracing.Default().KafkaOpts("")...)...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()

	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64*1024), event.MaxSize+1024)
	var (
		batch          []*kgo.Record
		line, produced int
		bad            int
	)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			return fmt.Errorf("produce to %s at %v: %w (%d records produced before this batch)", cfg.EventsTopic, cfg.KafkaBrokers, err, produced)
		}
		produced += len(batch)
		batch = batch[:0]
		return nil
	}
	for sc.Scan() {
		line++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		ev, err := event.Decode(raw)
		if err != nil {
			bad++
			fmt.Fprintf(produceErr, "%s:%d: %v\n", name, line, err)
			continue
		}
		batch = append(batch, &kgo.Record{Key: []byte(ev.EntityID), Value: bytes.Clone(raw)})
		if len(batch) >= produceBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("line %d is longer than %d bytes", line+1, event.MaxSize)
		}
		if ferr := flush(); ferr != nil {
			return errors.Join(err, ferr)
		}
		return fmt.Errorf("read %s: %w (%d events produced)", name, err, produced)
	}
	if err := flush(); err != nil {
		return err
	}
	fmt.Fprintf(produceOut, "produced %d events to %s", produced, cfg.EventsTopic)
	if bad > 0 {
		fmt.Fprintf(produceOut, "; %d invalid lines skipped", bad)
	}
	fmt.Fprintln(produceOut)
	if bad > 0 {
		return fmt.Errorf("%d of %d lines are not valid event envelopes (reported above); the %d valid ones were produced", bad, bad+produced, produced)
	}
	return nil
}

// openInput opens file for reading, or gives stdin when file is "" or "-",
// with the name lines are reported under.
func openInput(file string, stdin io.Reader) (in io.Reader, name string, closeIn func(), err error) {
	if file == "" || file == "-" {
		return stdin, "stdin", func() {}, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, "", nil, err
	}
	return f, file, func() { _ = f.Close() }, nil
}
