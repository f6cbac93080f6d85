// Package wire defines the messages a controller and its workers exchange
// (commands, replies, failure notices) and their versioned binary frame
// encoding, documented in docs/protocol.md.
//
// The encoding is used by every byte-oriented transport (pipes, unix and TCP
// sockets, shared-memory rings). In-process (threaded) sessions pass the
// same structs without encoding them. Decoders treat input as untrusted:
// malformed frames give errors, never panics, and no allocation exceeds what
// the frame's own bytes justify.
package wire
