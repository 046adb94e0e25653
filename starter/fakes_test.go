package starter

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
)

// memBlocks is an in-memory BlockStore for unit tests.
type memBlocks struct {
	mu   sync.Mutex
	keys map[string]map[LaneKey]string // key → head
}

func newMemBlocks() *memBlocks { return &memBlocks{keys: map[string]map[LaneKey]string{}} }

func memTP(topic string, partition int32) string { return topic + "/" + string(rune('0'+partition)) }

func (m *memBlocks) Ensure(context.Context) error { return nil }

func (m *memBlocks) Load(_ context.Context, topic string, partition int32) ([]BlockedKey, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []BlockedKey
	for k, head := range m.keys[memTP(topic, partition)] {
		out = append(out, BlockedKey{LaneKey: k, Head: head})
	}
	return out, nil
}

func (m *memBlocks) Add(_ context.Context, _ pgx.Tx, topic string, partition int32, keys []BlockedKey) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	tp := memTP(topic, partition)
	if m.keys[tp] == nil {
		m.keys[tp] = map[LaneKey]string{}
	}
	for _, k := range keys {
		m.keys[tp][k.LaneKey] = k.Head
	}
	return nil
}

func (m *memBlocks) Remove(_ context.Context, _ pgx.Tx, topic string, partition int32, k LaneKey) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.keys[memTP(topic, partition)], k)
	return nil
}
