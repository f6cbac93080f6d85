package tokenizer

import "testing"

func corpusBytes(docs []string) int64 {
	var n int64
	for _, d := range docs {
		n += int64(len(d))
	}
	return n
}

// BenchmarkEncode encodes every corpus document once per iteration; MB/s is
// corpus bytes per second, as in testdata/reference_speed.json.
func BenchmarkEncode(b *testing.B) {
	docs := loadCorpus(b)
	for _, name := range goldenNames {
		b.Run(name, func(b *testing.B) {
			tok := loadGolden(b, name)
			b.SetBytes(corpusBytes(docs))
			for b.Loop() {
				for _, d := range docs {
					if _, err := tok.Encode(d, false); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkDecode decodes the ids of every corpus document once per
// iteration; MB/s is corpus bytes per second.
func BenchmarkDecode(b *testing.B) {
	docs := loadCorpus(b)
	for _, name := range goldenNames {
		b.Run(name, func(b *testing.B) {
			tok := loadGolden(b, name)
			all := make([][]int, len(docs))
			for i, d := range docs {
				ids, err := tok.Encode(d, false)
				if err != nil {
					b.Fatal(err)
				}
				all[i] = ids
			}
			b.SetBytes(corpusBytes(docs))
			for b.Loop() {
				for _, ids := range all {
					if _, err := tok.Decode(ids, false); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
