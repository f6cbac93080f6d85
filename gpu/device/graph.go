package device

import "errors"

// ErrCapturing is returned by calls that would wait for the device or
// read it back (Sync, CopyIn, CopyOut) while its stream is being recorded
// into a graph: in CUDA such a call would silently spoil the capture.
var ErrCapturing = errors.New("not allowed while the device's stream is captured into a graph")

// ErrNotCapturing: EndCapture without BeginCapture, or a second
// BeginCapture.
var ErrNotCapturing = errors.New("graph capture not in the expected state")

// Capturer is a Device that can record the work queued on its stream into
// a Graph instead of running it (CUDA stream capture). Between
// BeginCapture and EndCapture, Copy, Memset and work queued through the
// stream (kernels, collectives) are recorded; Alloc and Free run at once.
type Capturer interface {
	Device
	BeginCapture() error
	// EndCapture stops recording and returns the graph; after an error
	// the capture is over too (nothing was recorded).
	EndCapture() (Graph, error)
	Capturing() bool
}

// Graph is recorded device work. Launch queues one replay on the device's
// stream, in order with everything else queued there; it reads and writes
// the same addresses as the recorded calls.
type Graph interface {
	Launch() error
	Close() error
}
