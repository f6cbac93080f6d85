// Package link makes authenticated connections between the hosts of a
// chorus cluster: the controller and node agents (control plane) and the
// workers of a cross-host communicator (data plane).
//
// Every connection is TLS 1.3 (crypto/tls, nothing older is offered or
// accepted). Peers authenticate in one or both of two ways:
//
//   - mutual TLS: both sides present a certificate signed by the cluster
//     CA (package net/cert) that names cert.ServerName; expired,
//     foreign (another CA) or missing certificates fail the handshake;
//   - a pre-shared token, proved by challenge-response inside TLS: the
//     server sends a fresh 32-byte nonce, the client answers with its own
//     nonce and HMAC-SHA256(token, label, exporter, both nonces), and the
//     server answers with its own HMAC. The exporter is TLS keying
//     material of this very connection (RFC 8446 section 7.5), so a proof
//     recorded on one connection is worthless on another (replay) and a
//     man in the middle, who holds two different TLS sessions, cannot
//     relay it. Token-only servers use an ephemeral self-signed
//     certificate that clients do not check: the token proof, bound to
//     the channel, authenticates both ends.
//
// Nothing a peer sends is decoded before it is authenticated: the
// handshake reads only fixed-size messages, under a deadline
// (Config.HandshakeTimeout, default 10 s), and a Listener runs at most
// MaxPendingHandshakes at once (more wait in the kernel's accept queue).
// Refused connections are closed and logged (Config.Log) with the peer
// address and the reason.
package link
