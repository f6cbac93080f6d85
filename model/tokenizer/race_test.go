//go:build race

package tokenizer

// goldenStride: under the race detector the golden test encodes every
// 8th document (the plain test run encodes them all; the race detector
// looks at concurrency, which TestConcurrentEncode covers, and the whole corpus
// took 21 s of a CI run under it).
const goldenStride = 8
