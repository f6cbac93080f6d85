package kernels

import (
	"testing"

	"github.com/chorus-rt/chorus/tensor"
)

// TestPlanGemv checks which products take the skinny-matrix kernel and
// how they are split, on an H100/H200-sized GPU (132 multiprocessors).
func TestPlanGemv(t *testing.T) {
	const sms = 132
	for _, c := range []struct {
		name    string
		m, n, k int
		dt      tensor.DType
		aligned bool
		maxRows int
		ok      bool
		mt, ks  int
		grid    uint32
	}{
		// Llama-3-8B's projections at one row: q/o (4096x4096) split in
		// two to reach 32 warps per multiprocessor, k/v (1024 rows) in
		// eight, the MLP (14336 rows) and the LM head not at all.
		{"q", 1, 4096, 4096, tensor.BFloat16, true, 8, true, 1, 2, 1024},
		{"kv", 1, 1024, 4096, tensor.BFloat16, true, 8, true, 1, 8, 1024},
		{"gate", 1, 14336, 4096, tensor.Float16, true, 8, true, 1, 1, 1792},
		{"down", 1, 4096, 14336, tensor.BFloat16, true, 8, true, 1, 2, 1024},
		{"lm_head", 1, 128256, 4096, tensor.BFloat16, true, 8, true, 1, 1, 16032},
		// rows round up to the kernels' buckets
		{"m3", 3, 77, 1000, tensor.BFloat16, true, 8, true, 4, 2, 20},
		{"m5", 5, 4096, 4096, tensor.Float16, true, 8, true, 8, 2, 1024},
		{"m8", 8, 300, 512, tensor.Float16, true, 8, true, 8, 2, 75},
		// a short row keeps each warp at least one 512-byte piece
		{"short", 1, 10, 256, tensor.BFloat16, true, 8, true, 1, 1, 2},
		{"short2", 1, 10, 512, tensor.BFloat16, true, 8, true, 1, 2, 3},
		// refused: cuBLAS
		{"m9", 9, 4096, 4096, tensor.BFloat16, true, 8, false, 0, 0, 0},
		{"threshold", 4, 4096, 4096, tensor.BFloat16, true, 2, false, 0, 0, 0},
		{"off", 1, 4096, 4096, tensor.BFloat16, true, 0, false, 0, 0, 0},
		{"f32", 1, 4096, 4096, tensor.Float32, true, 8, false, 0, 0, 0},
		{"k%8", 1, 4096, 4100, tensor.BFloat16, true, 8, false, 0, 0, 0},
		{"unaligned", 1, 4096, 4096, tensor.BFloat16, false, 8, false, 0, 0, 0},
		{"empty", 0, 4096, 4096, tensor.BFloat16, true, 8, false, 0, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, ok := planGemv(c.m, c.n, c.k, c.dt, c.aligned, sms, c.maxRows)
			if ok != c.ok {
				t.Fatalf("planGemv(%d, %d, %d, %s): ok %v, want %v", c.m, c.n, c.k, c.dt, ok, c.ok)
			}
			if !ok {
				return
			}
			if p.mt != c.mt || p.ks != c.ks || p.grid != c.grid {
				t.Errorf("plan %+v, want mt %d ks %d grid %d", p, c.mt, c.ks, c.grid)
			}
			// Every row is covered: grid blocks of 8/ks rows.
			if rows := int(p.grid) * gemvWarps / p.ks; rows < c.n || rows-c.n >= gemvWarps/p.ks {
				t.Errorf("%d blocks of %d rows for %d rows", p.grid, gemvWarps/p.ks, c.n)
			}
		})
	}
}

func TestGemvName(t *testing.T) {
	if got := gemvName("nt", tensor.BFloat16, 4); got != "gemv_nt_bf16_m4" {
		t.Errorf("gemvName = %q", got)
	}
	if got := gemvName("gated", tensor.Float16, 1); got != "gemv_gated_f16_m1" {
		t.Errorf("gemvName = %q", got)
	}
}

// TestPlanAttention checks which attention calls take the split-KV
// kernels and how the cache is split.
func TestPlanAttention(t *testing.T) {
	const sms = 132
	for _, c := range []struct {
		name               string
		t, hq, hkv, d, seq int
		dt                 tensor.DType
		ok                 bool
		epl, splits, chunk int
	}{
		// Llama-3-8B decode, cache of 4133 rows: 65 chunks of 64 rows for
		// 8 kv heads (520 blocks, about four per multiprocessor).
		{"decode", 1, 32, 8, 128, 4133, tensor.BFloat16, true, 4, 65, 64},
		{"decode_tp2", 1, 16, 4, 128, 4133, tensor.BFloat16, true, 4, 130, 32},
		// a prompt of 512 tokens: chunks of at most 256 rows would need
		// 145 MB of scratch, so 4 splits (at most 128 rows of a token's
		// 512 each)
		{"prefill", 512, 32, 8, 128, 4133, tensor.Float16, true, 4, 4, 1040},
		// 32 sequences fill the GPU with 3 splits, but chunks stay at
		// most 256 rows long: 17 of 248
		{"batch32", 32, 32, 8, 128, 4133, tensor.BFloat16, true, 4, 17, 248},
		{"small_cache", 1, 4, 4, 64, 40, tensor.Float16, true, 2, 5, 8},
		{"d256", 2, 8, 2, 256, 100, tensor.BFloat16, true, 8, 13, 8},
		{"d80", 1, 4, 4, 80, 64, tensor.BFloat16, false, 0, 0, 0},
		{"g16", 1, 32, 2, 128, 64, tensor.BFloat16, false, 0, 0, 0},
		{"d256_g8", 1, 16, 2, 256, 64, tensor.BFloat16, false, 0, 0, 0},
		{"f32", 1, 32, 8, 128, 64, tensor.Float32, false, 0, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, ok := planAttention(c.t, c.hq, c.hkv, c.d, c.seq, c.dt, true, sms)
			if ok != c.ok {
				t.Fatalf("ok %v, want %v", ok, c.ok)
			}
			if !ok {
				return
			}
			if p.epl != c.epl || p.splits != c.splits || p.chunk != c.chunk {
				t.Errorf("plan %+v, want epl %d splits %d chunk %d", p, c.epl, c.splits, c.chunk)
			}
			if p.splits*p.chunk < c.seq || (p.splits-1)*p.chunk >= c.seq || p.chunk%8 != 0 {
				t.Errorf("%d chunks of %d rows do not tile %d rows", p.splits, p.chunk, c.seq)
			}
			// fill: the splits a short context spreads over fill the GPU
			// with blocks (four a multiprocessor) and no more
			if want := min(max(1, (4*sms+c.hkv*c.t-1)/(c.hkv*c.t)), p.splits); p.fill != want {
				t.Errorf("fill %d, want %d", p.fill, want)
			}
			if p.scratch(c.t, c.hq, c.d) > attnScratchMax {
				t.Errorf("scratch %d bytes", p.scratch(c.t, c.hq, c.d))
			}
		})
	}
	// At every position the splits' chunks cover rows 0..pos and no split
	// past the last one with rows is read (the combine reads pos/chunk+1
	// of them): the kernels read each row once and write only splits the
	// combine merges.
	for _, c := range [][3]int{{1, 8, 4133}, {8, 8, 4133}, {32, 8, 4133}, {512, 8, 4133}, {1, 4, 40}, {2, 2, 100}, {1, 8, 1}} {
		tk, hkv, seq := c[0], c[1], c[2]
		p, ok := planAttention(tk, 4*hkv, hkv, 128, seq, tensor.BFloat16, true, sms)
		if !ok {
			t.Fatalf("t %d hkv %d seq %d: not planned", tk, hkv, seq)
		}
		for pos := range seq {
			ch := p.chunkAt(pos)
			na := pos/ch + 1
			if ch < 8 || ch%8 != 0 || ch > p.chunk || na > p.splits {
				t.Fatalf("t %d seq %d plan %+v: position %d in chunks of %d, %d splits with rows", tk, seq, p, pos, ch, na)
			}
		}
	}
	if _, ok := planAttention(1, 32, 8, 128, 64, tensor.BFloat16, false, sms); ok {
		t.Error("unaligned operands were taken")
	}
}

// TestWaveGrid checks the balanced wave: never more blocks than the work
// or the slots, as many rounds as a full wave, and blocks that share the
// rounds evenly (at most one unit apart).
func TestWaveGrid(t *testing.T) {
	for _, c := range []struct {
		blocks, slots int64
		want          uint32
	}{
		{1, 1056, 1},
		{1056, 1056, 1056},
		{1057, 1056, 529},   // 2 rounds
		{1792, 1056, 896},   // gate/up of Llama-3-8B: 2 rounds of 896
		{2502, 1056, 834},   // 3 rounds
		{16032, 1056, 1002}, // the LM head: 16 rounds
		{5, 0, 5},
	} {
		got := waveGrid(c.blocks, c.slots)
		if got != c.want {
			t.Errorf("waveGrid(%d, %d) = %d, want %d", c.blocks, c.slots, got, c.want)
			continue
		}
		if c.slots <= 0 {
			continue
		}
		full := (c.blocks + c.slots - 1) / c.slots
		rounds := (c.blocks + int64(got) - 1) / int64(got)
		if int64(got) > c.slots || rounds != full || int64(got)*(rounds-1) >= c.blocks {
			t.Errorf("waveGrid(%d, %d) = %d: %d rounds (a full wave takes %d)", c.blocks, c.slots, got, rounds, full)
		}
	}
}

// TestAttnKernelName checks which split kernel a call runs: the one
// sized for 4 query heads a kv head where the heads fit (head dims 64 and
// 128), else the one for 8 (head dim 256: 4), as kernels_attn.cu
// compiles them.
func TestAttnKernelName(t *testing.T) {
	for _, c := range []struct {
		epl, g int
		want   string
	}{
		{4, 4, "attn_split_bf16_e4_q4"},
		{4, 1, "attn_split_bf16_e4_q4"},
		{2, 3, "attn_split_bf16_e2_q4"},
		{4, 5, "attn_split_bf16_e4"},
		{4, 8, "attn_split_bf16_e4"},
		{8, 4, "attn_split_bf16_e8"},
		{8, 1, "attn_split_bf16_e8"},
	} {
		if got := (attnPlan{epl: c.epl}).kernel("attn_split", "bf16", c.g); got != c.want {
			t.Errorf("head dim %d, %d heads a kv head: %s, want %s", 32*c.epl, c.g, got, c.want)
		}
	}
}

func TestAddNormVec(t *testing.T) {
	for _, c := range []struct {
		dt      tensor.DType
		h       int
		aligned bool
		want    bool
	}{
		{tensor.BFloat16, 4096, true, true},
		{tensor.Float16, 8192, true, true},
		{tensor.BFloat16, 8200, true, false}, // more than a block's registers
		{tensor.BFloat16, 1000, true, true},
		{tensor.BFloat16, 1001, true, false}, // not whole 16-byte pieces
		{tensor.BFloat16, 4096, false, false},
		{tensor.Float32, 4096, true, false},
	} {
		if got := addNormVec(c.dt, c.h, c.aligned); got != c.want {
			t.Errorf("addNormVec(%v, %d, %v) = %v, want %v", c.dt, c.h, c.aligned, got, c.want)
		}
	}
}

// TestRowBatch checks which one-row products the one-row kernels take,
// with which batch length (132 multiprocessors, an H100's or H200's count).
func TestRowBatch(t *testing.T) {
	const sms = 132
	for _, c := range []struct {
		name    string
		m, n, k int
		dt      tensor.DType
		aligned bool
		nw      int
		want    int
	}{
		{"q/k/v", 1, 6144, 4096, tensor.BFloat16, true, 1, 8},
		{"o", 1, 4096, 4096, tensor.Float16, true, 1, 8},
		{"down", 1, 4096, 14336, tensor.BFloat16, true, 1, 8},
		{"gate/up", 1, 14336, 4096, tensor.BFloat16, true, 2, 4},
		{"lm head", 1, 128256, 4096, tensor.BFloat16, true, 1, 8},
		{"down over 2 GPUs (28 rounds)", 1, 4096, 7168, tensor.BFloat16, true, 1, 7},
		{"width 3072 (12 rounds)", 1, 6144, 3072, tensor.BFloat16, true, 1, 6},
		{"gated width 3072", 1, 6144, 3072, tensor.BFloat16, true, 2, 4},
		{"width 5120 (20 rounds)", 1, 6144, 5120, tensor.BFloat16, true, 1, 5},
		{"gated width 4608 (18 rounds)", 1, 6144, 4608, tensor.BFloat16, true, 2, 3},
		{"13 rounds: no batch divides", 1, 6144, 13 * 256, tensor.BFloat16, true, 1, 0},
		{"k not whole rounds", 1, 6144, 3000, tensor.BFloat16, true, 1, 0},
		{"three weights", 1, 6144, 4096, tensor.BFloat16, true, 3, 0},
		{"two rows", 2, 6144, 4096, tensor.BFloat16, true, 1, 0},
		{"float32", 1, 6144, 4096, tensor.Float32, true, 1, 0},
		{"unaligned", 1, 6144, 4096, tensor.BFloat16, false, 1, 0},
		{"k past shared x", 1, 6144, 18432, tensor.BFloat16, true, 1, 0},
		{"a warp without a row", 1, sms*rowWarps - 1, 4096, tensor.BFloat16, true, 1, 0},
		{"a row a warp", 1, sms * rowWarps, 4096, tensor.BFloat16, true, 1, 8},
	} {
		if got := rowBatch(c.m, c.n, c.k, c.dt, c.aligned, sms, c.nw); got != c.want {
			t.Errorf("%s: rowBatch(m %d, n %d, k %d, %s, aligned %v, nw %d) = %d, want %d", c.name, c.m, c.n, c.k, c.dt, c.aligned, c.nw, got, c.want)
		}
	}
}

func TestRowName(t *testing.T) {
	for _, c := range []struct {
		kind  string
		dt    tensor.DType
		nw, u int
		want  string
	}{
		{"nt", tensor.BFloat16, 1, 8, "gemv1_nt_bf16"},
		{"nt3", tensor.Float16, 1, 7, "gemv1_nt3_f16_u7"},
		{"gated", tensor.BFloat16, 2, 4, "gemv1_gated_bf16"},
		{"gated", tensor.BFloat16, 2, 3, "gemv1_gated_bf16_u3"},
	} {
		if got := rowName(c.kind, c.dt, c.nw, c.u); got != c.want {
			t.Errorf("rowName(%s, %s, %d, %d) = %s, want %s", c.kind, c.dt, c.nw, c.u, got, c.want)
		}
	}
}
