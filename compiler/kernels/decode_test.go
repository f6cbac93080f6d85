package kernels

import (
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/chorus-rt/chorus/tensor"
)

// TestPlanDecode checks which attention calls take dec_attn and how a
// sequence's cache is split: whole tiles of 64 rows where a chunk is
// longer than a tile, at most decodeMaxChunk rows a block and at least
// decodeMinRows where the cache is longer, enough blocks for
// decodeBlocksPerSM a multiprocessor, the scratch bounded.
func TestPlanDecode(t *testing.T) {
	const sms = 132
	for _, c := range []struct {
		name                    string
		t, hq, hkv, d, seq, bat int
		dt                      tensor.DType
		aligned, ok             bool
		splits, chunk           int
		kernel                  string
	}{
		// Llama-3-8B, a cache of 4133 rows: 8 pairs at batch 1 fill the
		// GPU's 132 multiprocessors with 17 splits of 256 rows
		{"batch1", 1, 32, 8, 128, 4133, 1, tensor.BFloat16, true, true, 17, 256, "dec_attn_bf16_d128_g8"},
		// batch 8: 64 pairs, 3 splits; batch 32: 256 pairs fill the GPU,
		// but a block takes at most 4096 rows
		{"batch8", 8, 32, 8, 128, 4133, 8, tensor.BFloat16, true, true, 3, 1408, "dec_attn_bf16_d128_g8"},
		{"batch32", 32, 32, 8, 128, 4133, 32, tensor.BFloat16, true, true, 2, 2112, "dec_attn_bf16_d128_g8"},
		{"tp2", 1, 16, 4, 128, 4133, 1, tensor.BFloat16, true, true, 33, 128, "dec_attn_bf16_d128_g8"},
		{"long_cache", 1, 32, 8, 128, 100000, 1, tensor.BFloat16, true, true, 25, 4032, "dec_attn_bf16_d128_g8"},
		// short caches: at least 64 rows a split (one round of a block's
		// loads), so context 128 is 3 splits merged by the last block, not
		// 17 (or 33 on a rank of two) of 8 rows and attn_combine
		{"batch1_ctx128", 1, 32, 8, 128, 137, 1, tensor.BFloat16, true, true, 3, 48, "dec_attn_bf16_d128_g8"},
		{"tp2_ctx128", 1, 16, 4, 128, 137, 1, tensor.BFloat16, true, true, 3, 48, "dec_attn_bf16_d128_g8"},
		{"batch1_ctx1000", 1, 32, 8, 128, 1009, 1, tensor.BFloat16, true, true, 16, 64, "dec_attn_bf16_d128_g8"},
		{"short_cache", 1, 8, 2, 64, 40, 1, tensor.Float16, true, true, 1, 40, "dec_attn_f16_d64_g8"},
		{"g16", 1, 32, 2, 128, 100, 1, tensor.Float16, true, true, 2, 56, "dec_attn_f16_d128"},
		{"one_row", 1, 4, 4, 128, 1, 1, tensor.Float16, true, true, 1, 8, "dec_attn_f16_d128_g8"},
		// not decode, or shapes it does not take
		{"prompt", 16, 32, 8, 128, 4133, 1, tensor.BFloat16, true, false, 0, 0, ""},
		{"two_tokens_a_sequence", 4, 32, 8, 128, 4133, 2, tensor.BFloat16, true, false, 0, 0, ""},
		{"d256", 1, 8, 2, 256, 100, 1, tensor.BFloat16, true, false, 0, 0, ""},
		{"g32", 1, 32, 1, 128, 100, 1, tensor.BFloat16, true, false, 0, 0, ""},
		{"f32", 1, 32, 8, 128, 100, 1, tensor.Float32, true, false, 0, 0, ""},
		{"unaligned", 1, 32, 8, 128, 100, 1, tensor.BFloat16, false, false, 0, 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			dims := attnDims{t: c.t, hq: c.hq, hkv: c.hkv, d: c.d, maxSeq: c.seq, batch: c.bat}
			p, ok := planDecode(dims, c.dt, c.aligned, sms)
			if ok != c.ok {
				t.Fatalf("ok %v, want %v", ok, c.ok)
			}
			if !ok {
				return
			}
			suf, err := kernelSuffix(c.dt)
			if err != nil {
				t.Fatal(err)
			}
			if fuse := c.splits > 1 && c.splits <= decodeFuseSplits; p.fuse != fuse {
				t.Errorf("fuse %v, want %v", p.fuse, fuse)
			}
			if p.splits != c.splits || p.chunk != c.chunk || p.kernel(suf, false) != c.kernel {
				t.Errorf("plan %+v kernel %s, want splits %d chunk %d kernel %s", p, p.kernel(suf, false), c.splits, c.chunk, c.kernel)
			}
			if g := p.grid(dims); g != [3]uint32{uint32(c.splits), uint32(c.hkv), uint32(c.t)} {
				t.Errorf("grid %v", g)
			}
			for _, rope := range []bool{false, true} {
				if !slices.Contains(decodeKernelNames, p.kernel(suf, rope)) {
					t.Errorf("kernel %s is not loaded", p.kernel(suf, rope))
				}
			}
		})
	}
	// At every position the splits cover rows 0..pos in chunks of at most
	// the plan's rows (whole tiles past one), no split past the grid (the
	// merge's or attn_combine's) gets rows, and the scratch stays bounded.
	for _, c := range [][3]int{{1, 8, 4133}, {8, 8, 4133}, {32, 8, 4133}, {1, 4, 40}, {3, 2, 700}, {1, 8, 1}, {64, 8, 32768}, {1, 1, 100000}} {
		tk, hkv, seq := c[0], c[1], c[2]
		dims := attnDims{t: tk, hq: 4 * hkv, hkv: hkv, d: 128, maxSeq: seq, batch: tk}
		p, ok := planDecode(dims, tensor.BFloat16, true, sms)
		if !ok {
			t.Fatalf("t %d hkv %d seq %d: not planned", tk, hkv, seq)
		}
		if p.splits*p.chunk < seq || (p.splits-1)*p.chunk >= seq || (p.chunk > decodeTile && p.chunk%decodeTile != 0) || p.chunk%8 != 0 {
			t.Errorf("t %d seq %d: %d chunks of %d rows do not tile the cache", tk, seq, p.splits, p.chunk)
		}
		if p.chunk > decodeMaxChunk && p.splits < attnMaxSplits && p.scratch(tk, 4*hkv) <= attnScratchMax/2 {
			t.Errorf("t %d seq %d: chunks of %d rows", tk, seq, p.chunk)
		}
		if s := p.scratch(tk, 4*hkv); s > attnScratchMax {
			t.Errorf("t %d seq %d: scratch %d bytes", tk, seq, s)
		}
		for pos := range seq {
			ch := p.attn().chunkAt(pos)
			if na := pos/ch + 1; ch < 8 || ch > p.chunk || na > p.splits {
				t.Fatalf("t %d seq %d plan %+v: position %d in chunks of %d, %d splits with rows", tk, seq, p, pos, ch, na)
			}
		}
	}
}

// TestDecodeTail: the merging block loads as many splits at once
// (DEC_TAIL) as a plan merges that way at most (decodeFuseSplits).
func TestDecodeTail(t *testing.T) {
	m := regexp.MustCompile(`(?m)^#define DEC_TAIL (\d+)$`).FindStringSubmatch(prefillKernelSource)
	if m == nil || m[1] != strconv.Itoa(decodeFuseSplits) {
		t.Fatalf("kernels_prefill.cu: DEC_TAIL %v, decodeFuseSplits %d", m, decodeFuseSplits)
	}
}

// TestDecodeKernelNames: kernels_prefill.cu instantiates exactly the
// dec_attn kernels the module loads.
func TestDecodeKernelNames(t *testing.T) {
	var got []string
	for _, m := range regexp.MustCompile(`(?m)^DEC_ATTN\((\w+), \w+, (\d+)\)$`).FindAllStringSubmatch(prefillKernelSource, -1) {
		for _, g8 := range []string{"", "_g8"} {
			got = append(got, "dec_attn_"+m[1]+"_d"+m[2]+g8, "dec_attn_rope_"+m[1]+"_d"+m[2]+g8)
		}
	}
	want := slices.Clone(decodeKernelNames)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("kernels_prefill.cu instantiates %v, the module loads %v", got, want)
	}
}
