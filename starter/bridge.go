package starter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/incident"
	"github.com/causet/projection-retry/projection"
)

type topicPartition struct {
	topic string
	id    int32
}

// Bridge consumes the events topic and hands failures to Temporal. Build it
// with New and run it once with Run.
type Bridge struct {
	opts Options
	log  *slog.Logger
	m    *metrics
	cl   *kgo.Client
	dlq  *dlq.Publisher
	sem  chan struct{}
	inc  *incident.Registry // nil when incidents are not detected
	// owner names this bridge in the partitions it claims (fencing,
	// CAUSET_ORDERING=entity): host, process and a random part.
	owner string

	ctx    context.Context // parent of every partition's context
	cancel context.CancelFunc

	mu    sync.Mutex
	parts map[topicPartition]*partition
	wg    sync.WaitGroup // the sweeper (ordering entity)

	// anyFenced: a partition may be fenced (reclaimFenced has work).
	anyFenced atomic.Bool

	pollMu     sync.Mutex
	pollCancel context.CancelFunc

	ran atomic.Bool
}

// New validates opts, applies defaults and connects the Kafka client (which
// joins the consumer group right away; records are processed once Run is
// called).
func New(opts Options) (*Bridge, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	b := &Bridge{
		opts:  opts,
		log:   opts.Logger.With("component", "bridge"),
		m:     newMetrics(opts.Registerer),
		sem:   make(chan struct{}, opts.MaxInflight),
		parts: map[topicPartition]*partition{},
		owner: ownerName(),
	}
	b.inc = incident.NewRegistry(incident.RegistryOptions{
		Incidents: opts.Incidents, Retry: opts.Retry, Store: opts.IncidentStore, Client: opts.IncidentClient,
		TaskQueue: opts.TaskQueue, Timeout: opts.StartTimeout, IRVersion: b.irVersion, Logger: b.log, Registerer: opts.Registerer,
	})
	b.registerStallGauge(opts.Registerer)
	b.ctx, b.cancel = context.WithCancel(context.Background())
	// The group may assign partitions before New returns, and each keeps the
	// publisher: it exists first, its client is set below (records are
	// published only once Run polls).
	b.dlq = &dlq.Publisher{Topic: opts.DLQTopic}
	kopts := []kgo.Opt{
		kgo.SeedBrokers(opts.Brokers...),
		kgo.ConsumerGroup(opts.Group),
		kgo.ConsumeTopics(opts.Topic),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(b.assigned),
		kgo.OnPartitionsRevoked(b.revoked),
		kgo.OnPartitionsLost(b.lost),
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.SessionTimeout(opts.SessionTimeout),
		kgo.WithLogger(KafkaLogger(opts.Logger)),
	}
	// One fetch is what a partition can queue past MaxBufferedBytes before
	// its fetching pauses: keep it a fraction of the bound.
	if fetch := opts.MaxBufferedBytes / 4; fetch < 50<<20 {
		kopts = append(kopts, kgo.FetchMaxBytes(int32(fetch)), kgo.FetchMaxPartitionBytes(int32(min(fetch, 1<<20))))
	}
	if opts.InstanceID != "" {
		kopts = append(kopts, kgo.InstanceID(opts.InstanceID))
	}
	kopts = append(kopts, opts.KafkaOptions...)
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		b.cancel()
		return nil, fmt.Errorf("starter: kafka client: %w", err)
	}
	b.cl = cl
	b.dlq.Client = cl
	return b, nil
}

// Run processes records until ctx is done, then stops the partitions,
// commits what is finished and closes the Kafka client. It returns nil after
// a clean stop and an error if the client failed. Run may be called once.
func (b *Bridge) Run(ctx context.Context) error {
	if !b.ran.CompareAndSwap(false, true) {
		return errors.New("starter: Bridge.Run called twice")
	}
	b.log.Info("bridge started", "topic", b.opts.Topic, "group", b.opts.Group, "instanceId", b.opts.InstanceID, "mode", string(b.opts.Mode),
		"ordering", string(b.opts.Ordering), "taskQueue", b.opts.TaskQueue, "maxInflight", b.opts.MaxInflight)
	if b.opts.ordered() {
		b.wg.Add(1)
		w := &headWatcher{ctx: b.ctx, opts: &b.opts, log: b.log, m: b.m, partitions: b.orderedPartitions}
		go func() {
			defer b.wg.Done()
			w.run()
		}()
	}
	if b.inc != nil {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.inc.Run(b.ctx)
		}()
	}
	pollTimeout := min(b.opts.CommitInterval, 200*time.Millisecond)
	lastCommit := time.Now()
	var runErr error
	for {
		pctx, cancel := context.WithTimeout(ctx, pollTimeout)
		b.pollMu.Lock()
		b.pollCancel = cancel
		b.pollMu.Unlock()
		fetches := b.cl.PollRecords(pctx, b.opts.MaxPollRecords)
		b.pollMu.Lock()
		b.pollCancel = nil
		b.pollMu.Unlock()
		cancel()
		if ctx.Err() != nil {
			break
		}
		if fetches.IsClientClosed() {
			runErr = errors.New("starter: kafka client closed")
			break
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return
			}
			b.log.Warn("fetch error", "topic", topic, "partition", partition, "error", err.Error())
		})
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			if len(fp.Records) == 0 {
				return
			}
			p := b.partitionFor(fp.Topic, fp.Partition)
			p.enqueue(fp.Records)
			last := fp.Records[len(fp.Records)-1]
			if fp.HighWatermark > 0 {
				b.m.lag.WithLabelValues(fp.Topic, strconv.Itoa(int(fp.Partition))).Set(float64(fp.HighWatermark - last.Offset - 1))
			}
		})
		b.adjustPauses()
		b.reclaimFenced(ctx)
		if time.Since(lastCommit) >= b.opts.CommitInterval {
			b.commit(ctx, b.owned())
			lastCommit = time.Now()
		}
		b.cl.AllowRebalance()
	}
	return errors.Join(runErr, b.shutdown())
}

// shutdown stops every partition, commits what is finished and closes the client.
func (b *Bridge) shutdown() error {
	b.mu.Lock()
	parts := make([]*partition, 0, len(b.parts))
	for k, p := range b.parts {
		parts = append(parts, p)
		delete(b.parts, k)
	}
	b.mu.Unlock()
	b.cancel()
	for _, p := range parts {
		p.wait()
	}
	b.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := b.commit(ctx, parts)
	cancel()
	b.cl.CloseAllowingRebalance()
	b.log.Info("bridge stopped")
	return err
}

// wakePoll ends the current poll early so the poll loop re-checks pauses.
func (b *Bridge) wakePoll() {
	b.pollMu.Lock()
	if b.pollCancel != nil {
		b.pollCancel()
	}
	b.pollMu.Unlock()
}

func (b *Bridge) partitionFor(topic string, id int32) *partition {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := topicPartition{topic, id}
	p := b.parts[k]
	if p == nil {
		p = newPartition(b, topic, id)
		b.parts[k] = p
	}
	return p
}

func (b *Bridge) owned() []*partition {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*partition, 0, len(b.parts))
	for _, p := range b.parts {
		out = append(out, p)
	}
	return out
}

// take removes the partitions of m from the owned set and returns them.
func (b *Bridge) take(m map[string][]int32) []*partition {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*partition
	for topic, ids := range m {
		for _, id := range ids {
			k := topicPartition{topic, id}
			if p := b.parts[k]; p != nil {
				out = append(out, p)
				delete(b.parts, k)
			}
		}
	}
	return out
}

// adjustPauses pauses fetching for partitions whose queue is full, in
// records or bytes (a slow worker: database outage, MaxInflight reached),
// and resumes them once the queue has drained.
func (b *Bridge) adjustPauses() {
	high, low := 4*b.opts.MaxPollRecords, b.opts.MaxPollRecords
	highBytes, lowBytes := b.opts.MaxBufferedBytes, b.opts.MaxBufferedBytes/4
	var pause, resume map[string][]int32
	for _, p := range b.owned() {
		n, size := p.queued()
		switch {
		case (n >= high || size >= highBytes) && !p.paused.Load():
			p.paused.Store(true)
			if pause == nil {
				pause = map[string][]int32{}
			}
			pause[p.topic] = append(pause[p.topic], p.id)
			p.log.Debug("fetching paused", "queued", n, "queuedBytes", size)
		case n <= low && size <= lowBytes && p.paused.Load():
			p.paused.Store(false)
			if resume == nil {
				resume = map[string][]int32{}
			}
			resume[p.topic] = append(resume[p.topic], p.id)
			p.log.Debug("fetching resumed", "queued", n, "queuedBytes", size)
		}
	}
	if pause != nil {
		b.cl.PauseFetchPartitions(pause)
	}
	if resume != nil {
		b.cl.ResumeFetchPartitions(resume)
	}
}

func (b *Bridge) assigned(_ context.Context, cl *kgo.Client, m map[string][]int32) {
	// A partition paused under an earlier assignment must fetch again.
	cl.ResumeFetchPartitions(m)
	for topic, ids := range m {
		for _, id := range ids {
			b.partitionFor(topic, id)
		}
	}
	b.log.Info("partitions assigned", "partitions", fmt.Sprint(m))
}

// revoked stops the revoked partitions and commits what they finished,
// synchronously, while the partitions are still ours.
func (b *Bridge) revoked(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
	parts := b.take(m)
	for _, p := range parts {
		p.stop()
	}
	if len(parts) > 0 {
		_ = b.commit(ctx, parts)
	}
	cl.ResumeFetchPartitions(m)
	if len(m) > 0 {
		b.log.Info("partitions revoked", "partitions", fmt.Sprint(m))
	}
}

// lost stops the lost partitions without committing: they may already be
// someone else's.
func (b *Bridge) lost(_ context.Context, cl *kgo.Client, m map[string][]int32) {
	for _, p := range b.take(m) {
		p.stop()
	}
	cl.ResumeFetchPartitions(m)
	if len(m) > 0 {
		b.log.Warn("partitions lost: nothing committed for them", "partitions", fmt.Sprint(m))
	}
}

// reclaimFenced restarts the fenced partitions the group still assigns to
// this bridge. The claim that fenced such a partition came from a bridge
// the group no longer gives it to — one stopped or killed while its claim
// was in flight — so no revoke will come, and waiting for one would stop
// the partition for good. The partition claims again (a newer epoch: the
// late claimant, should it wake, is fenced in turn), loads its keys and
// resumes after what it finished. A bridge the group cannot answer (cut
// from Kafka) or that the group has given the partition to another member
// keeps waiting; it asks again, less often, up to once a session timeout.
// Called from the poll loop before AllowRebalance, where no revoke runs, so
// the answer holds while it acts on it.
func (b *Bridge) reclaimFenced(ctx context.Context) {
	// Every poll comes here: without a fenced partition it costs one load.
	if !b.anyFenced.Swap(false) {
		return
	}
	now := time.Now()
	var due []*partition
	for _, p := range b.owned() {
		if p.isFenced() {
			b.anyFenced.Store(true) // still one to ask about
		}
		if p.reclaimDue(now) {
			due = append(due, p)
		}
	}
	if len(due) == 0 {
		return
	}
	actx, cancel := context.WithTimeout(ctx, reclaimAskTimeout)
	ours, err := b.assignedByGroup(actx)
	cancel()
	for _, p := range due {
		if err != nil || !ours[p.id] {
			reason := "the group gives it to another member"
			if err != nil {
				reason = err.Error()
			}
			p.log.Debug("fenced partition not reclaimed", "reason", reason)
			p.reclaimLater(now, b.opts.SessionTimeout)
			continue
		}
		b.restart(p)
	}
}

// reclaimAskTimeout bounds the poll loop's wait for the group's answer.
const reclaimAskTimeout = 5 * time.Second

// assignedByGroup returns the partitions of the topic the group's
// coordinator assigns to this bridge now; an error when it cannot say (the
// coordinator is out of reach, the group is rebalancing).
func (b *Bridge) assignedByGroup(ctx context.Context) (map[int32]bool, error) {
	member, _ := b.cl.GroupMetadata()
	if member == "" {
		return nil, errors.New("not a member of the group")
	}
	groups, err := kadm.NewClient(b.cl).DescribeGroups(ctx, b.opts.Group)
	if err == nil {
		err = groups.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("describe the group: %w", err)
	}
	g, ok := groups[b.opts.Group]
	if !ok {
		return nil, errors.New("describe the group: no answer for it")
	}
	if g.State != "Stable" {
		return nil, fmt.Errorf("the group is %s", g.State)
	}
	ours := map[int32]bool{}
	for _, m := range g.Members {
		if m.MemberID != member {
			continue
		}
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range a.Topics {
				if t.Topic == b.opts.Topic {
					for _, id := range t.Partitions {
						ours[id] = true
					}
				}
			}
		}
	}
	return ours, nil
}

// restart replaces a fenced partition with a new one that claims it again,
// and fetches it again from after what the old one finished: what the old
// one had queued is dropped with it.
func (b *Bridge) restart(old *partition) {
	old.wait()
	from, rewind := old.resumeAt()
	b.mu.Lock()
	k := topicPartition{old.topic, old.id}
	if b.parts[k] != old {
		b.mu.Unlock()
		return
	}
	p := newPartition(b, old.topic, old.id)
	b.parts[k] = p
	b.mu.Unlock()
	if rewind {
		b.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{old.topic: {old.id: from}})
	}
	b.cl.ResumeFetchPartitions(map[string][]int32{old.topic: {old.id}})
	b.m.reclaimed.Inc()
	p.log.Warn("fenced partition still this bridge's in the group: claimed again, fetching again",
		"event", "bridge_partition_reclaimed", "fromOffset", from.Offset)
}

// commit commits the finished offsets of parts with a generation-checked
// synchronous commit. Callers hold ownership: the poll loop between a poll
// and AllowRebalance, or a revoke callback.
func (b *Bridge) commit(ctx context.Context, parts []*partition) error {
	offsets := map[string]map[int32]kgo.EpochOffset{}
	byTP := map[topicPartition]*partition{}
	for _, p := range parts {
		eo, ok := p.committable()
		if !ok {
			continue
		}
		if offsets[p.topic] == nil {
			offsets[p.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[p.topic][p.id] = eo
		byTP[topicPartition{p.topic, p.id}] = p
	}
	if len(offsets) == 0 {
		return nil
	}
	var cerr error
	b.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, rp := range t.Partitions {
				if e := kerr.ErrorForCode(rp.ErrorCode); e != nil {
					cerr = errors.Join(cerr, fmt.Errorf("%s/%d: %w", t.Topic, rp.Partition, e))
					continue
				}
				if p := byTP[topicPartition{t.Topic, rp.Partition}]; p != nil {
					p.setCommitted(offsets[t.Topic][rp.Partition].Offset)
				}
			}
		}
	})
	if cerr != nil {
		b.log.Warn("offset commit failed; will retry at the next commit", "error", cerr.Error())
		return fmt.Errorf("starter: commit offsets: %w", cerr)
	}
	b.log.Debug("offsets committed", "offsets", fmt.Sprint(offsets))
	return nil
}

// orderedPartitions returns the owned partitions' ordering routers, by
// partition.
func (b *Bridge) orderedPartitions() map[int32]*orderedRouter {
	out := map[int32]*orderedRouter{}
	for _, p := range b.owned() {
		if r, ok := p.router.(*orderedRouter); ok {
			out[p.id] = r
		}
	}
	return out
}

// The bridge's incidents (CONTRACT §12) are kept by an incident.Registry:
// these are the bridge's ends of it.

// failureOf is a failed pair as the incident registry knows failures.
func failureOf(o projection.Result, env *event.Envelope) incident.Failure {
	return incident.Failure{Projection: o.Projection, Kind: kindOf(o), Err: errOf(o), Event: env}
}

// holdingOf is the holding incident a pair's failure belongs to, "" when
// it did not fail or belongs to none.
func (b *Bridge) holdingOf(o projection.Result, env *event.Envelope) string {
	if o.Status != projection.StatusFailed {
		return ""
	}
	return b.inc.HoldingOf(failureOf(o, env))
}

// noteFailure counts a failure handed off the normal way towards its
// fingerprint's incident.
func (b *Bridge) noteFailure(o projection.Result, env *event.Envelope) {
	b.inc.Note(failureOf(o, env), time.Now())
}

// irVersion is the projection's IR version in the engine's cache, 0 when
// the engine does not say.
func (b *Bridge) irVersion(projection string) int {
	if v, ok := b.opts.Engine.(interface{ Version(string) int }); ok {
		return v.Version(projection)
	}
	return 0
}

// ownerName is how a bridge names itself in the partitions it claims.
func ownerName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d/%08x", host, os.Getpid(), rand.Uint32())
}
