//go:build !linux

package shmarena

import "errors"

// ErrUnsupported: shared tensor arenas need Linux (memfd, /proc).
var errUnsupported = errors.New("shmarena: needs Linux")

// Arena is unavailable off Linux: New fails.
type Arena struct{}

func New(Config) (*Arena, error)           { return nil, errUnsupported }
func (*Arena) Identity() Identity          { return Identity{} }
func (*Arena) Stats() Stats                { return Stats{} }
func (*Arena) Close() error                { return nil }
func (*Arena) Alloc(int64) ([]byte, error) { return nil, errUnsupported }
func (*Arena) Locate([]byte) (int64, bool) { return 0, false }

// Peer is unavailable off Linux: MapPeer fails.
type Peer struct{}

func MapPeer(Identity) (*Peer, error)           { return nil, errUnsupported }
func (*Peer) Slice(int64, int64) ([]byte, bool) { return nil, false }
func (*Peer) Close() error                      { return nil }
