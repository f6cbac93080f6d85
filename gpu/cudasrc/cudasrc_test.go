package cudasrc

import (
	"strings"
	"testing"
)

func TestHalfDefinesTheConversions(t *testing.T) {
	for _, fn := range []string{"typedef unsigned short u16;", "float h2f(u16 h)", "u16 f2h(float f)", "float b2f(u16 b)", "u16 f2b(float f)"} {
		if !strings.Contains(Half, fn) {
			t.Errorf("Half lacks %q", fn)
		}
	}
}

func TestPDLDefinesTheMacros(t *testing.T) {
	for _, m := range []string{"#define PDL_WAIT()", "#define PDL_LAUNCH()", "#define PDL_ENTRY()", "griddepcontrol.wait;", "griddepcontrol.launch_dependents;"} {
		if !strings.Contains(PDL, m) {
			t.Errorf("PDL lacks %q", m)
		}
	}
}
