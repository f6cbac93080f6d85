package gpuprobe

import (
	"fmt"
	"strings"
)

// Lib is what the probe learned about one library.
type Lib struct {
	Name    string // what it is ("CUDA driver", ...)
	Found   bool
	Path    string // the soname that loaded
	Version string // as the library reports it, when found
	Err     string // why it was not found
}

// Report is the result of Probe.
type Report struct {
	Libs    []Lib
	Devices int    // CUDA devices, when the driver loaded and initialised
	DevErr  string // why devices could not be counted
}

// Summary is one line per library, and a plain "no CUDA driver found"
// when the driver is missing.
func (r Report) Summary() string {
	var b strings.Builder
	for _, l := range r.Libs {
		if l.Found {
			fmt.Fprintf(&b, "  %-12s %s (version %s)\n", l.Name+":", l.Path, l.Version)
		} else {
			fmt.Fprintf(&b, "  %-12s not found (%s)\n", l.Name+":", l.Err)
		}
	}
	if len(r.Libs) > 0 && !r.Libs[0].Found {
		b.WriteString("  no CUDA driver found: GPU backends are unavailable; CPU sessions and collectives work\n")
	} else if r.DevErr != "" {
		fmt.Fprintf(&b, "  devices: unavailable (%s)\n", r.DevErr)
	} else {
		fmt.Fprintf(&b, "  devices: %d\n", r.Devices)
	}
	return b.String()
}
