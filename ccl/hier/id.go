package hier

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/chorus-rt/chorus/ccl"
)

// idMagic starts every cpu-hier communicator id.
const idMagic = "CHH1"

// MaxRanks bounds the ranks of an id.
const MaxRanks = 1 << 16

// MakeID builds a communicator id from a random nonce and, for every
// global rank, its host index and endpoint address. Hosts must be
// non-decreasing (ranks are host-major).
func MakeID(nonce []byte, hosts []int, addrs []string) ([]byte, error) {
	if len(hosts) != len(addrs) || len(hosts) == 0 || len(hosts) > MaxRanks {
		return nil, fmt.Errorf("%w: cpu-hier id of %d hosts and %d addresses", ccl.ErrBadArgs, len(hosts), len(addrs))
	}
	b := append([]byte(idMagic), byte(len(nonce)))
	b = append(b, nonce...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(hosts)))
	for i, h := range hosts {
		if h < 0 || h > 0xffff || len(addrs[i]) > 255 || (i > 0 && h < hosts[i-1]) {
			return nil, fmt.Errorf("%w: rank %d: host %d, address %q", ccl.ErrBadArgs, i, h, addrs[i])
		}
		b = binary.LittleEndian.AppendUint16(b, uint16(h))
		b = append(b, byte(len(addrs[i])))
		b = append(b, addrs[i]...)
	}
	return b, nil
}

// IsID reports whether id is a cpu-hier id.
func IsID(id []byte) bool { return len(id) >= len(idMagic) && string(id[:len(idMagic)]) == idMagic }

// table is a parsed id: the global ranks' hosts and addresses, and the
// members of this (sub-)communicator.
type table struct {
	hosts   []int
	addrs   []string
	members []int // global ranks, in communicator rank order
}

// parseID decodes an id (and the SubID suffixes session workers add:
// "/group/<g>", "/control", ...) for a communicator of size ranks.
func parseID(id []byte, size int) (*table, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: cpu-hier id: %s", ccl.ErrBadArgs, fmt.Sprintf(format, args...))
	}
	if !IsID(id) {
		return nil, bad("no %s prefix", idMagic)
	}
	p := id[len(idMagic):]
	if len(p) < 1 || len(p) < 1+int(p[0])+4 {
		return nil, bad("truncated header")
	}
	p = p[1+int(p[0]):]
	n := int(binary.LittleEndian.Uint32(p))
	p = p[4:]
	if n < 1 || n > MaxRanks || n*3 > len(p) {
		return nil, bad("%d ranks in %d bytes", n, len(p))
	}
	t := &table{hosts: make([]int, n), addrs: make([]string, n)}
	for i := range n {
		if len(p) < 3 {
			return nil, bad("truncated rank %d", i)
		}
		h, l := int(binary.LittleEndian.Uint16(p)), int(p[2])
		p = p[3:]
		if l > len(p) {
			return nil, bad("rank %d address of %d bytes, %d left", i, l, len(p))
		}
		if i > 0 && h < t.hosts[i-1] {
			return nil, bad("rank %d on host %d after host %d: ranks must be host-major", i, h, t.hosts[i-1])
		}
		t.hosts[i], t.addrs[i] = h, string(p[:l])
		p = p[l:]
	}
	// SubID suffixes: "/group/<g>" selects the group's ranks (groups are
	// contiguous ranges of size ranks); other tags ("control") name
	// communicators over the same ranks.
	lo, hi := 0, n
	tags := strings.Split(string(p), "/")
	for i := 0; i < len(tags); i++ {
		if tags[i] != "group" {
			continue
		}
		if i+1 >= len(tags) {
			return nil, bad("group tag without a number")
		}
		g, err := strconv.Atoi(tags[i+1])
		if err != nil || g < 0 || g > n {
			return nil, bad("group %q", tags[i+1])
		}
		lo, hi = g*size, (g+1)*size
		i++
	}
	if lo < 0 || hi > n || hi-lo != size {
		return nil, bad("communicator of %d ranks does not fit ranks [%d, %d) of %d", size, lo, hi, n)
	}
	for r := lo; r < hi; r++ {
		t.members = append(t.members, r)
	}
	return t, nil
}

// Nonce returns the nonce an id was made with (for a GPU backend's id
// carried inside a cpu-hier id), or nil if id is not a cpu-hier id.
func Nonce(id []byte) []byte {
	if !IsID(id) || len(id) < len(idMagic)+1 {
		return nil
	}
	n := int(id[len(idMagic)])
	if len(id) < len(idMagic)+1+n {
		return nil
	}
	return append([]byte(nil), id[len(idMagic)+1:len(idMagic)+1+n]...)
}
