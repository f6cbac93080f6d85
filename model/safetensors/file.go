package safetensors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/chorus-rt/chorus/tensor"
)

// File is an open, validated safetensors file. Its methods are safe for
// concurrent use (reads are positional).
type File struct {
	Header
	Path string
	f    *os.File
	size int64
}

// Open opens and validates path. It reads only the 8-byte length and the
// header.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &Error{File: path, Msg: "open", Err: err, Kinds: notFoundIf(err)}
	}
	sf, err := newFile(path, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return sf, nil
}

func notFoundIf(err error) []error {
	if errors.Is(err, os.ErrNotExist) {
		return []error{ErrNotFound}
	}
	return nil
}

func newFile(path string, f *os.File) (*File, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, &Error{File: path, Msg: "stat", Err: err}
	}
	if !st.Mode().IsRegular() {
		return nil, &Error{File: path, Msg: "not a regular file", Kinds: []error{ErrCorrupt}}
	}
	h, err := ReadHeader(path, f, st.Size())
	if err != nil {
		return nil, err
	}
	return &File{Header: *h, Path: path, f: f, size: st.Size()}, nil
}

// ReadHeader reads and validates the header of a safetensors image of
// size bytes from r. name names it in errors.
func ReadHeader(name string, r io.ReaderAt, size int64) (*Header, error) {
	var lenBuf [8]byte
	if size < 8 {
		return nil, truncated(name, "", "header length", fmt.Sprintf("the file has %d bytes, fewer than the 8 of the length", size))
	}
	if err := readFull(r, lenBuf[:], 0); err != nil {
		return nil, readErr(name, "", "header length", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderSize {
		return nil, corrupt(name, "", "header length", fmt.Sprintf("%d bytes, more than the %d allowed", n, uint64(MaxHeaderSize)))
	}
	if int64(n) > size-8 {
		return nil, truncated(name, "", "header length", fmt.Sprintf("%d bytes announced, the file has %d after the length", n, size-8))
	}
	js := make([]byte, n)
	if err := readFull(r, js, 8); err != nil {
		return nil, readErr(name, "", "header", err)
	}
	h, err := ParseHeader(name, js, size-8-int64(n))
	if err != nil {
		return nil, err
	}
	h.DataStart = 8 + int64(n)
	return h, nil
}

func readFull(r io.ReaderAt, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

func readErr(file, tensor, field string, err error) *Error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return truncated(file, tensor, field, "the file ends early (changed since it was opened?)")
	}
	return &Error{File: file, Tensor: tensor, Field: field, Msg: "read", Err: err}
}

// Close closes the file.
func (f *File) Close() error { return f.f.Close() }

// Size is the file's size in bytes, as validated at Open.
func (f *File) Size() int64 { return f.size }

// Info returns a tensor's description; the error wraps ErrNotFound.
func (f *File) Info(name string) (Info, error) {
	i, ok := f.Lookup(name)
	if !ok {
		return Info{}, &Error{File: f.Path, Tensor: name, Msg: "no such tensor", Kinds: []error{ErrNotFound}}
	}
	return i, nil
}

// Names lists the tensors in data order.
func (f *File) Names() []string {
	out := make([]string, len(f.Tensors))
	for i, t := range f.Tensors {
		out[i] = t.Name
	}
	return out
}

// ReadRange reads len(p) bytes of tensor t starting off bytes into it,
// with one positional read. Reading past the tensor is an error, and a
// file that shrank since Open fails with ErrTruncated.
func (f *File) ReadRange(t Info, p []byte, off int64) error {
	if off < 0 || off > t.Size() || int64(len(p)) > t.Size()-off {
		return &Error{File: f.Path, Tensor: t.Name, Msg: fmt.Sprintf("range [%d, %d) outside the tensor's %d bytes", off, off+int64(len(p)), t.Size())}
	}
	if len(p) == 0 {
		return nil
	}
	if err := readFull(f.f, p, f.DataStart+t.Begin+off); err != nil {
		return readErr(f.Path, t.Name, "data", err)
	}
	return nil
}

// Tensor reads a whole tensor into a new host tensor.
func (f *File) Tensor(name string) (*tensor.Tensor, error) {
	info, err := f.Info(name)
	if err != nil {
		return nil, err
	}
	t, err := tensor.New(info.DType, info.Shape)
	if err != nil {
		return nil, &Error{File: f.Path, Tensor: name, Msg: "allocate", Err: err}
	}
	if err := f.ReadRange(info, t.Bytes(), 0); err != nil {
		return nil, err
	}
	return t, nil
}
