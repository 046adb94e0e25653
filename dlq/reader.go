package dlq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Position is where a Reader starts on every partition of the DLQ topic.
// The zero Position is the beginning of the topic.
type Position struct {
	at      time.Time
	offsets map[int32]int64
	all     *int64
}

// FromStart starts at the first record still on the topic.
func FromStart() Position { return Position{} }

// FromTime starts, on every partition, at the first record whose Kafka
// timestamp is at or after t.
func FromTime(t time.Time) Position { return Position{at: t} }

// FromOffset starts at offset on every partition (clamped to what the topic
// still holds).
func FromOffset(offset int64) Position { return Position{all: &offset} }

// FromOffsets starts each listed partition at its offset; partitions not
// listed are not read.
func FromOffsets(offsets map[int32]int64) Position { return Position{offsets: maps.Clone(offsets)} }

// String describes p for messages.
func (p Position) String() string {
	switch {
	case !p.at.IsZero():
		return "from " + p.at.Format(time.RFC3339)
	case p.all != nil:
		return fmt.Sprintf("from offset %d", *p.all)
	case p.offsets != nil:
		return fmt.Sprintf("from offsets %v", p.offsets)
	}
	return "from the start"
}

// Filter selects records. Empty fields match everything.
type Filter struct {
	Projection string
	EventType  string
	ForkID     string
	ErrorKind  string
	// Since keeps records dead-lettered at or after it.
	Since time.Time
	// Until keeps records dead-lettered before it.
	Until time.Time
}

// Match reports whether r passes f.
func (f Filter) Match(r Record) bool {
	switch {
	case f.Projection != "" && r.ProjectionName != f.Projection,
		f.EventType != "" && r.EventType != f.EventType,
		f.ForkID != "" && r.ForkID != f.ForkID,
		f.ErrorKind != "" && r.ErrorKind != f.ErrorKind,
		!f.Since.IsZero() && r.DeadLetteredAt.Before(f.Since),
		!f.Until.IsZero() && !r.DeadLetteredAt.Before(f.Until):
		return false
	}
	return true
}

// matchHeaders applies the filters the headers can answer, for records whose
// value could not be decoded; what the headers do not say passes.
func (f Filter) matchHeaders(rec *kgo.Record) bool {
	want := map[string]string{HeaderProjection: f.Projection, HeaderEventType: f.EventType, HeaderErrorKind: f.ErrorKind}
	for _, h := range rec.Headers {
		if w := want[h.Key]; w != "" && string(h.Value) != w {
			return false
		}
	}
	if !f.Since.IsZero() && rec.Timestamp.Before(f.Since) {
		return false
	}
	return true
}

// Item is one DLQ record with its Kafka coordinates.
type Item struct {
	// Record is the decoded value; zero when Err is set.
	Record Record
	// Err is set when the value could not be decoded: an
	// *UnsupportedVersionError for a schemaVersion this build does not
	// know (it is reported, never guessed), or a JSON error.
	Err error
	// Key is the Kafka key, the original event's key.
	Key       []byte
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time
	// Headers are the record's Kafka headers.
	Headers map[string]string
}

// ReaderOptions configure NewReader.
type ReaderOptions struct {
	// Brokers are the seed brokers. Required.
	Brokers []string
	// Topic is CAUSET_DLQ_TOPIC. Required.
	Topic string
	// Start is where reading begins. Optional, defaults to the start of the topic.
	// With Start at the start of the topic and Filter.Since set, the reader
	// seeks to Since (less one minute for clock skew) instead.
	Start Position
	// Filter selects the records Read yields. Optional, defaults to all.
	Filter Filter
	// Follow keeps reading new records until the context ends. Optional,
	// defaults to stopping at the end offsets captured by NewReader.
	Follow bool
	// ClientOpts are extra franz-go options (TLS, SASL, logger). Optional.
	ClientOpts []kgo.Opt
}

func (o *ReaderOptions) validate() error {
	switch {
	case len(o.Brokers) == 0:
		return errors.New("dlq reader: Brokers is required")
	case o.Topic == "":
		return errors.New("dlq reader: Topic is required")
	case !o.Filter.Since.IsZero() && !o.Filter.Until.IsZero() && !o.Filter.Until.After(o.Filter.Since):
		return fmt.Errorf("dlq reader: until (%s) must be after since (%s)", o.Filter.Until.Format(time.RFC3339), o.Filter.Since.Format(time.RFC3339))
	case o.Start.all != nil && *o.Start.all < 0:
		return fmt.Errorf("dlq reader: offset %d is negative", *o.Start.all)
	}
	return nil
}

// sinceSkew is how far before Filter.Since the reader seeks, so a record
// whose Kafka timestamp trails its deadLetteredAt is not missed.
const sinceSkew = time.Minute

// Reader reads the DLQ topic with a direct consumer (no consumer group: it
// commits nothing and never disturbs other readers).
type Reader struct {
	opts  ReaderOptions
	cl    *kgo.Client
	start map[int32]int64
	end   map[int32]int64 // high watermarks captured by NewReader
	read  atomic.Int64
}

// NewReader resolves the start position and captures the end offsets of
// every partition. Close it when done.
func NewReader(ctx context.Context, o ReaderOptions) (*Reader, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	admCl, err := kgo.NewClient(append(slices.Clone(o.ClientOpts), kgo.SeedBrokers(o.Brokers...))...)
	if err != nil {
		return nil, fmt.Errorf("dlq reader: kafka client: %w", err)
	}
	adm := kadm.NewClient(admCl)
	defer adm.Close()

	ends, err := listed(adm.ListEndOffsets(ctx, o.Topic))
	if err != nil {
		return nil, fmt.Errorf("dlq reader: end offsets of %s: %w", o.Topic, err)
	}
	firsts, err := listed(adm.ListStartOffsets(ctx, o.Topic))
	if err != nil {
		return nil, fmt.Errorf("dlq reader: start offsets of %s: %w", o.Topic, err)
	}
	start := map[int32]int64{}
	pos := o.Start
	if pos.at.IsZero() && pos.all == nil && pos.offsets == nil && !o.Filter.Since.IsZero() {
		pos.at = o.Filter.Since.Add(-sinceSkew)
	}
	switch {
	case !pos.at.IsZero():
		at, err := listed(adm.ListOffsetsAfterMilli(ctx, pos.at.UnixMilli(), o.Topic))
		if err != nil {
			return nil, fmt.Errorf("dlq reader: offsets of %s at %s: %w", o.Topic, pos.at.Format(time.RFC3339), err)
		}
		for p := range ends {
			off, ok := at[p]
			if !ok || off < 0 {
				off = ends[p]
			}
			start[p] = off
		}
	case pos.all != nil:
		for p := range ends {
			start[p] = *pos.all
		}
	case pos.offsets != nil:
		for p, off := range pos.offsets {
			if _, ok := ends[p]; !ok {
				return nil, fmt.Errorf("dlq reader: topic %s has no partition %d", o.Topic, p)
			}
			start[p] = off
		}
	default:
		maps.Copy(start, firsts)
	}
	consume := map[int32]int64{}
	for p, off := range start {
		start[p] = min(max(off, firsts[p]), ends[p])
		if o.Follow || start[p] < ends[p] {
			consume[p] = start[p]
		}
	}

	cl, err := kgo.NewClient(append(slices.Clone(o.ClientOpts),
		kgo.SeedBrokers(o.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{o.Topic: offsetsOf(consume)}),
	)...)
	if err != nil {
		return nil, fmt.Errorf("dlq reader: kafka client: %w", err)
	}
	return &Reader{opts: o, cl: cl, start: start, end: ends}, nil
}

func listed(l kadm.ListedOffsets, err error) (map[int32]int64, error) {
	if err != nil {
		return nil, err
	}
	if err := l.Error(); err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	l.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	if len(out) == 0 {
		return nil, errors.New("topic does not exist")
	}
	return out, nil
}

func offsetsOf(m map[int32]int64) map[int32]kgo.Offset {
	out := make(map[int32]kgo.Offset, len(m))
	for p, off := range m {
		out[p] = kgo.NewOffset().At(off)
	}
	return out
}

// Close releases the Kafka client.
func (r *Reader) Close() { r.cl.Close() }

// Pending is how many records lie between the start position and the end
// offsets captured at start: an upper bound on what Read yields when not
// following (filters drop some).
func (r *Reader) Pending() int64 {
	var n int64
	for p, s := range r.start {
		n += max(0, r.end[p]-s)
	}
	return n
}

// Consumed is how many records Read has fetched so far, filtered or not.
func (r *Reader) Consumed() int64 { return r.read.Load() }

// Read calls fn for every record that passes the filter, in offset order
// within a partition, until the captured end offsets are reached (or, when
// following, until ctx ends; that returns nil). Records that cannot be
// decoded are passed with Item.Err set. An error from fn stops Read and is
// returned.
func (r *Reader) Read(ctx context.Context, fn func(Item) error) error {
	remaining := map[int32]bool{}
	for p, s := range r.start {
		if s < r.end[p] {
			remaining[p] = true
		}
	}
	if !r.opts.Follow && len(remaining) == 0 {
		return nil
	}
	for r.opts.Follow || len(remaining) > 0 {
		fs := r.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			if r.opts.Follow {
				return nil
			}
			return ctx.Err()
		}
		var ferr error
		fs.EachError(func(topic string, p int32, err error) {
			if ferr == nil && !errors.Is(err, context.Canceled) {
				ferr = fmt.Errorf("dlq reader: fetch %s[%d]: %w", topic, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		for it := fs.RecordIter(); !it.Done(); {
			rec := it.Next()
			end := r.end[rec.Partition]
			if rec.Offset < r.start[rec.Partition] {
				continue
			}
			if !r.opts.Follow {
				if rec.Offset >= end {
					delete(remaining, rec.Partition)
					continue
				}
				if rec.Offset >= end-1 {
					delete(remaining, rec.Partition)
				}
			}
			r.read.Add(1)
			item, ok := r.item(rec)
			if !ok {
				continue
			}
			if err := fn(item); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *Reader) item(rec *kgo.Record) (Item, bool) {
	it := Item{
		Key: rec.Key, Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset,
		Timestamp: rec.Timestamp, Headers: make(map[string]string, len(rec.Headers)),
	}
	for _, h := range rec.Headers {
		it.Headers[h.Key] = string(h.Value)
	}
	it.Record, it.Err = Decode(rec.Value)
	if it.Err != nil {
		return it, r.opts.Filter.matchHeaders(rec)
	}
	return it, r.opts.Filter.Match(it.Record)
}
