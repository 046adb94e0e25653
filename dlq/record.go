package dlq

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/contract"
)

// SchemaVersion is the record layout this package writes and reads.
const SchemaVersion = 1

// Header names carried on every DLQ record.
const (
	HeaderProjection      = "causet-projection"
	HeaderEventType       = "causet-event-type"
	HeaderRetryCount      = "causet-retry-count"
	HeaderErrorKind       = "causet-error-kind"
	HeaderSourceTopic     = "causet-source-topic"
	HeaderSourcePartition = "causet-source-partition"
	HeaderSourceOffset    = "causet-source-offset"
)

// Spring Kafka's dead-letter headers (KafkaHeaders.DLT_*, written by its
// DeadLetterPublishingRecoverer), carried beside ours so that tools built
// for Spring dead letters read ours. Encodings are Spring's: strings in
// UTF-8; the partition a 4-byte big-endian int; offset and timestamp 8-byte
// big-endian longs (the timestamp in milliseconds since the epoch).
const (
	HeaderDLTOriginalTopic         = "kafka_dlt-original-topic"
	HeaderDLTOriginalPartition     = "kafka_dlt-original-partition"
	HeaderDLTOriginalOffset        = "kafka_dlt-original-offset"
	HeaderDLTOriginalTimestamp     = "kafka_dlt-original-timestamp"
	HeaderDLTOriginalConsumerGroup = "kafka_dlt-original-consumer-group"
	HeaderDLTExceptionMessage      = "kafka_dlt-exception-message"
	// HeaderDLTExceptionFQCN holds a Java exception's class name in Spring;
	// here the errorKind (sql, ir_eval, connection, invalid_event).
	HeaderDLTExceptionFQCN = "kafka_dlt-exception-fqcn"
)

// WorkflowRef names the workflow run that dead-lettered the event.
type WorkflowRef struct {
	Namespace string `json:"namespace"`
	ID        string `json:"id"`
	RunID     string `json:"runId"`
}

// Record is the value of a DLQ record (JSON).
type Record struct {
	SchemaVersion int `json:"schemaVersion"`
	// Event is the original envelope; nil when the record value was undecodable.
	Event *json.RawMessage `json:"event"`
	// RawValue is the original record value when it was not a valid envelope.
	RawValue       []byte             `json:"rawValue,omitempty"`
	ProjectionName string             `json:"projectionName"`
	IRVersion      int                `json:"irVersion"`
	EventType      string             `json:"eventType,omitempty"`
	EntityID       string             `json:"entityId,omitempty"`
	ForkID         string             `json:"forkId"`
	Error          string             `json:"error"`
	ErrorKind      string             `json:"errorKind"`
	RetryCount     int                `json:"retryCount"`
	ReplayCount    int                `json:"replayCount"`
	Attempts       []contract.Attempt `json:"attempts"`
	FirstFailedAt  time.Time          `json:"firstFailedAt"`
	DeadLetteredAt time.Time          `json:"deadLetteredAt"`
	Source         contract.Source    `json:"source"`
	Workflow       *WorkflowRef       `json:"workflow,omitempty"`
	// Truncated is set when the event (or raw value) was too large to carry
	// whole: the record keeps a prefix, the original size and its SHA-256,
	// and Source locates the original on the events topic.
	Truncated *Truncation `json:"truncated,omitempty"`
	// TruncatedKey is set when the original key was longer than MaxKeyBytes
	// and the DLQ record is keyed by its SHA-256 (hex) instead.
	TruncatedKey *Truncation `json:"truncatedKey,omitempty"`
}

// Truncation describes what a bounded DLQ record left out.
type Truncation struct {
	// Field is "event", "rawValue" or "key": which one was cut. A cut event
	// is kept as a prefix of its JSON in RawValue; a cut key is replaced by
	// the SHA-256.
	Field  string `json:"field"`
	Size   int    `json:"size"`
	SHA256 string `json:"sha256"`
}

// MaxValueBytes bounds a DLQ record's value so that it always fits Kafka's
// default message size (1 MB) with room for the headers: a dead letter that
// the broker refuses would block its partition (poison records) or its
// workflow (PublishDeadLetter) for ever.
const MaxValueBytes = 900 << 10

// MaxKeyBytes bounds a DLQ record's key, which is otherwise the original
// record's: a longer key is replaced by its SHA-256 in hex, which keeps
// records of one key together and the record within the broker's limit.
const MaxKeyBytes = 1 << 10

// maxErrorBytes bounds each error text kept in a record.
const maxErrorBytes = 8 << 10

// UnsupportedVersionError reports a record written by a newer schema.
type UnsupportedVersionError struct{ Version int }

func (e *UnsupportedVersionError) Error() string {
	return fmt.Sprintf("dlq record has schemaVersion %d; this build reads version %d", e.Version, SchemaVersion)
}

// Decode parses a DLQ record value, refusing versions it does not know.
func Decode(value []byte) (Record, error) {
	var probe struct {
		SchemaVersion int `json:"schemaVersion"`
	}
	if err := json.Unmarshal(value, &probe); err != nil {
		return Record{}, fmt.Errorf("decode dlq record: %w", err)
	}
	if probe.SchemaVersion != SchemaVersion {
		return Record{}, &UnsupportedVersionError{Version: probe.SchemaVersion}
	}
	var r Record
	if err := json.Unmarshal(value, &r); err != nil {
		return Record{}, fmt.Errorf("decode dlq record: %w", err)
	}
	return r, nil
}

// KafkaRecord builds the Kafka record for r on topic, keyed by the original
// key, or by its SHA-256 (hex) when longer than MaxKeyBytes.
func (r Record) KafkaRecord(topic string, key []byte) (*kgo.Record, error) {
	return r.kafkaRecord(topic, key, "")
}

// kafkaRecord is KafkaRecord with the consumer group that read the original
// record (no kafka_dlt-original-consumer-group header when empty).
func (r Record) kafkaRecord(topic string, key []byte, group string) (*kgo.Record, error) {
	if len(key) > MaxKeyBytes {
		r.TruncatedKey = truncation("key", key)
		key = []byte(r.TruncatedKey.SHA256)
	}
	value, err := r.encode()
	if err != nil {
		return nil, err
	}
	headers := []kgo.RecordHeader{
		{Key: HeaderProjection, Value: []byte(r.ProjectionName)},
		{Key: HeaderEventType, Value: []byte(r.EventType)},
		{Key: HeaderRetryCount, Value: []byte(strconv.Itoa(r.RetryCount))},
		{Key: HeaderErrorKind, Value: []byte(r.ErrorKind)},
		{Key: HeaderSourceTopic, Value: []byte(r.Source.Topic)},
		{Key: HeaderSourcePartition, Value: []byte(strconv.FormatInt(int64(r.Source.Partition), 10))},
		{Key: HeaderSourceOffset, Value: []byte(strconv.FormatInt(r.Source.Offset, 10))},
		{Key: HeaderDLTOriginalTopic, Value: []byte(r.Source.Topic)},
		{Key: HeaderDLTOriginalPartition, Value: binary.BigEndian.AppendUint32(nil, uint32(r.Source.Partition))},
		{Key: HeaderDLTOriginalOffset, Value: binary.BigEndian.AppendUint64(nil, uint64(r.Source.Offset))},
	}
	if !r.Source.Timestamp.IsZero() {
		headers = append(headers, kgo.RecordHeader{Key: HeaderDLTOriginalTimestamp,
			Value: binary.BigEndian.AppendUint64(nil, uint64(r.Source.Timestamp.UnixMilli()))})
	}
	if group != "" {
		headers = append(headers, kgo.RecordHeader{Key: HeaderDLTOriginalConsumerGroup, Value: []byte(group)})
	}
	headers = append(headers,
		kgo.RecordHeader{Key: HeaderDLTExceptionMessage, Value: []byte(cut(r.Error, maxErrorBytes))},
		kgo.RecordHeader{Key: HeaderDLTExceptionFQCN, Value: []byte(r.ErrorKind)},
	)
	return &kgo.Record{Topic: topic, Key: key, Value: value, Headers: headers}, nil
}

// encode marshals r within MaxValueBytes, cutting error texts and then the
// event or raw value when they would not fit.
func (r Record) encode() ([]byte, error) {
	r.SchemaVersion = SchemaVersion
	r.Error = cut(r.Error, maxErrorBytes)
	r.Attempts = slices.Clone(r.Attempts)
	for i := range r.Attempts {
		r.Attempts[i].Error = cut(r.Attempts[i].Error, maxErrorBytes)
	}
	value, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode dlq record: %w", err)
	}
	if len(value) <= MaxValueBytes {
		return value, nil
	}
	whole := r.RawValue
	field := "rawValue"
	if r.Event != nil {
		whole, field = []byte(*r.Event), "event"
	}
	r.Truncated = truncation(field, whole)
	r.Event, r.RawValue = nil, nil
	rest, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode dlq record: %w", err)
	}
	// RawValue is base64 in JSON: 4 bytes per 3, plus its key and quotes.
	room := (MaxValueBytes - len(rest) - 32) / 4 * 3
	if room < 0 {
		return nil, fmt.Errorf("encode dlq record: %d bytes without the event, more than the %d allowed", len(rest), MaxValueBytes)
	}
	r.RawValue = whole[:min(room, len(whole))]
	return json.Marshal(r)
}

// truncation describes whole, what field held before it was cut or replaced.
func truncation(field string, whole []byte) *Truncation {
	sum := sha256.Sum256(whole)
	return &Truncation{Field: field, Size: len(whole), SHA256: hex.EncodeToString(sum[:])}
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// WriteWindow is how long after its DeadLetteredAt a dead letter may still
// be written by the worker's producer (kgo.RecordDeliveryTimeout, with
// kgo.AllowIdempotentProduceCancellation so that it holds for a request
// already sent and never answered too): past it the producer fails the
// record rather than write it, so a retried PublishDeadLetter knows when
// an earlier attempt can no longer add a second record. It is well inside
// the activity's 30 s start-to-close timeout.
const WriteWindow = 20 * time.Second

// Publisher writes dead letters synchronously: a record is durable on the
// topic (acks=all, idempotent producer) before Publish returns.
type Publisher struct {
	Client *kgo.Client
	Topic  string
	// ConsumerGroup is the group that read the original records
	// (CAUSET_CONSUMER_GROUP), for kafka_dlt-original-consumer-group.
	// Optional: without it, the group Client consumes in, if any.
	ConsumerGroup string
	// Reader reads the topic back, for Find. Optional: without it Find
	// finds nothing.
	Reader *ReaderOptions
}

// errFound ends a Read once the record sought is found.
var errFound = errors.New("dlq: found")

// Find looks on the topic for the dead letter of run (workflowID, runID)
// at replayCount written since (less a minute for clocks that disagree),
// and returns where it landed. A publish retried after an earlier attempt
// wrote its record and lost only its answer finds that record rather than
// write a second one. It reads only the records written since.
func (p *Publisher) Find(ctx context.Context, since time.Time, workflowID, runID string, replayCount int) (contract.DLQCoordinates, bool, error) {
	var at contract.DLQCoordinates
	if p.Reader == nil {
		return at, false, nil
	}
	o := *p.Reader
	o.Topic, o.Start, o.Filter, o.Follow = p.Topic, FromTime(since.Add(-sinceSkew)), Filter{}, false
	rd, err := NewReader(ctx, o)
	if err != nil {
		return at, false, err
	}
	defer rd.Close()
	found := false
	err = rd.Read(ctx, func(it Item) error {
		w := it.Record.Workflow
		if it.Err != nil || w == nil || w.ID != workflowID || w.RunID != runID || it.Record.ReplayCount != replayCount {
			return nil
		}
		at, found = contract.DLQCoordinates{Topic: it.Topic, Partition: it.Partition, Offset: it.Offset}, true
		return errFound
	})
	if err != nil && !errors.Is(err, errFound) {
		return at, false, fmt.Errorf("dlq: look for the dead letter of %s: %w", workflowID, err)
	}
	return at, found, nil
}

func (p *Publisher) group() string {
	if p.ConsumerGroup != "" || p.Client == nil {
		return p.ConsumerGroup
	}
	g, _ := p.Client.OptValue(kgo.ConsumerGroup).(string)
	return g
}

// Publish writes r and returns where it landed.
func (p *Publisher) Publish(ctx context.Context, key []byte, r Record) (contract.DLQCoordinates, error) {
	rec, err := r.kafkaRecord(p.Topic, key, p.group())
	if err != nil {
		return contract.DLQCoordinates{}, err
	}
	// The record's time is when it was dead-lettered: a producer with a
	// delivery timeout (WriteWindow) counts from it.
	if !r.DeadLetteredAt.IsZero() {
		rec.Timestamp = r.DeadLetteredAt
	}
	// The record's Context is the caller's (an activity's, with its span):
	// a client with tracing hooks writes that trace into the headers.
	rec.Context = ctx
	res := p.Client.ProduceSync(ctx, rec)
	got, err := res.First()
	if err != nil {
		return contract.DLQCoordinates{}, fmt.Errorf("publish dead letter to %s: %w", p.Topic, err)
	}
	return contract.DLQCoordinates{Topic: got.Topic, Partition: got.Partition, Offset: got.Offset}, nil
}

// Keyed is a dead letter with its record key, for PublishAll.
type Keyed struct {
	Key    []byte
	Record Record
}

// PublishAll writes rs in one produce and returns, for each, where it
// landed or why it was not written. Records of one key land in the order
// given. A caller trying again passes only the failed ones.
func (p *Publisher) PublishAll(ctx context.Context, rs []Keyed) ([]contract.DLQCoordinates, []error) {
	at := make([]contract.DLQCoordinates, len(rs))
	errs := make([]error, len(rs))
	recs := make([]*kgo.Record, 0, len(rs))
	index := make(map[*kgo.Record]int, len(rs))
	group := p.group()
	for i, k := range rs {
		rec, err := k.Record.kafkaRecord(p.Topic, k.Key, group)
		if err != nil {
			errs[i] = err
			continue
		}
		if !k.Record.DeadLetteredAt.IsZero() {
			rec.Timestamp = k.Record.DeadLetteredAt
		}
		rec.Context = ctx
		recs = append(recs, rec)
		index[rec] = i
	}
	for _, res := range p.Client.ProduceSync(ctx, recs...) {
		i := index[res.Record]
		if res.Err != nil {
			errs[i] = fmt.Errorf("publish dead letter to %s: %w", p.Topic, res.Err)
			continue
		}
		at[i] = contract.DLQCoordinates{Topic: res.Record.Topic, Partition: res.Record.Partition, Offset: res.Record.Offset}
	}
	return at, errs
}
