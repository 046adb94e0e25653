package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/causet/projection-retry/client"
)

// submitIn, submitOut and submitErr are stdin, the outcome lines' and the
// summary's destinations (tests swap them).
var (
	submitIn  io.Reader = os.Stdin
	submitOut io.Writer = os.Stdout
	submitErr io.Writer = os.Stderr
)

// defaultRuntimeAddr is where the runtime listens unless CAUSET_RUNTIME_ADDR
// says otherwise.
const defaultRuntimeAddr = "127.0.0.1:8080"

// maxIntentLine bounds one input line: a payload may be 256 KiB, and the
// runtime refuses anything larger, so a longer line is a mistake.
const maxIntentLine = 1 << 20

type submitCmd struct {
	File string `arg:"" optional:"" name:"file" help:"JSON lines, one intent per line: {\"intentId\"?,\"intentType\",\"entityId\",\"forkId\",\"payload\"} (default or \"-\": stdin). A missing intentId gets a random one."`
	URL  string `name:"url" help:"The runtime's base URL (default: http:// and CAUSET_RUNTIME_ADDR, else 127.0.0.1:8080)."`
	// The bearer token comes from the environment, never a flag (a flag
	// shows in the process list).
}

// submitLine is one input line; every field but intentId is the runtime's to
// check.
type submitLine struct {
	IntentID   string          `json:"intentId"`
	IntentType string          `json:"intentType"`
	EntityID   string          `json:"entityId"`
	ForkID     string          `json:"forkId"`
	Payload    json.RawMessage `json:"payload"`
}

// Run submits the intents one at a time, in file order (so the intents of one
// entity reach the runtime in that order), with the client's retries, and
// prints one tab-separated line per input line:
//
//	<source>:<line>  <intentId>  SUCCESS   events=<n>
//	<source>:<line>  <intentId>  REJECTED  rule=<rule> reason=<quoted reason>
//	<source>:<line>  <intentId>  FAILED    <why>
//
// A FAILED line (unreadable, refused by the runtime, or given up on) does not
// stop the others; the command then exits non-zero. A rejection is an
// outcome, not a failure. Blank lines are skipped.
func (c submitCmd) Run(ctx context.Context) error {
	base, err := runtimeURL(c.URL)
	if err != nil {
		return err
	}
	in, name, closeIn, err := openInput(c.File, submitIn)
	if err != nil {
		return err
	}
	defer closeIn()
	cl := client.New(base, client.WithToken(os.Getenv("CAUSET_RUNTIME_TOKEN")))
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64*1024), maxIntentLine)
	var line, succeeded, rejected, failed int
	for sc.Scan() {
		line++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		where := fmt.Sprintf("%s:%d", name, line)
		in, err := parseIntent(raw)
		if err != nil {
			failed++
			fmt.Fprintf(submitOut, "%s\t-\tFAILED\t%v\n", where, err)
			continue
		}
		res, err := cl.Submit(ctx, in)
		switch {
		case err != nil:
			failed++
			fmt.Fprintf(submitOut, "%s\t%s\tFAILED\t%s\n", where, in.IntentID, oneLine(err))
			if ctx.Err() != nil {
				return fmt.Errorf("stopped at %s: %w (%d succeeded, %d rejected, %d failed)", where, ctx.Err(), succeeded, rejected, failed)
			}
		case res.Status == client.ResultRejected:
			rejected++
			fmt.Fprintf(submitOut, "%s\t%s\tREJECTED\trule=%s reason=%q\n", where, in.IntentID, res.Rule, res.Reason)
		default:
			succeeded++
			fmt.Fprintf(submitOut, "%s\t%s\tSUCCESS\tevents=%d\n", where, in.IntentID, len(res.Events))
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("line %d is longer than %d bytes", line+1, maxIntentLine)
		}
		return fmt.Errorf("read %s: %w (%d succeeded, %d rejected, %d failed before it)", name, err, succeeded, rejected, failed)
	}
	fmt.Fprintf(submitErr, "submitted to %s: %d succeeded, %d rejected, %d failed\n", base, succeeded, rejected, failed)
	if failed > 0 {
		return fmt.Errorf("%d of %d intents failed (reported above)", failed, succeeded+rejected+failed)
	}
	return nil
}

// runtimeURL is --url, else http:// and CAUSET_RUNTIME_ADDR, else the default
// address. A --url without a scheme is taken as host:port.
func runtimeURL(flag string) (string, error) {
	u := strings.TrimSpace(flag)
	if u == "" {
		addr := strings.TrimSpace(os.Getenv("CAUSET_RUNTIME_ADDR"))
		if addr == "" {
			addr = defaultRuntimeAddr
		}
		if strings.Contains(addr, "://") {
			return "", fmt.Errorf("CAUSET_RUNTIME_ADDR=%q is invalid: want host:port such as %s (use --url for a full URL)", addr, defaultRuntimeAddr)
		}
		u = addr
	}
	if !strings.Contains(u, "://") {
		u = "http://" + u
	}
	if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return "", fmt.Errorf("runtime URL %q is invalid: want http://host:port, https://host:port or host:port", u)
	}
	return u, nil
}

func parseIntent(raw []byte) (client.Intent, error) {
	var l submitLine
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return client.Intent{}, fmt.Errorf("not a JSON intent: %v", err)
	}
	if dec.More() {
		return client.Intent{}, errors.New("not a JSON intent: trailing data after the object")
	}
	if l.IntentID == "" {
		l.IntentID = client.NewIntentID()
	}
	return client.Intent{IntentID: l.IntentID, IntentType: l.IntentType, EntityID: l.EntityID, ForkID: l.ForkID, Payload: l.Payload}, nil
}
