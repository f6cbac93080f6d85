package ccl

import (
	"strings"
	"testing"
)

func TestParseEnvInt(t *testing.T) {
	for _, tc := range []struct {
		v        string
		min, got int
		bad      bool
	}{
		{"", 1, 7, false},
		{"1048576", 1, 1048576, false},
		{"1", 1, 1, false},
		{"0", 1, 7, true},
		{"0", 0, 0, false},
		{"-4", 0, 7, true},
		{"1M", 1, 7, true},
		{" 64", 1, 7, true},
		{"9999999999999999999999", 1, 7, true},
	} {
		got, err := parseEnvInt("CHORUS_X", tc.v, 7, tc.min)
		if got != tc.got || (err != nil) != tc.bad {
			t.Errorf("%q (min %d): %d, %v; want %d, error %v", tc.v, tc.min, got, err, tc.got, tc.bad)
		}
		if err != nil && !strings.Contains(err.Error(), "CHORUS_X") {
			t.Errorf("%q: error %q does not name the variable", tc.v, err)
		}
	}
}
