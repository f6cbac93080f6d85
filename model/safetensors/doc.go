// Package safetensors reads and writes Hugging Face's safetensors format
// strictly: an 8-byte little-endian header length n, n bytes of JSON
// ({name: {dtype, shape, data_offsets: [begin, end]}, optional
// "__metadata__": {string: string}}), then the raw little-endian,
// row-major tensor bytes.
//
// Open checks everything before it hands out a File: the header length
// (at most MaxHeaderSize and inside the file), UTF-8, one JSON object with
// no duplicate names and no unknown fields, the dtypes (mapped to chorus
// tensor dtypes; the others are refused by name), shape x element size ==
// end - begin, and offsets that tile the data section exactly (sorted by
// offset, the first begins at 0, each begins where the previous ends, the
// last ends at the end of the file): no gaps, no overlaps, no trailing
// bytes, no truncation. Reads are positional ((*os.File).ReadAt) by byte
// range, so a caller reads only the bytes it needs and any number of
// goroutines may read one File.
//
// Checkpoints of several files ("model.safetensors.index.json" with a
// weight_map, or a directory of shards) are opened with OpenCheckpoint.
// Errors are *Error values naming the file, the tensor and the field;
// errors.Is works with ErrCorrupt, ErrTruncated, ErrNotFound, ErrDType and
// ErrShape.
//
// Why not a Go module: the format is a few hundred lines, and what chorus
// needs is exactly what the Go readers we found lack: positional reads of
// byte ranges without mapping or reading the whole file, duplicate-name
// and unknown-field rejection, sentinel errors, and errors that name the
// file and tensor. (nlpodyssey/safetensors and its fork
// maruel/safetensors deserialize a whole-file byte slice or mapping, accept
// duplicate JSON keys, and return untyped errors.)
package safetensors
