package plan

import (
	"errors"
	"fmt"
)

// ErrMessageSize is wrapped by Layout's errors: the message size does not fit
// the plan (alignment, chunk divisibility, or the min/max message size).
var ErrMessageSize = errors.New("plan: message size does not fit the plan")

// Layout maps one rank's chunks to bytes for one call of the collective. It
// follows the MSCCL++ executor's rules:
//
//   - The input and output sizes must be multiples of BufferAlignment, and
//     each must split into its chunk count in whole alignment units:
//     (bytes/alignment) % chunks == 0 for every buffer with chunks > 0.
//   - All three buffers use one chunk size: input bytes / input_chunks, or,
//     when the rank has no input chunks, output bytes / output_chunks; when
//     both counts are non-zero the two quotients must be equal. The chunk
//     size is therefore a multiple of the alignment. A rank with no chunks
//     in any buffer has chunk size 0 (chorus); one with scratch chunks but
//     no input or output chunks has no layout.
//   - Chunk i of any buffer starts at byte i*ChunkBytes; a range of size s
//     spans s*ChunkBytes bytes. Scratch offsets count data bytes; with the LL
//     protocol the packets there take twice as much space (ScratchBytes
//     accounts for it; packet encoding is the executor's business).
//   - The message size (input bytes; output bytes for allgather) must lie
//     in [MinMessageSize, MaxMessageSize].
//   - A thread-block group splits every range of an op into Parts parts in
//     whole alignment units, the first (units % Parts) parts one unit
//     larger (Part).
type Layout struct {
	Alignment    int64
	InputBytes   int64
	OutputBytes  int64
	ChunkBytes   int64
	ScratchBytes int64 // scratch to allocate: chunks*ChunkBytes, x2 for LL, x2 for double scratch, rounded up to Alignment
}

// Layout computes the byte layout of rank gpu for a call with the given
// input and output sizes in bytes.
func (p *Plan) Layout(gpu int, inputBytes, outputBytes int64) (Layout, error) {
	if gpu < 0 || gpu >= len(p.GPUs) {
		return Layout{}, fmt.Errorf("%w: no gpu %d", ErrMessageSize, gpu)
	}
	g := &p.GPUs[gpu]
	al := int64(p.BufferAlignment)
	if al <= 0 {
		return Layout{}, fmt.Errorf("%w: buffer alignment %d", ErrMessageSize, p.BufferAlignment)
	}
	if inputBytes < 0 || outputBytes < 0 || inputBytes%al != 0 || outputBytes%al != 0 {
		return Layout{}, fmt.Errorf("%w: input %d and output %d bytes must be multiples of the alignment %d", ErrMessageSize, inputBytes, outputBytes, al)
	}
	if g.InputChunks > 0 && (inputBytes/al)%int64(g.InputChunks) != 0 {
		return Layout{}, fmt.Errorf("%w: input %d bytes do not split into %d chunks of whole %d-byte units", ErrMessageSize, inputBytes, g.InputChunks, al)
	}
	if g.OutputChunks > 0 && (outputBytes/al)%int64(g.OutputChunks) != 0 {
		return Layout{}, fmt.Errorf("%w: output %d bytes do not split into %d chunks of whole %d-byte units", ErrMessageSize, outputBytes, g.OutputChunks, al)
	}
	var chunk int64
	switch {
	case g.InputChunks > 0 && g.OutputChunks > 0:
		chunk = inputBytes / int64(g.InputChunks)
		if o := outputBytes / int64(g.OutputChunks); o != chunk {
			return Layout{}, fmt.Errorf("%w: input chunk %d bytes != output chunk %d bytes", ErrMessageSize, chunk, o)
		}
	case g.InputChunks > 0:
		chunk = inputBytes / int64(g.InputChunks)
	case g.OutputChunks > 0:
		chunk = outputBytes / int64(g.OutputChunks)
	case g.ScratchChunks > 0:
		// MSCCL++ sizes chunks from the input or output; without either
		// the scratch size is undefined.
		return Layout{}, fmt.Errorf("%w: gpu %d has %d scratch chunks but neither input nor output chunks to size them by", ErrMessageSize, gpu, g.ScratchChunks)
	default:
		// No buffers at all (a synchronization-only rank): any sizes do,
		// since no op of the plan may touch this rank's buffers.
	}
	msg := inputBytes
	if p.Collective == AllGather {
		msg = outputBytes
	}
	if uint64(msg) < p.MinMessageSize || uint64(msg) > p.MaxMessageSize {
		return Layout{}, fmt.Errorf("%w: message %d bytes outside [%d, %d]", ErrMessageSize, msg, p.MinMessageSize, p.MaxMessageSize)
	}
	scratch := chunk * int64(g.ScratchChunks)
	if p.Protocol == LL {
		scratch *= 2
	}
	if p.UseDoubleScratchBuffer {
		scratch *= 2
	}
	scratch = (scratch + al - 1) / al * al
	return Layout{Alignment: al, InputBytes: inputBytes, OutputBytes: outputBytes, ChunkBytes: chunk, ScratchBytes: scratch}, nil
}

// Range returns the byte offset and length of chunks [index, index+size).
func (l Layout) Range(index, size int) (off, n int64) {
	return int64(index) * l.ChunkBytes, int64(size) * l.ChunkBytes
}

// Part returns the sub-range [off', off'+n') of the byte range [off, off+n)
// that part `part` of `parts` thread blocks handles: the range is cut into
// whole alignment units, each part gets units/parts of them and the first
// units%parts parts one more.
func (l Layout) Part(off, n int64, part, parts int) (int64, int64) {
	if parts <= 1 || l.Alignment <= 0 {
		return off, n
	}
	units := n / l.Alignment
	start := unitStart(units, int64(part), int64(parts))
	end := unitStart(units, int64(part)+1, int64(parts))
	return off + start*l.Alignment, (end - start) * l.Alignment
}

func unitStart(units, i, parts int64) int64 {
	q, r := units/parts, units%parts
	return i*q + min(i, r)
}

// AccessBytes returns the byte range of a within its buffer: Range of its
// chunks, cut to its thread-block-group part.
func (l Layout) AccessBytes(a Access) (off, n int64) {
	off, n = l.Range(a.Index, a.Size)
	return l.Part(off, n, a.Part, a.Parts)
}
