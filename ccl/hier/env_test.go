package hier

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/ccl"
)

// TestJoinRefusesBadTuning: a tuning variable set to something that is
// not a positive integer fails Join with ccl.ErrBadArgs naming it,
// instead of running with the default.
func TestJoinRefusesBadTuning(t *testing.T) {
	defer func(e error) { envErr = e }(envErr)
	t.Setenv("CHORUS_HIER_SMALL_MAX", "64K")
	_, envErr = ccl.EnvInt("CHORUS_HIER_SMALL_MAX", 1, 1)
	wantJoinRefused(t, "CHORUS_HIER_SMALL_MAX")
	t.Setenv("CHORUS_HIER_CARRY_MAX", "-1") // may be 0, not negative
	_, envErr = ccl.EnvInt("CHORUS_HIER_CARRY_MAX", 1, 0)
	wantJoinRefused(t, "CHORUS_HIER_CARRY_MAX")
	for _, v := range []string{"3000", "-1"} { // a power of two or 0
		t.Setenv("CHORUS_HIER_PIPE", v)
		envErr = nil
		if got := envPow2("CHORUS_HIER_PIPE", 8<<20); got != 8<<20 {
			t.Fatalf("CHORUS_HIER_PIPE=%s: %d, want the default kept", v, got)
		}
		wantJoinRefused(t, "CHORUS_HIER_PIPE")
	}
	t.Setenv("CHORUS_HIER_PIPE", "0")
	envErr = nil
	if got := envPow2("CHORUS_HIER_PIPE", 8<<20); got != 0 || envErr != nil {
		t.Fatalf("CHORUS_HIER_PIPE=0: %d, %v", got, envErr)
	}
}

// wantJoinRefused joins rank 0 of a two-host communicator, which must
// fail before it connects with ccl.ErrBadArgs naming the variable name.
func wantJoinRefused(t *testing.T, name string) {
	t.Helper()
	addr, err := Endpoint()
	if err != nil {
		t.Fatal(err)
	}
	nonce, _ := (&Backend{}).NewID()
	id, err := MakeID(nonce, []int{0, 1}, []string{addr, addr})
	if err != nil {
		t.Fatal(err)
	}
	_, err = (&Backend{}).Join(context.Background(), ccl.Config{ID: id, Rank: 0, Size: 2})
	if !errors.Is(err, ccl.ErrBadArgs) || !strings.Contains(err.Error(), name) {
		t.Fatalf("Join with a bad %s: %v; want ErrBadArgs naming it", name, err)
	}
}
