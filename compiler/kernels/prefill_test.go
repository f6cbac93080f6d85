package kernels

import (
	"regexp"
	"slices"
	"testing"

	"github.com/chorus-rt/chorus/tensor"
)

// TestPlanPrefill checks which attention calls take the prefill kernel,
// its tokens a block, block count, grid and kernel name.
func TestPlanPrefill(t *testing.T) {
	for _, c := range []struct {
		name                    string
		t, hq, hkv, d, seq, bat int
		dt                      tensor.DType
		aligned, ok             bool
		tq, blocks              int
		kernel                  string
	}{
		// Llama-3-8B, a 512-token prompt: 16 tokens of 4 heads a block,
		// 32 blocks a kv head
		{"llama3_prompt", 512, 32, 8, 128, 4133, 1, tensor.BFloat16, true, true, 16, 32, "prefill_attn_bf16_d128"},
		{"tp2", 512, 16, 4, 128, 4133, 1, tensor.BFloat16, true, true, 16, 32, "prefill_attn_bf16_d128"},
		{"mha_d64", 33, 4, 4, 64, 200, 1, tensor.Float16, true, true, 64, 1, "prefill_attn_f16_d64"},
		{"g8_tail", 33, 8, 1, 128, 200, 1, tensor.Float16, true, true, 8, 5, "prefill_attn_f16_d128"},
		{"g3", 48, 6, 2, 64, 64, 1, tensor.BFloat16, true, true, 21, 3, "prefill_attn_bf16_d64"},
		{"batch2", 66, 32, 8, 128, 200, 2, tensor.BFloat16, true, true, 16, 3, "prefill_attn_bf16_d128"},
		{"min_tokens", 16, 32, 8, 128, 64, 1, tensor.BFloat16, true, true, 16, 1, "prefill_attn_bf16_d128"},
		// decode (dec_attn), a few tokens a sequence (split-KV)
		{"decode", 1, 32, 8, 128, 4133, 1, tensor.BFloat16, true, false, 0, 0, ""},
		{"batch8_decode", 8, 32, 8, 128, 4133, 8, tensor.BFloat16, true, false, 0, 0, ""},
		{"batch32_decode", 32, 32, 8, 128, 4133, 32, tensor.BFloat16, true, false, 0, 0, ""},
		{"15_tokens", 15, 32, 8, 128, 64, 1, tensor.BFloat16, true, false, 0, 0, ""},
		{"batch2_15", 30, 32, 8, 128, 64, 2, tensor.BFloat16, true, false, 0, 0, ""},
		// shapes it does not take
		{"d256", 64, 8, 2, 256, 100, 1, tensor.BFloat16, true, false, 0, 0, ""},
		{"d80", 64, 4, 4, 80, 100, 1, tensor.BFloat16, true, false, 0, 0, ""},
		{"g16", 64, 32, 2, 128, 100, 1, tensor.BFloat16, true, false, 0, 0, ""},
		{"f32", 64, 32, 8, 128, 100, 1, tensor.Float32, true, false, 0, 0, ""},
		{"unaligned", 64, 32, 8, 128, 100, 1, tensor.BFloat16, false, false, 0, 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			dims := attnDims{t: c.t, hq: c.hq, hkv: c.hkv, d: c.d, maxSeq: c.seq, batch: c.bat}
			p, ok := planPrefill(dims, c.dt, c.aligned)
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
			if p.tq != c.tq || p.blocks != c.blocks || p.kernel(suf) != c.kernel {
				t.Errorf("plan %+v kernel %s, want tq %d blocks %d kernel %s", p, p.kernel(suf), c.tq, c.blocks, c.kernel)
			}
			if g := p.grid(dims); g != [3]uint32{uint32(c.blocks), uint32(c.hkv), uint32(c.bat)} {
				t.Errorf("grid %v", g)
			}
			if !slices.Contains(prefillKernelNames, p.kernel(suf)) {
				t.Errorf("kernel %s is not loaded", p.kernel(suf))
			}
		})
	}
}

// TestPrefillRowsCoverTokens walks the kernel's row mapping (block qb,
// row r: token qb·tq + r / G of the sequence, head r % G of the kv head's
// G, a row only while r / G < min(tq, tps - qb·tq)) and checks that every
// (token, head) of a sequence gets exactly one row.
func TestPrefillRowsCoverTokens(t *testing.T) {
	for _, g := range []int{1, 2, 3, 4, 5, 6, 7, 8} {
		for _, tps := range []int{16, 17, 33, 63, 64, 65, 512, 1000} {
			dims := attnDims{t: tps, hq: 2 * g, hkv: 2, d: 128, maxSeq: tps, batch: 1}
			p, ok := planPrefill(dims, tensor.BFloat16, true)
			if !ok {
				t.Fatalf("g %d tps %d: not planned", g, tps)
			}
			seen := make([]int, tps*g)
			for qb := range p.blocks {
				nt := min(p.tq, tps-qb*p.tq)
				if nt < 1 {
					t.Fatalf("g %d tps %d: block %d has no tokens", g, tps, qb)
				}
				for r := range prefillRows {
					if i := r / g; i < nt && i < p.tq {
						seen[(qb*p.tq+i)*g+r%g]++
					}
				}
			}
			for i, n := range seen {
				if n != 1 {
					t.Fatalf("g %d tps %d: token %d head %d has %d rows", g, tps, i/g, i%g, n)
				}
			}
		}
	}
}

// TestPrefillKernelNames: kernels_prefill.cu instantiates exactly the
// kernels the module loads.
func TestPrefillKernelNames(t *testing.T) {
	var got []string
	for _, m := range regexp.MustCompile(`(?m)^PREFILL_ATTN\((\w+), \w+, (\d+)\)$`).FindAllStringSubmatch(prefillKernelSource, -1) {
		got = append(got, "prefill_attn_"+m[1]+"_d"+m[2])
	}
	want := slices.Clone(prefillKernelNames)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("kernels_prefill.cu instantiates %v, the module loads %v", got, want)
	}
}
