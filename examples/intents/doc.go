// Package exampleintents embeds the example intent handler documents
// (INTENT_TYPE.yaml: FollowArtist, PlayTrack, UnfollowArtist), whose events
// the example projections in examples/projections apply, for `causet dev`
// and tests.
//
// Neighbours: a record. Package devstack deploys the handlers for `causet
// dev` and its demo traffic, the bench deploys them for its write-path
// phase, and the tests of intents, ledger, intentapi and the reliability
// suite submit intents through them. Below, it uses
// examples/internal/exampledocs to list and read the files.
package exampleintents
