// Package intents decides intents: for each intent type a handler document,
// declared like a projection IR document, names the read-model rows its rules
// may look at, the rules that reject an intent, and the events an accepted
// intent emits. Handler versions are deployed to PostgreSQL; a Catalog keeps
// the newest version of each compiled, and Decide evaluates one intent inside
// the caller's transaction.
//
// # Handler documents
//
// A handler document (YAML or JSON) looks like this:
//
//	intent_type: FollowArtist          # ^[A-Za-z0-9_.:/-]{1,200}$
//	version: 1                         # informational; Deploy assigns the deployed version
//	reads:                             # read-model rows, one per name, by key
//	  follow:
//	    table: artist_followers
//	    key: {user_id: intent.entityId, artist_id: intent.payload.artistId}
//	rules:                             # in order; the first whose reject_if is true rejects
//	  - name: not_already_following
//	    reject_if: reads.follow != null
//	    reason: "'already following ' + intent.payload.artistId"
//	emits:                             # in order; event n gets the ID <intentId>:<n>
//	  - event_type: ARTIST_FOLLOWED
//	    payload: {artistId: intent.payload.artistId}
//
// Read names, rule names, tables and key columns are plain SQL identifiers
// (docparse.ValidIdentifier). Every value under reads.*.key, reject_if,
// reason and emits[*].payload is a CEL expression. Key expressions see one
// variable, intent; rules and payloads see intent and reads:
//
//   - intent: map(string, dyn) with intentId, intentType, entityId, forkId and
//     payload (the intent's JSON object; integral numbers are ints).
//   - reads: map(string, dyn) with one entry per declared read: the row as
//     to_jsonb renders it (a map; timestamps are strings, integral numbers
//     ints) or null when no row has the key. A key matching more than one
//     row, or a row over MaxRowBytes, is an error. A row is read only when
//     the first rule (or payload) that refers to it is about to run, so a
//     rule that checks the payload rejects before a key built from it fails.
//
// reject_if must give a bool and reason a string. Payload values are
// rendered as JSON: maps and lists as they are, timestamps as RFC 3339
// strings, bytes as base64. A handler emits between 1 and MaxEmits events,
// and refuses an intent whose ID leaves no room for theirs (<intentId>:<n>
// within event.MaxEventIDBytes), whatever its rules decide.
//
// # Limits and errors
//
// Each evaluation of an expression may spend the CEL cost limit
// (WithCostLimit, default celexpr.DefaultCostLimit, CAUSET_IR_COST_LIMIT);
// Validate rejects an expression whose worst-case cost over any intent body
// and any read row within their size limits is unbounded or over it, and an
// evaluation past it fails. Decide returns:
//
//   - ErrUnknownIntentType (wrapped) when no handler is deployed for the type;
//   - *InvalidError for an intent that can never be accepted (Intent.Validate);
//   - *EvalError when an expression fails (CEL error, cost limit, wrong type);
//   - *ReadError when the Reader fails; the caller decides whether the
//     database or the handler is at fault.
//
// Rules read read models, which projections update after the events are
// published: a rule sees the effects of earlier intents once their events
// have been applied.
package intents
