// Package seal is a record layer for authenticated data links: after a
// TLS 1.3 handshake (net/link), both ends derive keys from the TLS
// session's exporter and exchange AES-256-GCM records of up to 256 KiB on
// the bare TCP connection. ccl/hier's cross-host data links use it in
// place of crypto/tls for the collective's bytes.
//
// # Why
//
// crypto/tls's records carry at most 16 KiB: each costs 22 bytes on the
// wire (5-byte header, content type, 16-byte tag: 0.13%), and the data
// passes through crypto/tls's buffers (one more copy each way). On an
// emulated 10 Gbit/s link those 0.13% are the gap to gloo (plain TCP) at
// large sizes. A record here carries up to RecordMax = 256 KiB for
// Overhead = 20 bytes (0.008%). Writes of at least a record are sealed
// straight from the caller's buffer into the output buffer, and reads of
// at least a record opened straight from the input buffer into the
// caller's: encryption and decryption are the only passes over the bytes.
// Sealed records collect in a buffer that one system call sends; reads
// fetch what fits their buffer per system call. A link starts with one
// record's worth out (256 KiB) and 64 KiB in, and grows both to 1 MiB
// when it carries full records: a rank holds a link to every rank of the
// other hosts, most of which only carry small messages.
//
// # Construction
//
//   - Secrets: ExportKeyingMaterial("EXPORTER-chorus-seal-v1", context, 64)
//     of the TLS 1.3 session (RFC 8446 section 7.5); the first 32 bytes
//     are the client-to-server secret, the last 32 the server-to-client
//     secret. context (the caller's hello bytes) binds them to the link's
//     purpose.
//   - Epochs: record number s (a per-direction counter from 0, never
//     sent) belongs to epoch e = s / EpochRecords (2^20). Epoch e's key
//     is HKDF-Expand-SHA256(secret, "chorus seal key" || e, 32) and its
//     IV HKDF-Expand-SHA256(secret, "chorus seal iv" || e, 12), e as a
//     big-endian uint64. The nonce of record s is IV XOR (0^32 || s as a
//     big-endian uint64).
//   - Record: a 4-byte big-endian length L of the sealed body, then the
//     body (plaintext and 16-byte tag); 16 < L <= RecordMax+16. The
//     header is the AEAD's additional data.
//
// # Security argument
//
// The exporter's output is a secret of the authenticated TLS session,
// known only to its two ends; it differs for every connection and every
// context, so keys of one link (or one purpose) are useless on another.
// Each direction has its own secret, so a record reflected back to its
// sender fails, as do records of a peer that also claims to be the
// client. Within a direction, the nonce of a record is unique per key:
// the counter is unique within an epoch and each epoch has its own key
// and IV, and the counter stops with an error before it could wrap
// (2^64 records). An epoch of 2^20 records of 256 KiB (2^38 bytes) is
// 2^34 AES blocks per key; RFC 8446
// section 5.5 limits an AES-GCM key to 2^24.5 full 16 KiB records, which
// is 2^34.5 blocks, so each key stays under that limit. Because the
// record number is implicit in the nonce, a replayed, reordered, dropped
// or foreign record fails authentication (ErrAuth). The length is
// authenticated as additional data; its range is checked before the body
// is read, so a forged header cannot make a reader wait for or buffer
// more than one record (ErrFrame). Nothing is returned to the caller
// before its record has been authenticated, and the first failure breaks
// the Conn's reading for good: there is no resynchronisation an attacker
// could steer.
//
// # What it does not do
//
// There is no close_notify: a stream cut at a record boundary reads as
// io.EOF, indistinguishable from the peer's end, so the caller's protocol
// must know its lengths (ccl/hier's does). There is no renegotiation, key
// update message or padding (record lengths show message sizes, as in
// TLS). Close does not flush.
//
// # Concurrency
//
// One goroutine may Read while another Writes and Flushes (a full-duplex
// net.Conn); the two sides share no state, so there are no locks. Reads
// must not run concurrently with reads, nor writes with writes or
// Flush. Close and the deadline setters are the underlying connection's.
//
// The switch-over from TLS to the bare connection is the caller's: no
// TLS layer may hold bytes of the sealed stream (the end that reads the
// last TLS message must not receive sealed bytes before it has read it;
// the TLS server's session tickets, if any, are TLS records too).
//
// It imports only the standard library.
package seal
