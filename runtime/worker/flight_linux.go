package worker

import (
	"fmt"
	"os"

	"github.com/chorus-rt/chorus/internal/sys/shmem"
	"github.com/chorus-rt/chorus/runtime/trace"
)

// attachFlight maps the flight recorder the controller made (a memfd
// inherited as fd FDFlight) so that the controller reads this worker's
// latest events even while it is frozen or after it died.
func attachFlight() (*trace.Ring, error) {
	f := os.NewFile(FDFlight, "chorus-flight")
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("flight recorder: %w", err)
	}
	mem, err := shmem.Map(FDFlight, int(st.Size()))
	if err != nil {
		return nil, fmt.Errorf("flight recorder: %w", err)
	}
	f.Close() // the mapping stays
	r, err := trace.AttachRing(mem)
	if err != nil {
		shmem.Unmap(mem)
		return nil, err
	}
	r.SetPID(os.Getpid())
	return r, nil
}
