// Package ctrl is the control protocol between a multi-host session's
// controller and its node agents, spoken over an authenticated link
// (net/link): frames of a 4-byte little-endian length, a type byte and
// a payload. Wire frames (package wire) travel as they are; the few other
// messages are small JSON objects decoded strictly (unknown fields are an
// error). Limits are checked on the header, before a payload is read: a
// wire frame at most transport.MaxFrame bytes, a trace frame (part lines
// of runtime/trace) at most MaxTrace, pings and pongs exactly 8 and 16
// bytes, any other message at most MaxMessage.
//
// A Conn also keeps the connection alive: Read fails when nothing at all
// arrived for the idle deadline (each side sends Heartbeat frames more
// often than that), and Write fails when the peer did not take a frame
// within the deadline, so a dead, stalled or partitioned peer is noticed
// in bounded time.
package ctrl
