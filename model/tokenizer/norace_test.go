//go:build !race

package tokenizer

// goldenStride: every document of the corpus is checked (see race_test.go).
const goldenStride = 1
