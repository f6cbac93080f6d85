package nvrtc

import (
	"bufio"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Resources is what ptxas reports for one kernel: registers a thread,
// bytes of static shared memory a block, and the bytes of local memory
// a thread's stack frame and register spills take.
type Resources struct {
	Registers   int
	Shared      int
	StackFrame  int
	SpillStores int
	SpillLoads  int
}

// Spills reports whether the kernel moves registers to local memory.
func (r Resources) Spills() bool { return r.SpillStores > 0 || r.SpillLoads > 0 }

// BlocksByRegisters is how many blocks of threads threads a
// multiprocessor of compute capability 7.0-9.0 holds by the kernel's
// registers alone: 64K of them, a thread's allotted in steps of 8 (at
// least 8). Threads, shared memory and the block limit may bind first.
func (r Resources) BlocksByRegisters(threads int) int {
	if threads <= 0 {
		return 0
	}
	return 65536 / (max(8, (r.Registers+7)/8*8) * threads)
}

// ErrReport is wrapped by ParseResources's errors: a line of the report
// ptxas writes with -v that does not read as one.
var ErrReport = errors.New("nvrtc: malformed ptxas resource report")

var (
	reEntry = regexp.MustCompile(`Compiling entry function '([^']+)'`)
	reProps = regexp.MustCompile(`Function properties for (\S+)`)
	reFrame = regexp.MustCompile(`(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads`)
	reUsed  = regexp.MustCompile(`: Used (\d+) registers`)
	reSmem  = regexp.MustCompile(`(\d+) bytes smem`)
)

// ParseResources reads the lines ptxas writes with -v in a compiler log
// and returns each entry function's resources:
//
//	ptxas info    : Compiling entry function 'k' for 'sm_90'
//	ptxas info    : Function properties for k
//	ptxas         .     48 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//	ptxas info    : Used 156 registers, 14352 bytes smem, 400 bytes cmem[0]
//
// A device function that was not inlined has a properties block of its
// own, left out; a "Used" line belongs to the entry compiled last. A log
// with no entry function is an empty report.
func ParseResources(log string) (map[string]Resources, error) {
	out := map[string]Resources{}
	entry, props := "", ""
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if !strings.HasPrefix(strings.TrimSpace(l), "ptxas") {
			continue // the front end's warnings
		}
		if m := reEntry.FindStringSubmatch(l); m != nil {
			entry, props = m[1], ""
			out[entry] = Resources{}
			continue
		}
		if m := reProps.FindStringSubmatch(l); m != nil {
			props = m[1]
			continue
		}
		if m := reFrame.FindStringSubmatch(l); m != nil {
			if entry == "" || props != entry {
				continue // a called function's frame
			}
			r := out[entry]
			r.StackFrame, r.SpillStores, r.SpillLoads = atoi(m[1]), atoi(m[2]), atoi(m[3])
			out[entry] = r
			continue
		}
		if m := reUsed.FindStringSubmatch(l); m != nil {
			if entry == "" {
				return nil, fmt.Errorf("%w: line %d: registers before any entry function: %q", ErrReport, n, l)
			}
			r := out[entry]
			r.Registers = atoi(m[1])
			if s := reSmem.FindStringSubmatch(l); s != nil {
				r.Shared = atoi(s[1])
			}
			out[entry] = r
		}
	}
	return out, sc.Err()
}

// atoi reads a run of digits the expressions matched (small enough: a
// report's numbers are bytes and registers of one kernel).
func atoi(s string) int {
	v, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return v
}
