package passes

import "testing"

// TestTakeFree pins TVM's reuse rule: only free storages sized in
// [size/16, size*16) qualify; the smallest that fits wins, else the
// largest smaller one (which the caller grows).
func TestTakeFree(t *testing.T) {
	mk := func(sizes ...int64) []*token {
		var l []*token
		for i, s := range sizes {
			l = append(l, &token{id: i, bytes: s})
		}
		return l
	}
	tests := []struct {
		sizes []int64
		size  int64
		want  int64 // -1: none
	}{
		{[]int64{100, 200, 50}, 150, 200},
		{[]int64{100, 120, 50}, 150, 120},
		{[]int64{16}, 256, 16},         // 256/16 = 16: in range
		{[]int64{15}, 256, -1},         // below size/16
		{[]int64{4096}, 256, -1},       // 256*16 = 4096: out of range
		{[]int64{4095, 300}, 256, 300}, // smallest that fits
		{[]int64{100, 100}, 100, 100},  // tie: the first made
		{[]int64{}, 100, -1},
	}
	for _, tc := range tests {
		got, rest := takeFree(mk(tc.sizes...), tc.size)
		switch {
		case tc.want < 0 && got != nil:
			t.Errorf("%v for %d: took %d", tc.sizes, tc.size, got.bytes)
		case tc.want >= 0 && (got == nil || got.bytes != tc.want):
			t.Errorf("%v for %d: took %v, want %d", tc.sizes, tc.size, got, tc.want)
		case got != nil && len(rest) != len(tc.sizes)-1:
			t.Errorf("%v: rest has %d", tc.sizes, len(rest))
		case got != nil && got.bytes == 100 && tc.size == 100 && got.id != 0:
			t.Errorf("tie not broken by id")
		}
	}
}
