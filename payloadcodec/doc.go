// Package payloadcodec encrypts the payloads of Temporal histories (workflow
// inputs and results, activity inputs and results, signals, queries, failure
// details) with AES-256-GCM under keys chosen by ID, in the format of
// Temporal's encryption sample (CONTRACT §11):
//
//	metadata  encoding: binary/encrypted, encryption-key-id: <key ID>
//	data      12-byte random nonce || AES-256-GCM(key, nonce, the whole payload as protobuf)
//
// The current key encrypts; every configured key decrypts, so keys rotate by
// adding a new current key and keeping the old ones for as long as histories
// they encrypted are kept. A payload that is not binary/encrypted decodes as
// it is: histories from before encryption was turned on, and signals sent by
// the temporal CLI without a codec, stay readable.
//
// It owns the Codec (codec.go), the data converters built on it
// (DataConverter, and Keyless for a process without keys, whose error on an
// encrypted payload names the variables to set), and the remote codec
// endpoint the Temporal UI and CLI call to read encrypted histories
// (NewHandler, http.go: /encode, /decode, CORS for the UI's origins).
//
// Neighbours: package app gives every Temporal client of a process its data
// converter; `causet codec-server` and `causet dev` (cmd/causet) serve the
// endpoint. Below, it uses config (the keys, config.PayloadKeys).
package payloadcodec
