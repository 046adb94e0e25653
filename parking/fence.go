package parking

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Fencing: the owner of a partition (one bridge of a consumer group) claims
// it in causet_partition_owners as it takes it, with the next epoch, and
// every transaction that applies, parks or releases for the partition
// checks, under a share lock on the row, that the epoch is still its own.
// A bridge that lost the partition without learning it yet (cut from Kafka,
// still reaching PostgreSQL) fails its next transaction with ErrFenced
// instead of writing; a claim waits for the transactions that hold the
// share lock, so what the previous owner committed is there for the new
// one to load.

// ErrFenced is the error of a transaction whose partition another owner
// has claimed since: it rolls back, and the partition stops.
var ErrFenced = errors.New("parking: the partition has a newer owner")

// Owner is one claim of a partition.
type Owner struct {
	Group, Topic string
	Partition    int32
	Epoch        int64
}

// Claim records owner as the partition's owner with the next epoch, and
// returns its claim.
func Claim(ctx context.Context, q Querier, group, topic string, partition int32, owner string) (Owner, error) {
	o := Owner{Group: group, Topic: topic, Partition: partition}
	err := q.QueryRow(ctx, `INSERT INTO causet_partition_owners AS o (consumer_group, topic, partition, epoch, owner)
VALUES ($1, $2, $3, 1, $4)
ON CONFLICT (consumer_group, topic, partition) DO UPDATE SET epoch = o.epoch + 1, owner = EXCLUDED.owner, claimed_at = now()
RETURNING epoch`, group, topic, partition, owner).Scan(&o.Epoch)
	if err != nil {
		return o, fmt.Errorf("parking: claim partition %d of %s: %w", partition, topic, err)
	}
	return o, nil
}

// Check fails with ErrFenced, in tx, when the partition has been claimed
// since o; otherwise it holds a share lock on the claim until tx ends, so
// no claim lands before tx commits.
func (o Owner) Check(ctx context.Context, tx pgx.Tx) error {
	var epoch int64
	err := tx.QueryRow(ctx, `SELECT epoch FROM causet_partition_owners WHERE consumer_group = $1 AND topic = $2 AND partition = $3 FOR SHARE`,
		o.Group, o.Topic, o.Partition).Scan(&epoch)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && epoch != o.Epoch {
		return fmt.Errorf("%w (epoch %d, this bridge's %d)", ErrFenced, epoch, o.Epoch)
	}
	if err != nil {
		return fmt.Errorf("parking: check the owner of partition %d of %s: %w", o.Partition, o.Topic, err)
	}
	return nil
}
