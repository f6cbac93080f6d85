package ccl

import "testing"

// TestKindString: every kind has its name (they appear in errors and
// traces); numbers without one, 0 included, say so.
func TestKindString(t *testing.T) {
	for _, c := range []struct {
		k    Kind
		want string
	}{
		{KindAllReduce, "allreduce"}, {KindAllGather, "allgather"}, {KindReduceScatter, "reduce_scatter"},
		{KindBroadcast, "broadcast"}, {KindScatter, "scatter"}, {KindGather, "gather"},
		{KindBarrier, "barrier"}, {KindSend, "send"}, {KindRecv, "recv"},
		{0, "collective(0)"}, {10, "collective(10)"}, {255, "collective(255)"},
	} {
		if got := c.k.String(); got != c.want {
			t.Errorf("Kind(%d).String() = %q, want %q", uint8(c.k), got, c.want)
		}
	}
}
