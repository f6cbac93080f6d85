package shmarena

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"syscall"
)

// Peer is another process's arena, mapped for reading and writing (the
// cpu allreduce pushes reduced parts into peers' outputs).
type Peer struct {
	mem  []byte
	id   Identity
	refs int // MapPeer calls not yet closed (under peersMu)
}

// One mapping per arena and process, however many communicators use it:
// each maps the whole arena (virtual room of the host's memory size).
var (
	peersMu sync.Mutex
	peers   = map[Identity]*Peer{}
)

// MapPeer maps the arena id describes (read-write), or returns the mapping
// this process already has (each MapPeer needs its Close). It fails if the
// file cannot be opened (another user, no ptrace read permission, the
// process is gone), has another size, or does not carry id's token.
func MapPeer(id Identity) (*Peer, error) {
	peersMu.Lock()
	defer peersMu.Unlock()
	if p := peers[id]; p != nil {
		p.refs++
		return p, nil
	}
	p, err := mapPeer(id)
	if err != nil {
		return nil, err
	}
	p.refs = 1
	peers[id] = p
	return p, nil
}

func mapPeer(id Identity) (*Peer, error) {
	path := fmt.Sprintf("/proc/%d/fd/%d", id.PID, id.FD)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("shmarena: opening pid %d's arena: %w", id.PID, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("shmarena: %s: %w", path, err)
	}
	if st.Size() != id.Size || id.Size < headerSize {
		return nil, fmt.Errorf("shmarena: %s has %d bytes, want %d", path, st.Size(), id.Size)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, int(id.Size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shmarena: mapping %s: %w", path, os.NewSyscallError("mmap", err))
	}
	if binary.LittleEndian.Uint64(mem[0:]) != headerMagic || binary.LittleEndian.Uint64(mem[8:]) != id.Token {
		syscall.Munmap(mem)
		return nil, fmt.Errorf("shmarena: %s is not the arena announced (header or token differs)", path)
	}
	return &Peer{mem: mem, id: id}, nil
}

// Slice returns n bytes at off of the peer's arena, or false if the range
// is outside it (or in its header).
func (p *Peer) Slice(off, n int64) ([]byte, bool) {
	if off < headerSize || n < 0 || off > int64(len(p.mem)) || n > int64(len(p.mem))-off {
		return nil, false
	}
	return p.mem[off : off+n : off+n], true
}

// Close releases one MapPeer; the last unmaps the peer's arena.
func (p *Peer) Close() error {
	peersMu.Lock()
	defer peersMu.Unlock()
	if p.refs == 0 {
		return nil
	}
	p.refs--
	if p.refs > 0 {
		return nil
	}
	delete(peers, p.id)
	err := syscall.Munmap(p.mem)
	p.mem = nil
	return err
}
