package kernels

import (
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"
	"testing"

	"github.com/chorus-rt/chorus/tensor"
)

// TestPlanTC checks the tensor-core kernels' plans on an H100/H200-sized
// GPU (132 multiprocessors): Llama-3-8B's products at 8 and 32 rows split
// k as far as four blocks per multiprocessor (two for the gated pair's
// larger blocks: one wave) allow, never below tcMinChunks chunks a
// split; the LM head needs no split.
func TestPlanTC(t *testing.T) {
	const sms = 132
	for _, c := range []struct {
		name                   string
		m                      int
		ns                     []int
		k                      int
		ok                     bool
		mt, tiles, splits, cps int
		nw                     int
	}{
		{"qkv", 8, []int{4096, 1024, 1024}, 4096, true, 8, 96, 5, 26, 1},
		// x shared from 16 rows: 60 and 72 KiB a block, three a multiprocessor
		{"o", 32, []int{4096}, 4096, true, 32, 64, 6, 22, 1},
		{"gate", 16, []int{14336}, 4096, true, 16, 224, 1, 128, 1},
		// the gated pair: 96 KiB a block, two a multiprocessor, no split
		{"gate/up pair", 8, []int{14336}, 4096, true, 8, 224, 1, 128, 2},
		{"down", 8, []int{4096}, 14336, true, 8, 64, 8, 56, 1},
		{"lm_head", 32, []int{128256}, 4096, true, 32, 2004, 1, 128, 1},
		// short rows keep tcMinChunks chunks a split, or one split
		{"short", 5, []int{64}, 512, true, 8, 1, 2, 8, 1},
		{"tiny", 1, []int{10}, 8, true, 8, 1, 1, 1, 1},
		// a tail tile: 100 rows are two tiles
		{"tail", 12, []int{100}, 4096, true, 16, 2, 16, 8, 1},
		// refused
		{"m33", 33, []int{4096}, 4096, false, 0, 0, 0, 0, 1},
		{"k%8", 8, []int{4096}, 4100, false, 0, 0, 0, 0, 1},
		{"empty", 0, []int{4096}, 4096, false, 0, 0, 0, 0, 1},
		{"no rows", 8, []int{0}, 4096, false, 0, 0, 0, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, ok := planTC(c.m, c.ns, c.k, tensor.BFloat16, true, sms, c.nw, 0)
			if ok != c.ok {
				t.Fatalf("ok %v, want %v", ok, c.ok)
			}
			if !ok {
				return
			}
			nch := (c.k/8 + 3) / 4
			if p.mt != c.mt || p.tiles != c.tiles || p.splits != c.splits || p.cps != c.cps {
				t.Errorf("plan %+v, want mt %d tiles %d splits %d cps %d", p, c.mt, c.tiles, c.splits, c.cps)
			}
			// The splits cover every chunk, none empty.
			if p.splits*p.cps < nch || (p.splits-1)*p.cps >= nch {
				t.Errorf("%d splits of %d chunks for %d chunks", p.splits, p.cps, nch)
			}
		})
	}
	if _, ok := planTC(8, []int{4096}, 4096, tensor.Float32, true, sms, 1, 0); ok {
		t.Error("float32 taken")
	}
	if _, ok := planTC(8, []int{4096}, 4096, tensor.BFloat16, false, sms, 1, 0); ok {
		t.Error("unaligned operands taken")
	}
	if p, _ := planTC(8, []int{4096}, 4096, tensor.BFloat16, true, sms, 1, 3); p.splits != 3 || p.cps != 43 {
		t.Errorf("forced 3 splits: %+v", p)
	}
}

func TestSkinnyPath(t *testing.T) {
	for _, c := range []struct {
		m, max int
		want   string
	}{{1, 32, "core"}, {2, 32, "tc"}, {4, 32, "tc"}, {5, 32, "tc"}, {32, 32, "tc"}, {33, 64, ""}, {8, 4, ""}, {1, 0, ""}, {0, 32, ""}} {
		if got := skinnyPath(c.m, c.max); got != c.want {
			t.Errorf("skinnyPath(%d, %d) = %q, want %q", c.m, c.max, got, c.want)
		}
	}
}

func TestTCTakes(t *testing.T) {
	for _, c := range []struct {
		m    int
		want bool
	}{{2, true}, {8, true}, {9, true}, {16, true}, {17, false}, {32, false}} {
		if got := tcTakes(c.m); got != c.want {
			t.Errorf("tcTakes(%d) = %v, want %v", c.m, got, c.want)
		}
	}
}

// TestTCSharedXLayout: the block ring of x (tc_issue_x writes token tok's
// piece pc of a stage at tok·PR + tc_swz(tok, pc); tc_rows reads lane
// (g, q)'s piece 4u+q of token 8t+g at (8t+g)·PR + tc_swz(g, 4u+q)) gives
// every (token, piece) its own slot, every read finds the piece written
// for it, and the 8 lanes of each phase of a 16-byte shared load hit 8
// different 16-byte bank groups (no conflict).
func TestTCSharedXLayout(t *testing.T) {
	swz := func(pr, r, pc int) int { // tc_swz
		if pr >= 8 {
			return pc ^ (r&1)<<2
		}
		return pc
	}
	for _, c := range []struct{ nw, mt int }{{1, 16}, {1, 32}, {2, 16}, {2, 32}} {
		pr := 4 * tcStageChunksFor(c.nw, c.mt)
		slot := map[int][2]int{}
		for tok := range c.mt {
			for pc := range pr {
				s := tok*pr + swz(pr, tok, pc)
				if prev, dup := slot[s]; dup || s >= c.mt*pr {
					t.Fatalf("nw %d mt %d: token %d piece %d at slot %d (taken by %v, or past the stage)", c.nw, c.mt, tok, pc, s, prev)
				}
				slot[s] = [2]int{tok, pc}
			}
		}
		for tt := range c.mt / 8 {
			for u := range pr / 4 {
				for phase := range 4 {
					banks := map[int]bool{}
					for lane := phase * 8; lane < phase*8+8; lane++ {
						g, q := lane>>2, lane&3
						s := (tt*8+g)*pr + swz(pr, g, 4*u+q)
						if got := slot[s]; got != [2]int{tt*8 + g, 4*u + q} {
							t.Errorf("nw %d mt %d: lane %d of tile %d reads %v at slot %d, want token %d piece %d", c.nw, c.mt, lane, tt, got, s, tt*8+g, 4*u+q)
						}
						banks[s%8] = true
					}
					if len(banks) != 8 {
						t.Errorf("nw %d mt %d tile %d u %d phase %d: %d bank groups for 8 lanes", c.nw, c.mt, tt, u, phase, len(banks))
					}
				}
			}
		}
	}
}

// tcEmulate runs kernels_tc.cu's index arithmetic on the CPU: every
// block (tile, split), warp and lane loads the 16-byte pieces the kernel
// loads into its A and B registers, an mma is computed from the
// registers by the PTX fragment layouts of m16n8k16 (A rows g and g+8 at
// columns 2q, 2q+1 and 2q+8, 2q+9; B rows 2q, 2q+1 and 2q+8, 2q+9 at
// column g; C rows g and g+8 at columns 2q, 2q+1), and split launches
// go through the partial-sum layout and the last block's sum. x is
// [m][k], w [n][k]; it returns out [m][n].
func tcEmulate(x, w [][]float64, p tcPlan) [][]float64 {
	m, n, k := len(x), len(w), len(x[0])
	k8, nch := k/8, (k/8+3)/4
	nt := p.mt / 8
	out := make([][]float64, m)
	for i := range out {
		out[i] = make([]float64, n)
	}
	// piece returns the 8 elements of 16-byte piece pc of row r (zeros
	// where the kernel loads none).
	piece := func(rows [][]float64, r, pc int, ok bool) [8]float64 {
		var v [8]float64
		if ok && r < len(rows) && pc < k8 {
			copy(v[:], rows[r][pc*8:pc*8+8])
		}
		return v
	}
	part := make([]float64, p.tiles*p.splits*p.mt*tcRows)
	for tile := range p.tiles {
		for s := range p.splits {
			c0, c1 := s*p.cps, min(nch, (s+1)*p.cps)
			for wid := range tcWarps {
				rowBase := tile*tcRows + wid*16
				// acc[lane][t][i]: the C fragment of every lane.
				var acc [32][4][4]float64
				for c := c0; c < c1; c++ {
					var wa, wb [32][8]float64
					var xv [32][4][8]float64
					for lane := range 32 {
						g, q := lane>>2, lane&3
						pc := c*4 + q
						wa[lane] = piece(w, rowBase+g, pc, true)
						wb[lane] = piece(w, rowBase+g+8, pc, true)
						for t := range nt {
							xv[lane][t] = piece(x, t*8+g, pc, t*8+g < m)
						}
					}
					for half := range 2 { // registers .x,.y then .z,.w
						for t := range nt {
							// A [16][16] and B [16][8] from the registers.
							var A [16][16]float64
							var B [16][8]float64
							for lane := range 32 {
								g, q := lane>>2, lane&3
								e := func(v [8]float64, reg int) (float64, float64) { // reg 0..3 of the V4: elements 2reg, 2reg+1
									return v[2*reg], v[2*reg+1]
								}
								a0l, a0h := e(wa[lane], 2*half)   // a0: row g, cols 2q, 2q+1
								a1l, a1h := e(wb[lane], 2*half)   // a1: row g+8
								a2l, a2h := e(wa[lane], 2*half+1) // a2: row g, cols 2q+8, 2q+9
								a3l, a3h := e(wb[lane], 2*half+1) // a3: row g+8
								A[g][2*q], A[g][2*q+1] = a0l, a0h
								A[g+8][2*q], A[g+8][2*q+1] = a1l, a1h
								A[g][2*q+8], A[g][2*q+9] = a2l, a2h
								A[g+8][2*q+8], A[g+8][2*q+9] = a3l, a3h
								b0l, b0h := e(xv[lane][t], 2*half)
								b1l, b1h := e(xv[lane][t], 2*half+1)
								B[2*q][g], B[2*q+1][g] = b0l, b0h
								B[2*q+8][g], B[2*q+9][g] = b1l, b1h
							}
							for lane := range 32 {
								g, q := lane>>2, lane&3
								for i := range 4 {
									r, col := g+(i>>1)*8, 2*q+(i&1)
									for kk := range 16 {
										acc[lane][t][i] += A[r][kk] * B[kk][col]
									}
								}
							}
						}
					}
				}
				for lane := range 32 {
					g, q := lane>>2, lane&3
					for t := range nt {
						for i := range 4 {
							r := wid*16 + g + (i>>1)*8
							tok := t*8 + 2*q + (i & 1)
							if p.splits == 1 {
								if rowBase+g+(i>>1)*8 < n && tok < m {
									out[tok][rowBase+g+(i>>1)*8] = acc[lane][t][i]
								}
								continue
							}
							part[((tile*p.splits+s)*p.mt+tok)*tcRows+r] = acc[lane][t][i]
						}
					}
				}
			}
		}
		if p.splits > 1 { // the last block's sum
			for e := range m * tcRows {
				tok, r := e/tcRows, e%tcRows
				nn := tile*tcRows + r
				if nn >= n {
					continue
				}
				sum := 0.0
				for s := range p.splits {
					sum += part[((tile*p.splits+s)*p.mt+tok)*tcRows+r]
				}
				out[tok][nn] = sum
			}
		}
	}
	return out
}

// TestTCEmulation: the kernel's loads, fragment layout and split-K
// reduction compute x·wᵀ (against a plain triple loop) for row counts of
// every bucket, a tail tile, k not a multiple of the 32-element chunk,
// and one, several and uneven splits.
func TestTCEmulation(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		name         string
		m, n, k, spl int
	}{
		{"m8", 8, 64, 64, 1},
		{"m5_tail", 5, 100, 72, 1},
		{"m16_split", 16, 70, 256, 3},
		{"m32_split", 32, 64, 512, 4},
		{"m12_uneven", 12, 130, 200, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			x, w := make([][]float64, c.m), make([][]float64, c.n)
			for i := range x {
				x[i] = make([]float64, c.k)
				for j := range x[i] {
					x[i][j] = r.Float64()*2 - 1
				}
			}
			for i := range w {
				w[i] = make([]float64, c.k)
				for j := range w[i] {
					w[i][j] = r.Float64()*2 - 1
				}
			}
			p, ok := planTC(c.m, []int{c.n}, c.k, tensor.BFloat16, true, 132, 1, c.spl)
			if !ok {
				t.Fatal("plan refused")
			}
			got := tcEmulate(x, w, p)
			for i := range c.m {
				for j := range c.n {
					want := 0.0
					for l := range c.k {
						want += x[i][l] * w[j][l]
					}
					if math.Abs(got[i][j]-want) > 1e-9 {
						t.Fatalf("out[%d][%d] = %v, want %v (plan %+v)", i, j, got[i][j], want, p)
					}
				}
			}
		})
	}
}

// TestTCShapesMatchSource: the Go side's copies of kernels_tc.cu's
// shapes (the launch's dynamic shared memory is computed from them) are
// the source's.
func TestTCShapesMatchSource(t *testing.T) {
	for name, want := range map[string]int{"TC_WARPS": tcWarps, "TC_STAGES": tcStages, "TC_AU(NW)": tcStageChunks, "TC_MAX_M": TCMaxM} {
		m := regexp.MustCompile(`(?m)^#define ` + regexp.QuoteMeta(name) + ` (\d+)$`).FindStringSubmatch(tcKernelSource)
		if m == nil {
			t.Errorf("kernels_tc.cu defines no %s as a number", name)
			continue
		}
		if got, _ := strconv.Atoi(m[1]); got != want {
			t.Errorf("%s is %d in kernels_tc.cu, %d in Go", name, got, want)
		}
	}
	for _, c := range []struct {
		kind string
		mt   int
		want int
	}{
		{"nt", 8, 48 << 10}, {"gated", 8, 96 << 10}, {"nt3w", 16, 48 << 10},
		{"nt", 16, 60 << 10}, {"nt3", 32, 72 << 10}, {"gated", 16, 108 << 10}, {"gated", 32, 60 << 10},
	} {
		if got := tcSmem(tcNW(c.kind), c.mt, tcSharedX(c.kind, c.mt)); got != c.want {
			t.Errorf("tcSmem(%s, %d) = %d bytes, want %d", c.kind, c.mt, got, c.want)
		}
	}
}

// TestTCWarpTiles: the q/k/v triple runs tc_nt3w (16-row tiles, no split
// across blocks) exactly where planTC would split k across blocks of the
// 8-token kernels, with a block for every 16 rows of each weight.
func TestTCWarpTiles(t *testing.T) {
	for _, c := range []struct {
		name      string
		m, k      int
		ns        []int
		wantTiles int
		want      bool
	}{
		{"llama3_8b_qkv", 8, 4096, []int{4096, 1024, 1024}, 384, true},
		{"tails", 7, 512, []int{1030, 1030, 515}, 65 + 65 + 33, true},
		{"16_rows", 12, 4096, []int{4096, 1024, 1024}, 0, false},
		{"short_k_no_split", 5, 72, []int{100, 100, 50}, 0, false},
		{"fills_the_gpu", 8, 4096, []int{16384, 8192, 8192}, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, ok := planTC(c.m, c.ns, c.k, tensor.BFloat16, true, 132, 1, 0)
			if !ok {
				t.Fatal("plan refused")
			}
			tiles, ok := tcWarpTiles(p, c.ns)
			if ok != c.want || tiles != c.wantTiles {
				t.Errorf("tcWarpTiles(%+v) = %d, %v; want %d, %v", p, tiles, ok, c.wantTiles, c.want)
			}
		})
	}
}

// TestTCTakesTriple: the q/k/v triple goes to the tensor-core kernels up
// to tcTripleRows rows where the limit lets every product of tcMaxRows
// through (the default), and follows a lower limit (0: cuBLAS only).
func TestTCTakesTriple(t *testing.T) {
	defer func(v int) { tcLimits.rows = v }(tcLimits.rows)
	for _, c := range []struct {
		limit, m int
		want     bool
	}{
		{tcMaxRows, 1, true}, {tcMaxRows, 16, true}, {tcMaxRows, 17, true}, {tcMaxRows, 32, true}, {tcMaxRows, 33, false},
		{8, 8, true}, {8, 9, false}, {0, 1, false}, {TCMaxM, 32, true},
	} {
		tcLimits.rows = c.limit
		if got := tcTakesTriple(c.m); got != c.want {
			t.Errorf("limit %d: tcTakesTriple(%d) = %v, want %v", c.limit, c.m, got, c.want)
		}
	}
}
