package safetensors

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/chorus-rt/chorus/tensor"
)

// Named is a tensor to write under a name.
type Named struct {
	Name   string
	Tensor *tensor.Tensor
}

// header builds the JSON header for ts in the given order, padded with
// spaces so the data section starts 8-byte aligned.
func header(ts []Named, meta map[string]string) ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	first := true
	if len(meta) > 0 {
		m, err := json.Marshal(meta)
		if err != nil {
			return nil, err
		}
		b.WriteString(`"` + MetadataKey + `":`)
		b.Write(m)
		first = false
	}
	seen := map[string]bool{}
	off := int64(0)
	for _, nt := range ts {
		switch {
		case nt.Name == "" || nt.Name == MetadataKey:
			return nil, &Error{Tensor: nt.Name, Msg: "reserved or empty tensor name"}
		case seen[nt.Name]:
			return nil, &Error{Tensor: nt.Name, Msg: "name given twice"}
		case nt.Tensor == nil:
			return nil, &Error{Tensor: nt.Name, Msg: "nil tensor"}
		case !nt.Tensor.IsHost():
			return nil, &Error{Tensor: nt.Name, Msg: fmt.Sprintf("tensor on %v; write host tensors", nt.Tensor.Device())}
		}
		seen[nt.Name] = true
		dt, err := DTypeName(nt.Tensor.DType())
		if err != nil {
			return nil, &Error{Tensor: nt.Name, Field: "dtype", Msg: err.Error(), Kinds: []error{ErrDType}}
		}
		shape := []int64(nt.Tensor.Shape())
		if shape == nil {
			shape = []int64{}
		}
		e, err := json.Marshal(struct {
			DType       string  `json:"dtype"`
			Shape       []int64 `json:"shape"`
			DataOffsets []int64 `json:"data_offsets"`
		}{dt, shape, []int64{off, off + nt.Tensor.NumBytes()}})
		if err != nil {
			return nil, err
		}
		k, _ := json.Marshal(nt.Name)
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.Write(k)
		b.WriteByte(':')
		b.Write(e)
		off += nt.Tensor.NumBytes()
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	return []byte(b.String()), nil
}

// Write writes ts (in this order) and meta as one safetensors image.
func Write(w io.Writer, ts []Named, meta map[string]string) error {
	h, err := header(ts, meta)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(h)))
	bw.Write(n[:])
	bw.Write(h)
	for _, nt := range ts {
		if _, err := bw.Write(nt.Tensor.Bytes()); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// WriteFile writes a safetensors file through a temporary file in the
// same directory and a rename, so a reader never sees half a file.
func WriteFile(path string, ts []Named, meta map[string]string) error {
	return atomicWrite(path, func(w io.Writer) error { return Write(w, ts, meta) })
}

func atomicWrite(path string, fn func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return &Error{File: path, Msg: "create", Err: err}
	}
	err = fn(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		if _, ok := err.(*Error); ok {
			return err
		}
		return &Error{File: path, Msg: "write", Err: err}
	}
	return nil
}

// IndexName is the index file of a checkpoint of several files.
const IndexName = "model.safetensors.index.json"

// WriteSharded writes ts into dir as files of at most maxBytes of tensor
// data each (a tensor larger than maxBytes gets a file of its own), named
// model-0000i-of-0000n.safetensors as Hugging Face does, plus
// model.safetensors.index.json. It returns the file names.
func WriteSharded(dir string, ts []Named, maxBytes int64, meta map[string]string) ([]string, error) {
	var groups [][]Named
	var size int64
	for _, nt := range ts {
		if nt.Tensor == nil {
			return nil, &Error{Tensor: nt.Name, Msg: "nil tensor"}
		}
		nb := nt.Tensor.NumBytes()
		if len(groups) == 0 || (size+nb > maxBytes && size > 0) {
			groups = append(groups, nil)
			size = 0
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], nt)
		size += nb
	}
	wm := map[string]string{}
	var names []string
	var total int64
	for i, g := range groups {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(groups))
		if err := WriteFile(filepath.Join(dir, name), g, meta); err != nil {
			return nil, err
		}
		for _, nt := range g {
			if _, dup := wm[nt.Name]; dup {
				return nil, &Error{Tensor: nt.Name, Msg: "name given twice"}
			}
			wm[nt.Name] = name
			total += nt.Tensor.NumBytes()
		}
		names = append(names, name)
	}
	idx := struct {
		Metadata  map[string]any    `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}{map[string]any{"total_size": total}, wm}
	err := atomicWrite(filepath.Join(dir, IndexName), func(w io.Writer) error {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(idx)
	})
	sort.Strings(names)
	return names, err
}
