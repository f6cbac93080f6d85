// Package cudasrc holds CUDA C snippets that several of chorus's kernel
// sources share (they are compiled at run time by NVRTC, without CUDA
// headers): callers prepend them to their own source.
package cudasrc
