package ledger

// IntentLockClass is the first key of the advisory lock that serializes one
// intent ID (two int4 keys: a space of their own that no single-bigint lock,
// the relay's, can collide with). The ledger's tables are created by the
// migrations of package schema.
const IntentLockClass int32 = 0x696e7469 // "inti"
